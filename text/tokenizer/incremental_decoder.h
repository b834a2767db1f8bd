// Streams text out token by token. Each Push() returns the text that is now final: never a
// broken UTF-8 sequence (bytes of a character split across tokens are held until it completes),
// and never a lost byte: the concatenation of every Push() and the Finish() is exactly
// Tokenizer::Decode() of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "text/tokenizer/tokenizer.h"

namespace tpserve {

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  Result<std::string> Push(int32_t id);
  std::string Finish();  // flushes held bytes (an incomplete sequence becomes U+FFFD)

  size_t held_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace tpserve
