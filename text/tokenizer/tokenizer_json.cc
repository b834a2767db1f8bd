#include "text/tokenizer/tokenizer_json.h"

#include <algorithm>
#include <optional>

#include "common/bounded_json.h"
#include "common/json_int.h"

namespace tpserve {
namespace {

using nlohmann::json;

// nlohmann's SAX events for one tokenizer.json. Inside model.vocab and model.merges the values go
// straight into TokenizerJson's containers; everywhere else a JSON tree is built, as json::parse
// would build it (a repeated key keeps its last value).
class TokenizerJsonReader {
 public:
  TokenizerJsonReader(TokenizerJson* out, const std::string& source) : out_(out), source_(source) {}

  const std::string& error() const { return error_; }

  bool null() { return Value(json()); }
  bool boolean(bool v) { return Value(json(v)); }
  bool number_integer(json::number_integer_t v) { return Value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return Value(json(v)); }
  bool binary(json::binary_t& v) { return Value(json(std::move(v))); }
  bool string(std::string& v) {
    if (region_ == Region::kMerges && pair_depth_ == 1) {
      if (pair_.size() == 2)
        return Fail("model.merges[" + std::to_string(out_->merges.size()) +
                    "] has more than two parts");
      pair_.push_back(std::move(v));
      return true;
    }
    if (region_ == Region::kMerges) {
      const size_t space = v.find(' ');
      if (space == std::string::npos) {
        return Fail("model.merges[" + std::to_string(out_->merges.size()) + "] " +
                    DescribeJsonForError(json(v)) + " is not \"left right\"");
      }
      out_->merges.emplace_back(v.substr(0, space), v.substr(space + 1));
      return true;
    }
    return Value(json(std::move(v)));
  }

  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }

  bool start_object(size_t) {
    if (region_ == Region::kTree && AtModel() && key_ == "vocab") {
      region_ = Region::kVocab;
      out_->has_vocab = true;
      out_->vocab.reserve(
          1 << 16);  // one rehash (to 128k) for Llama-3, none for smaller vocabularies
      return true;
    }
    if (region_ != Region::kTree)
      return Fail(RegionName() + " holds an object where a " + ValueKind() + " belongs");
    return Open(json::object());
  }
  bool end_object() {
    if (region_ == Region::kVocab) {
      region_ = Region::kTree;
      return true;
    }
    return Close();
  }

  bool start_array(size_t) {
    if (region_ == Region::kTree && AtModel() && key_ == "merges") {
      region_ = Region::kMerges;
      out_->merges.clear();
      return true;
    }
    if (region_ == Region::kMerges && pair_depth_ == 0) {
      pair_depth_ = 1;
      pair_.clear();
      return true;
    }
    if (region_ != Region::kTree)
      return Fail(RegionName() + " holds an array where a " + ValueKind() + " belongs");
    return Open(json::array());
  }
  bool end_array() {
    if (region_ == Region::kMerges && pair_depth_ == 1) {
      pair_depth_ = 0;
      if (pair_.size() != 2) {
        return Fail("model.merges[" + std::to_string(out_->merges.size()) +
                    "] is not a pair of strings");
      }
      out_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    if (region_ == Region::kMerges) {
      region_ = Region::kTree;
      return true;
    }
    return Close();
  }

  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = source_ + ": not valid JSON (" + e.what() + ")";
    return false;
  }

 private:
  enum class Region { kTree, kVocab, kMerges };

  // True when the next value is a member of the top-level "model" object.
  bool AtModel() const {
    return path_.size() == 2 && path_[1] == "{model" && open_.back()->is_object();
  }

  std::string RegionName() const {
    return region_ == Region::kVocab ? "model.vocab" : "model.merges";
  }
  std::string ValueKind() const { return region_ == Region::kVocab ? "token id" : "merge"; }

  bool Value(json value) {
    if (region_ == Region::kVocab) return VocabId(value);
    if (region_ == Region::kMerges) {
      return Fail("model.merges[" + std::to_string(out_->merges.size()) + "] is " +
                  DescribeJsonForError(value) + ", not a pair of strings");
    }
    Place(std::move(value));
    return true;
  }

  bool VocabId(const json& value) {
    const std::optional<int32_t> id = JsonIntIfFits<int32_t>(value);
    if (!id) return Fail(JsonIntError<int32_t>(value, "model.vocab[\"" + key_ + "\"]"));
    out_->vocab.insert_or_assign(std::move(key_), *id);
    out_->max_vocab_id = std::max(out_->max_vocab_id, *id);
    return true;
  }

  // Puts `value` where the tree's open container expects it; returns where it went.
  json* Place(json value) {
    if (open_.empty()) {
      out_->settings = std::move(value);
      return &out_->settings;
    }
    json& parent = *open_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(value));
    parent.push_back(std::move(value));
    return &parent.back();
  }

  bool Open(json container) {
    path_.push_back(open_.empty() ? "" : open_.back()->is_object() ? "{" + key_ : "[");
    open_.push_back(Place(std::move(container)));
    return true;
  }
  bool Close() {
    open_.pop_back();
    path_.pop_back();
    return true;
  }

  bool Fail(const std::string& message) {
    error_ = source_ + ": " + message;
    return false;
  }

  TokenizerJson* out_;
  const std::string& source_;
  std::string error_;
  std::vector<json*> open_;  // the tree's open containers, outermost first
  std::vector<std::string>
      path_;         // per open container: "{key" (member of an object), "[" or "" (root)
  std::string key_;  // the last key read
  Region region_ = Region::kTree;
  int pair_depth_ = 0;             // 1 inside one ["left", "right"] merge
  std::vector<std::string> pair_;  // the parts of that merge so far
};

}  // namespace

Result<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& source) {
  RETURN_IF_ERROR(CheckJsonDepth(text, source));
  TokenizerJson out;
  TokenizerJsonReader reader(&out, source);
  bool parsed = false;
  try {
    parsed = json::sax_parse(text, &reader);
  } catch (const json::exception& e) {  // a number out of range, raised outside parse_error
    return InvalidArgument(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!parsed) {
    return InvalidArgument(reader.error().empty() ? source + ": not valid JSON" : reader.error());
  }
  return out;
}

}  // namespace tpserve
