#include "common/bounded_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tpserve {

size_t JsonNestingDepth(std::string_view text, size_t limit) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Status CheckJsonDepth(std::string_view text, std::string_view what) {
  if (JsonNestingDepth(text) <= kMaxJsonDepth) return Status::Ok();
  return InvalidArgument(std::string(what) + ": JSON nested deeper than " +
                         std::to_string(kMaxJsonDepth) + " levels");
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  // A regular file in one allocation of its size and one read: a stream buffer grows by copying,
  // which for a 9 MB tokenizer.json cost more than parsing it. Anything else (a pipe, a process
  // substitution) and whatever a growing file has left are read as a stream.
  std::string text;
  std::error_code error;
  const uintmax_t size = std::filesystem::is_regular_file(path, error) ? std::filesystem::file_size(path, error) : 0;
  if (!error && size > 0) {
    text.resize(static_cast<size_t>(size));
    in.read(text.data(), static_cast<std::streamsize>(size));
    text.resize(static_cast<size_t>(in.gcount()));
  }
  std::ostringstream rest;
  if (in) rest << in.rdbuf();
  if (in.bad()) return DataLoss(path + ": read error");
  text += rest.str();
  return text;
}

namespace {

template <class Json>
std::string Describe(const Json& value) {
  if (value.is_structured()) return value.is_array() ? "an array" : "an object";
  constexpr size_t kMaxBytes = 64;
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kMaxBytes) text = text.substr(0, kMaxBytes) + "...";
  return text;
}

}  // namespace

std::string DescribeJsonForError(const nlohmann::json& value) {
  return Describe(value);
}
std::string DescribeJsonForError(const nlohmann::ordered_json& value) {
  return Describe(value);
}

}  // namespace tpserve
