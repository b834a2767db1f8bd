#include "text/tokenizer/bpe_model.h"

#include <queue>

#include "text/tokenizer/byte_level.h"

namespace tpserve {
namespace {

constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 16;

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      merges_(std::move(other.merges_)),
      ignore_merges_(other.ignore_merges_) {
  std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), byte_ids_);
}

Result<BpeModel> BpeModel::Create(std::unordered_map<std::string, int32_t> vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  bool ignore_merges) {
  BpeModel model;
  model.vocab_ = std::move(vocab);
  model.ignore_merges_ = ignore_merges;
  const auto& alphabet = ByteLevelAlphabet::Get();
  for (int b = 0; b < 256; ++b) {
    auto it = model.vocab_.find(alphabet.Encode(static_cast<unsigned char>(b)));
    if (it == model.vocab_.end()) {
      return InvalidArgument("model.vocab lacks the byte-level token for byte " +
                             std::to_string(b) + " ('" + alphabet.Encode(b) + "')");
    }
    model.byte_ids_[b] = it->second;
  }
  model.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = model.vocab_.find(left);
    auto r = model.vocab_.find(right);
    auto m = model.vocab_.find(left + right);
    if (l == model.vocab_.end() || r == model.vocab_.end() || m == model.vocab_.end()) {
      return InvalidArgument("model.merges[" + std::to_string(rank) + "] '" + left + " " + right +
                             "' uses a token that is not in model.vocab");
    }
    // A repeated merge keeps its first (highest-priority) rank.
    model.merges_.emplace(PairKey(l->second, r->second),
                          MergeResult{static_cast<int32_t>(rank), m->second});
  }
  return model;
}

void BpeModel::EncodePiece(std::string_view bytes, std::vector<int32_t>* ids) const {
  if (bytes.empty()) return;
  const bool cacheable = bytes.size() <= kMaxCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(bytes);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }

  std::vector<int32_t> symbols;
  bool whole_piece_in_vocab = false;
  if (ignore_merges_) {
    std::string mapped;
    const auto& alphabet = ByteLevelAlphabet::Get();
    for (char c : bytes) mapped += alphabet.Encode(static_cast<unsigned char>(c));
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      symbols.push_back(it->second);
      whole_piece_in_vocab = true;
    }
  }
  if (!whole_piece_in_vocab) {
    symbols.reserve(bytes.size());
    for (char c : bytes) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    MergeSymbols(&symbols);
  }

  ids->insert(ids->end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(symbols));
  }
}

// Repeatedly merges the adjacent pair with the lowest rank (leftmost on ties). Symbols form a
// doubly linked list over `symbols`; candidate pairs sit in a min-heap and are re-checked when
// popped, since a merge can invalidate them.
void BpeModel::MergeSymbols(std::vector<int32_t>* symbols) const {
  const int n = static_cast<int>(symbols->size());
  if (n < 2) return;
  std::vector<int32_t>& id = *symbols;
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    const int right = next[left];
    auto it = merges_.find(PairKey(id[left], id[right]));
    if (it != merges_.end()) heap.push({it->second.rank, left, id[left], id[right]});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);

  std::vector<bool> removed(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int left = c.left;
    if (removed[left] || id[left] != c.left_id || next[left] < 0) continue;
    const int right = next[left];
    if (id[right] != c.right_id) continue;
    id[left] = merges_.at(PairKey(c.left_id, c.right_id)).merged_id;
    removed[right] = true;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    push_pair(prev[left]);
    push_pair(left);
  }
  int out = 0;
  for (int i = 0; i >= 0; i = next[i]) id[out++] = id[i];
  id.resize(out);
}

}  // namespace tpserve
