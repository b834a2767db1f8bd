// JSON that comes from outside the process (request bodies, checkpoint, tokenizer and profile
// files, a server's replies) is parsed only through these. nlohmann's parser itself is iterative,
// but copying, comparing and dumping a value recurse once per level of nesting, so a 160 KB body of
// 80,000 `[` overflowed the stack wherever such a value was copied or put into an error message.
// Real inputs nest a few levels; anything deeper than kMaxJsonDepth is refused before parsing.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tpserve {

inline constexpr size_t kMaxJsonDepth = 128;

// The deepest nesting of arrays and objects in `text`, counted without parsing (brackets inside
// strings do not count); stops counting once past `limit`. Malformed text is left to the parser.
size_t JsonNestingDepth(std::string_view text, size_t limit = kMaxJsonDepth);

// "<what>: JSON nested deeper than 128 levels", or Ok.
Status CheckJsonDepth(std::string_view text, std::string_view what);

// `text` parsed, or a discarded value (is_discarded()) when it is not JSON or nests too deeply:
// for callers that only ask "is this a usable object".
template <class Json = nlohmann::json>
Json ParseBoundedJson(std::string_view text) {
  if (JsonNestingDepth(text) > kMaxJsonDepth) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// `text` parsed, or InvalidArgument naming `what` and the problem (too deep, or where the parse
// failed and why).
template <class Json = nlohmann::json>
Result<Json> ParseJson(std::string_view text, std::string_view what) {
  RETURN_IF_ERROR(CheckJsonDepth(text, what));
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string(what) + ": not valid JSON (" + e.what() + ")");
  }
}

// The file at `path` read whole and parsed as ParseJson does; NotFound when it cannot be read.
Result<std::string> ReadTextFile(const std::string& path);
template <class Json = nlohmann::json>
Result<Json> ReadJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseJson<Json>(text, path);
}

// A value for an error message: scalars as JSON (cut to 64 bytes), containers by type only, so that
// a message never holds a copy of an unbounded value.
std::string DescribeJsonForError(const nlohmann::json& value);
std::string DescribeJsonForError(const nlohmann::ordered_json& value);

}  // namespace tpserve
