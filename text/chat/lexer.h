// Splits a template into Jinja's tokens with Jinja's whitespace rules as transformers sets them:
// trim_blocks (the newline after a block or comment tag goes), lstrip_blocks (spaces before a
// block or comment tag on its own line go, unless `{%+`), `-` at either side of a tag strips all
// whitespace on that side, comments vanish, newlines are normalized and one final newline dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpserve::chat {

struct Token {
  enum class Type {
    kData,
    kBlockBegin,
    kBlockEnd,
    kVarBegin,
    kVarEnd,
    kName,
    kString,
    kInteger,
    kFloat,
    kOperator,
    kEnd
  };
  Type type = Type::kEnd;
  std::string text;  // data, name, operator, or the decoded string literal; numbers as written
  int line = 1;
};

Result<std::vector<Token>> Tokenize(std::string_view source);

// "chat_template line N: what"
Status TemplateError(int line, const std::string& what);

}  // namespace tpserve::chat
