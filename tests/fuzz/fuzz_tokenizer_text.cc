// The real Llama-3 and Qwen2 tokenizers on arbitrary bytes (the first byte picks one), and the
// incremental detokenizer on the ids:
//  - Encode never crashes; ids are inside the vocabulary;
//  - Llama-3 (no normalizer): for valid UTF-8, Decode(Encode(text)) == text;
//  - streaming the ids through IncrementalDecoder gives exactly Decode(ids) (its contract), and
//    never emits a broken UTF-8 sequence;
//  - the same for arbitrary ids made from the bytes (any token sequence a model may sample).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const tpserve::Tokenizer& Load(const char* name) {
  const std::string path = std::string(TPSERVE_FUZZ_ASSETS_DIR) + "/tokenizers/" + name + "/tokenizer.json";
  static std::vector<tpserve::Tokenizer*> keep;
  auto tokenizer = tpserve::Tokenizer::FromFile(path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "cannot load %s: %s (run scripts/fetch_assets.sh)\n", path.c_str(),
                 tokenizer.status().ToString().c_str());
    std::abort();
  }
  keep.push_back(new tpserve::Tokenizer(std::move(tokenizer).value()));
  return *keep.back();
}

void CheckStreaming(const tpserve::Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  auto whole = tokenizer.Decode(ids);
  tpserve::IncrementalDecoder stream(tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    auto piece = stream.Push(id);
    FUZZ_CHECK(piece.ok() == whole.ok() || !piece.ok(), "Push failed where Decode did not");
    if (!piece.ok()) return;
    FUZZ_CHECK(tpserve::FindInvalidUtf8(*piece) == std::string::npos, "Push emitted broken UTF-8");
    streamed += *piece;
  }
  streamed += stream.Finish();
  if (whole.ok()) FUZZ_CHECK(streamed == *whole, "streamed text differs from Decode of all the ids");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpserve::Tokenizer& llama3 = Load("llama3");
  static const tpserve::Tokenizer& qwen2 = Load("qwen2");
  if (size == 0) return 0;
  const bool use_llama3 = (data[0] & 1) == 0;
  const tpserve::Tokenizer& tokenizer = use_llama3 ? llama3 : qwen2;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tokenizer.Encode(text);
  if (ids.ok()) {
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size(), "an id outside the vocabulary");
    if (use_llama3 && tpserve::FindInvalidUtf8(text) == std::string::npos) {
      auto back = tokenizer.Decode(*ids);
      FUZZ_CHECK(back.ok() && *back == text, "Llama-3: Decode(Encode(text)) != text");
    }
    CheckStreaming(tokenizer, *ids);
  }
  // The bytes as ids (3 bytes each), as a model might sample them.
  std::vector<int32_t> sampled;
  for (size_t i = 1; i + 3 <= size; i += 3) {
    const uint32_t raw = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16);
    sampled.push_back(static_cast<int32_t>(raw % static_cast<uint32_t>(tokenizer.vocab_size())));
  }
  CheckStreaming(tokenizer, sampled);
  return 0;
}
