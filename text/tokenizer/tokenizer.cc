#include "text/tokenizer/tokenizer.h"

#include "common/bounded_json.h"

#include "common/json_int.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/tokenizer_json.h"
#include "text/tokenizer/utf8.h"

namespace tpserve {
using nlohmann::json;

namespace {

// GPT-2's pre-tokenizer regex, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids index a table of every token; the largest public vocabularies have ~256k.
constexpr int32_t kMaxTokenIds = 1 << 24;

enum class Normalization { kNfc, kNfd, kNfkc, kNfkd };

std::string EscapeRegex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string TypeOf(const json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// node[key] without a copy (json::value returns one), or null (which iterates as empty) when
// node has no such member.
const json& Member(const json& node, const char* key) {
  static const json kNull;
  if (!node.is_object()) return kNull;
  auto it = node.find(key);
  return it != node.end() ? *it : kNull;
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

struct Tokenizer::Pipeline {
  std::vector<Normalization> normalizers;
  std::vector<RegexSplitter> splitters;  // applied in order, each to the previous one's pieces
  std::unique_ptr<BpeModel> bpe;
  std::array<std::vector<const AddedToken*>, 256> added_by_first_byte;  // longest first

  Status AddNormalizer(const json& node, const std::string& source);
  Status AddPreTokenizer(const json& node, const std::string& source);
  std::string Normalize(std::string_view text) const;
};

Status Tokenizer::Pipeline::AddNormalizer(const json& node, const std::string& source) {
  if (node.is_null()) return Status::Ok();
  const std::string type = TypeOf(node);
  if (type == "Sequence") {
    for (const auto& child : node.value("normalizers", json::array())) {
      RETURN_IF_ERROR(AddNormalizer(child, source));
    }
    return Status::Ok();
  }
  if (type == "NFC") normalizers.push_back(Normalization::kNfc);
  else if (type == "NFD") normalizers.push_back(Normalization::kNfd);
  else if (type == "NFKC") normalizers.push_back(Normalization::kNfkc);
  else if (type == "NFKD") normalizers.push_back(Normalization::kNfkd);
  else return Unimplemented(source + ": normalizer type '" + type + "' is not supported");
  return Status::Ok();
}

Status Tokenizer::Pipeline::AddPreTokenizer(const json& node, const std::string& source) {
  if (node.is_null()) return Status::Ok();
  const std::string type = TypeOf(node);
  auto add_regex = [&](const std::string& pattern) -> Status {
    auto splitter = RegexSplitter::Compile(pattern);
    if (!splitter.ok()) return splitter.status().WithContext(source + ": pre_tokenizer");
    splitters.push_back(std::move(splitter).value());
    return Status::Ok();
  };
  if (type == "Sequence") {
    for (const auto& child : node.value("pretokenizers", json::array())) {
      RETURN_IF_ERROR(AddPreTokenizer(child, source));
    }
    return Status::Ok();
  }
  if (type == "Split") {
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" || node.value("invert", false)) {
      return Unimplemented(source + ": pre_tokenizer Split with behavior '" + behavior +
                           "' (invert " + (node.value("invert", false) ? "true" : "false") +
                           ") is not supported; only Isolated");
    }
    const json& pattern = node.value("pattern", json::object());
    if (pattern.contains("Regex")) return add_regex(pattern["Regex"].get<std::string>());
    if (pattern.contains("String")) return add_regex(EscapeRegex(pattern["String"].get<std::string>()));
    return InvalidArgument(source + ": pre_tokenizer Split has no Regex or String pattern");
  }
  if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false)) {
      return Unimplemented(source + ": pre_tokenizer ByteLevel with add_prefix_space is not supported");
    }
    return node.value("use_regex", true) ? add_regex(kGpt2Pattern) : Status::Ok();
  }
  if (type == "Digits") return add_regex(node.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  return Unimplemented(source + ": pre_tokenizer type '" + type + "' is not supported");
}

std::string Tokenizer::Pipeline::Normalize(std::string_view text) const {
  std::string current(text);
  for (Normalization form : normalizers) {
    int options = UTF8PROC_STABLE;
    switch (form) {
      case Normalization::kNfc: options |= UTF8PROC_COMPOSE; break;
      case Normalization::kNfd: options |= UTF8PROC_DECOMPOSE; break;
      case Normalization::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case Normalization::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* normalized = nullptr;
    const utf8proc_ssize_t length = utf8proc_map(
        reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
        static_cast<utf8proc_ssize_t>(current.size()), &normalized,
        static_cast<utf8proc_option_t>(options));
    if (length >= 0) current.assign(reinterpret_cast<char*>(normalized), length);
    std::free(normalized);
  }
  return current;
}

Tokenizer::Tokenizer() : pipeline_(std::make_unique<Pipeline>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  return FromJson(text, path);
}

Result<Tokenizer> Tokenizer::FromJson(std::string_view text, const std::string& source) {
  ASSIGN_OR_RETURN(TokenizerJson parsed, ParseTokenizerJson(text, source));
  const json& root = parsed.settings;
  if (!root.is_object()) return InvalidArgument(source + ": not a JSON object");

  const json& model = Member(root, "model");
  if (TypeOf(model) != "BPE") {
    return Unimplemented(source + ": model type '" + TypeOf(model) +
                         "' is not supported (only byte-level BPE)");
  }
  if (model.value("byte_fallback", false)) {
    return Unimplemented(source + ": BPE with byte_fallback (SentencePiece-style) is not supported");
  }
  const json& pre_tokenizer = Member(root, "pre_tokenizer");
  if (pre_tokenizer.dump().find("\"ByteLevel\"") == std::string::npos) {
    return Unimplemented(source + ": pre_tokenizer has no ByteLevel step; only byte-level BPE "
                                  "tokenizers are supported");
  }
  if (!parsed.has_vocab) return InvalidArgument(source + ": model.vocab is missing");

  Tokenizer tokenizer;
  Pipeline& pipeline = *tokenizer.pipeline_;
  try {
    RETURN_IF_ERROR(pipeline.AddNormalizer(Member(root, "normalizer"), source));
    RETURN_IF_ERROR(pipeline.AddPreTokenizer(pre_tokenizer, source));

    std::unordered_map<std::string, int32_t>& vocab = parsed.vocab;
    int32_t max_id = parsed.max_vocab_id;
    for (const auto& entry : Member(root, "added_tokens")) {
      AddedToken token{.id = JsonInt<int32_t>(entry.at("id"), "added_tokens[].id"),
                       .content = entry.at("content").get<std::string>(),
                       .special = entry.value("special", false),
                       .lstrip = entry.value("lstrip", false),
                       .rstrip = entry.value("rstrip", false)};
      if (token.content.empty()) return InvalidArgument(source + ": added token with empty content");
      max_id = std::max(max_id, token.id);
      tokenizer.added_tokens_.push_back(std::move(token));
    }

    if (max_id >= kMaxTokenIds) {
      return InvalidArgument(source + ": token id " + std::to_string(max_id) + " is beyond the " +
                             std::to_string(kMaxTokenIds) + " ids a vocabulary may have");
    }
    tokenizer.id_to_token_.assign(static_cast<size_t>(max_id) + 1, std::string());
    for (const auto& [token, id] : vocab) {
      if (id < 0) return InvalidArgument(source + ": token '" + token + "' has a negative id");
      tokenizer.id_to_token_[id] = token;
    }
    for (size_t i = 0; i < tokenizer.added_tokens_.size(); ++i) {
      const AddedToken& token = tokenizer.added_tokens_[i];
      if (token.id < 0) return InvalidArgument(source + ": added token '" + token.content + "' has a negative id");
      tokenizer.id_to_token_[token.id] = token.content;
      tokenizer.added_by_id_[token.id] = i;
      tokenizer.added_by_content_[token.content] = token.id;
      pipeline.added_by_first_byte[static_cast<unsigned char>(token.content[0])].push_back(&token);
    }
    for (auto& candidates : pipeline.added_by_first_byte) {
      std::stable_sort(candidates.begin(), candidates.end(), [](const auto* a, const auto* b) {
        return a->content.size() > b->content.size();
      });
    }

    ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Create(std::move(vocab), parsed.merges,
                                                    model.value("ignore_merges", false)));
    pipeline.bpe = std::make_unique<BpeModel>(std::move(bpe));

    RETURN_IF_ERROR(tokenizer.LoadPostProcessor(Member(root, "post_processor"), source));
  } catch (const std::exception& e) {  // nlohmann's, and JsonInt's out_of_range
    return InvalidArgument(source + ": malformed tokenizer.json: " + e.what());
  }
  return tokenizer;
}

Status Tokenizer::LoadPostProcessor(const json& node, const std::string& source) {
  if (node.is_null()) return Status::Ok();
  const std::string type = TypeOf(node);
  if (type == "Sequence") {
    for (const auto& child : node.value("processors", json::array())) {
      RETURN_IF_ERROR(LoadPostProcessor(child, source));
    }
    return Status::Ok();
  }
  if (type == "ByteLevel") return Status::Ok();  // only adjusts offsets
  if (type != "TemplateProcessing") {
    return Unimplemented(source + ": post_processor type '" + type + "' is not supported");
  }
  const json& special = node.value("special_tokens", json::object());
  bool before_text = true;
  for (const auto& piece : node.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      before_text = false;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!special.contains(name)) {
      return InvalidArgument(source + ": post_processor template names '" + name +
                             "' but special_tokens does not define it");
    }
    for (const auto& id : special.at(name).at("ids")) {
      (before_text ? prefix_ids_ : suffix_ids_).push_back(JsonInt<int32_t>(id, "post_processor special_tokens ids"));
    }
  }
  return Status::Ok();
}

