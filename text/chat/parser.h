// Jinja's grammar over the lexer's tokens. Every filter, test, method and function a template
// names is checked against what the interpreter implements, so an unsupported template fails
// here, at start-up, with the construct and its line.
#pragma once

#include <memory>
#include <string_view>

#include "common/status.h"
#include "text/chat/ast.h"

namespace tpserve::chat {

Result<std::shared_ptr<const Program>> Parse(std::string_view source);

}  // namespace tpserve::chat
