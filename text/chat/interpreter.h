// Runs a parsed template: Jinja's scoping (a loop body and a macro body get their own scope; `if`
// does not), loop variables, macros, break/continue, and the output with its untrusted ranges.
// Bounded: output size, total work (bytes of strings built), steps, and macro call depth.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "text/chat/ast.h"
#include "text/chat/chat_template.h"

namespace tpserve::chat {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* Find(const std::string& name) const;
};

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_work_bytes = size_t{1} << 30;
  size_t max_steps = 2'000'000;
  int max_call_depth = 64;
  int max_value_depth = 256;
};

// Renders `program` with `globals` as the outermost scope; raise_exception's message becomes the
// error "chat_template: MESSAGE", other failures "chat_template line N: ...".
Result<RenderedChat> RenderProgram(const Program& program, std::shared_ptr<Scope> globals,
                                   std::function<std::time_t()> clock,
                                   const RenderLimits& limits = {});

}  // namespace tpserve::chat