std::optional<std::pair<size_t, const AddedToken*>> Tokenizer::FindAddedToken(
    std::string_view text, size_t from, bool parse_special,
    std::span<const std::pair<size_t, size_t>> plain) const {
  // The first range that ends after i. Ranges are sorted and disjoint (their ends ascend): found by
  // bisection, since scanning from the first range at every call made a chat of n messages (n
  // added tokens, n ranges) cost n^2 on the HTTP thread that tokenizes it.
  auto next_plain = std::partition_point(plain.begin(), plain.end(),
                                         [from](const std::pair<size_t, size_t>& r) { return r.second <= from; });
  for (size_t i = from; i < text.size(); ++i) {
    while (next_plain != plain.end() && next_plain->second <= i) ++next_plain;
    for (const AddedToken* token :
         pipeline_->added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      if (token->special && !parse_special) continue;
      if (token->special && next_plain != plain.end() && next_plain->first < i + token->content.size()) {
        continue;  // [i, i + size) overlaps the range [first, second) since second > i
      }
      if (text.compare(i, token->content.size(), token->content) == 0) {
        return std::make_pair(i, token);
      }
    }
  }
  return std::nullopt;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  const std::string normalized = pipeline_->Normalize(text);
  std::vector<std::string_view> pieces{normalized};
  std::vector<std::string_view> next;
  for (const RegexSplitter& splitter : pipeline_->splitters) {
    next.clear();
    for (std::string_view piece : pieces) splitter.Split(piece, &next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) pipeline_->bpe->EncodePiece(piece, ids);
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                                               bool parse_special) const {
  return EncodeImpl(text, add_special_tokens, parse_special, {});
}

Result<std::vector<int32_t>> Tokenizer::EncodeWithPlainRanges(
    std::string_view text, std::span<const std::pair<size_t, size_t>> plain) const {
  for (size_t i = 0; i < plain.size(); ++i) {
    if (plain[i].first > plain[i].second || plain[i].second > text.size() ||
        (i > 0 && plain[i].first < plain[i - 1].second)) {
      return InvalidArgument("plain ranges must be sorted, non-overlapping and inside the text");
    }
  }
  return EncodeImpl(text, /*add_special_tokens=*/false, /*parse_special=*/true, plain);
}

Result<std::vector<int32_t>> Tokenizer::EncodeImpl(std::string_view text, bool add_special_tokens,
                                                   bool parse_special,
                                                   std::span<const std::pair<size_t, size_t>> plain) const {
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgument("text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  size_t position = 0;
  while (position < text.size()) {
    auto match = FindAddedToken(text, position, parse_special, plain);
    if (!match) {
      EncodeText(text.substr(position), &ids);
      break;
    }
    auto [start, token] = *match;
    size_t end = start + token->content.size();
    if (token->lstrip) {
      while (start > position && IsAsciiSpace(text[start - 1])) --start;
    }
    if (token->rstrip) {
      while (end < text.size() && IsAsciiSpace(text[end])) ++end;
    }
    EncodeText(text.substr(position, start - position), &ids);
    ids.push_back(token->id);
    position = end;
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

Result<std::string> Tokenizer::DecodeBytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  const auto& alphabet = ByteLevelAlphabet::Get();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || id_to_token_[id].empty()) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                             std::to_string(vocab_size()) + ")");
    }
    if (auto added = added_by_id_.find(id); added != added_by_id_.end()) {
      if (!(skip_special && added_tokens_[added->second].special)) {
        bytes += added_tokens_[added->second].content;
      }
      continue;
    }
    if (!alphabet.Decode(id_to_token_[id], &bytes)) bytes += id_to_token_[id];
  }
  return bytes;
}

Result<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  ASSIGN_OR_RETURN(std::string bytes, DecodeBytes(ids, skip_special));
  return Utf8Lossy(bytes);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || id_to_token_[id].empty()) return std::nullopt;
  return id_to_token_[id];
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end()) {
    return it->second;
  }
  const auto& vocab = pipeline_->bpe->vocab();
  if (auto it = vocab.find(std::string(token)); it != vocab.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_tokens_[it->second].special;
}

}  // namespace tpserve
