// Byte-level BPE: a vocabulary of byte-level strings and merges ranked by priority. Encoding a
// pre-token applies the lowest-ranked merge first, leftmost first on ties, exactly as Hugging
// Face tokenizers' BPE model does.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tpserve {

class BpeModel {
 public:
  // vocab: byte-level string -> id. merges: (left, right) in rank order.
  // ignore_merges: a pre-token that is itself in the vocabulary maps straight to its id
  // (Llama-3 sets this).
  static Result<BpeModel> Create(std::unordered_map<std::string, int32_t> vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 bool ignore_merges);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;

  // Appends the ids of one pre-token given as raw bytes.
  void EncodePiece(std::string_view bytes, std::vector<int32_t>* ids) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  BpeModel() = default;
  void MergeSymbols(std::vector<int32_t>* symbols) const;

  struct MergeResult {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, MergeResult> merges_;
  int32_t byte_ids_[256] = {};  // id of each single byte's alphabet character
  bool ignore_merges_ = false;

  // Pre-tokens repeat a lot in real text; cache short ones.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tpserve
