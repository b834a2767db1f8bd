// UTF-8 helpers for the tokenizer and for streaming text out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpserve {

void AppendUtf8(char32_t codepoint, std::string* out);

// Offset of the first byte that is not part of a well-formed UTF-8 sequence, or npos.
size_t FindInvalidUtf8(std::string_view bytes);

// Appends `bytes` to `out` as well-formed UTF-8: each ill-formed subsequence (a maximal subpart,
// as Unicode §3.9 and WHATWG define it) becomes U+FFFD. With final = false, an incomplete
// sequence at the end that later bytes could still complete is held back rather than replaced.
// Returns the number of bytes consumed; the caller keeps the rest for the next call. The output
// for a byte string never depends on how it was cut into calls.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

inline std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

}  // namespace tpserve
