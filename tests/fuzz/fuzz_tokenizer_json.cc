// tokenizer.json on arbitrary contents: an error naming the problem, never a crash; an accepted
// tokenizer encodes and decodes a fixed text without crashing.
#include <cstdint>
#include <string_view>

#include "text/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = tpserve::Tokenizer::FromJson(json, "fuzz/tokenizer.json");
  if (!tokenizer.ok()) {
    FUZZ_CHECK(!tokenizer.status().message().empty(), "an error without a message");
    return 0;
  }
  auto ids = tokenizer->Encode("Hello, wörld! 123 ナ\n\t  x", /*add_special_tokens=*/true);
  if (ids.ok()) {
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tokenizer->vocab_size(), "an id outside the vocabulary");
    (void)tokenizer->Decode(*ids);
  }
  return 0;
}
