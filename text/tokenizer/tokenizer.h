// A Hugging Face tokenizer.json with a byte-level BPE model (the Llama-3 and Qwen2 families):
// added/special tokens matched first (never split), then the normalizer (NFC), the regex
// pre-tokenizer, byte-level mapping and BPE; decode maps ids back to bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "text/tokenizer/bpe_model.h"
#include "text/tokenizer/regex_splitter.h"

namespace tpserve {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;  // the match absorbs whitespace on its left
  bool rstrip = false;  // ... and on its right
};

class Tokenizer {
 public:
  static Result<Tokenizer> FromFile(const std::string& tokenizer_json_path);
  static Result<Tokenizer> FromJson(std::string_view tokenizer_json, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (which must be valid UTF-8). add_special_tokens applies the
  // post-processor's template (e.g. Llama-3's <|begin_of_text|>). With parse_special false,
  // special-token strings in the text are encoded as plain text (safe for untrusted input).
  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = false,
                                      bool parse_special = true) const;
  // Encode(text) with special tokens parsed, except where a match would overlap one of `plain`
  // (sorted, non-overlapping [begin, end) byte ranges): text from an untrusted source, such as
  // chat messages inside a trusted template, is encoded as text there. The text between special
  // tokens is encoded whole, as for any text.
  Result<std::vector<int32_t>> EncodeWithPlainRanges(std::string_view text,
                                                     std::span<const std::pair<size_t, size_t>> plain) const;

  // The raw bytes that `ids` stand for (may end inside a UTF-8 sequence).
  Result<std::string> DecodeBytes(std::span<const int32_t> ids, bool skip_special = false) const;
  // DecodeBytes turned into valid UTF-8 (ill-formed bytes become U+FFFD).
  Result<std::string> Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Token string as stored in the vocabulary (byte-level form for BPE tokens).
  std::optional<std::string> IdToToken(int32_t id) const;
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }  // added by template

 private:
  struct Pipeline;
  Tokenizer();

  Status LoadPostProcessor(const nlohmann::json& node, const std::string& source);
  void EncodeText(std::string_view text, std::vector<int32_t>* ids) const;
  // The leftmost added token in text[from, ...) (longest at that position) and where it starts.
  // A special token overlapping one of `plain` is skipped as when parse_special is false.
  std::optional<std::pair<size_t, const AddedToken*>> FindAddedToken(
      std::string_view text, size_t from, bool parse_special,
      std::span<const std::pair<size_t, size_t>> plain = {}) const;
  Result<std::vector<int32_t>> EncodeImpl(std::string_view text, bool add_special_tokens, bool parse_special,
                                          std::span<const std::pair<size_t, size_t>> plain) const;

  std::unique_ptr<Pipeline> pipeline_;
  std::vector<std::string> id_to_token_;  // "" for unused ids
  std::vector<AddedToken> added_tokens_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::vector<int32_t> prefix_ids_;  // post-processor template, before the text
  std::vector<int32_t> suffix_ids_;  // ... and after it
};

}  // namespace tpserve
