// Jinja's built-in filters, tests, global functions and the Python methods templates call on
// strings and dicts: the subset real chat templates use, each with Jinja's/Python's semantics.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "text/chat/value.h"

namespace tpserve::chat {

struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

bool IsSupportedFilter(std::string_view name);
bool IsSupportedTest(std::string_view name);
bool IsSupportedMethod(std::string_view name);
bool IsSupportedFunction(std::string_view name);  // raise_exception, namespace, range, strftime_now

// What filters like map/select need from the interpreter: applying another filter or a test.
struct BuiltinContext {
  std::function<Result<Value>(const std::string& filter, const Value& v, const CallArgs& args)>
      apply_filter;
  std::function<Result<bool>(const std::string& test, const Value& v, const CallArgs& args)>
      apply_test;
  std::function<std::time_t()> clock;
};

Result<Value> ApplyFilter(const BuiltinContext& context, const std::string& name, const Value& v,
                          const CallArgs& args);
Result<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& args);
Result<Value> CallMethod(const Value& receiver, const std::string& name, const CallArgs& args);
// raise_exception is handled by the interpreter (its error is the render's error).
Result<Value> CallFunction(const BuiltinContext& context, const std::string& name,
                           const CallArgs& args);

// Jinja's attribute and subscript lookup: obj.name tries the attribute (a method) then the item;
// obj[key] tries the item then the attribute. Missing gives Undefined; Undefined's gives an error.
Result<Value> GetAttribute(const Value& obj, const std::string& name);
Result<Value> GetItem(const Value& obj, const Value& key);

}  // namespace tpserve::chat

namespace tpserve::chat {

// `item in container` as Python evaluates it.
Result<bool> Contains(const Value& container, const Value& item);
// str.replace(old, new, count): unchanged (taint and all) when nothing matched, else a new string
// that is wholly untrusted when the subject or the replacement was.
Str ReplaceAll(const Str& s, const Str& old, const Str& replacement, int64_t count);

}  // namespace tpserve::chat
