#include "text/tokenizer/incremental_decoder.h"

#include "text/tokenizer/utf8.h"

namespace tpserve {

Result<std::string> IncrementalDecoder::Push(int32_t id) {
  ASSIGN_OR_RETURN(std::string bytes, tokenizer_.DecodeBytes({&id, 1}, skip_special_));
  pending_ += bytes;
  std::string text;
  const size_t consumed = AppendUtf8Lossy(pending_, /*final=*/false, &text);
  pending_.erase(0, consumed);
  return text;
}

std::string IncrementalDecoder::Finish() {
  std::string text;
  AppendUtf8Lossy(pending_, /*final=*/true, &text);
  pending_.clear();
  return text;
}

}  // namespace tpserve
