#include "text/chat/interpreter.h"

#include <cmath>

#include "text/chat/builtins.h"
#include "text/chat/pystr.h"

namespace tpserve::chat {

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

using ScopePtr = std::shared_ptr<Scope>;

ScopePtr Child(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

bool IsErrorWithLocation(const Status& s) {
  return s.message().rfind("chat_template", 0) == 0;
}

Status AtLine(const Status& s, int line) {
  if (s.ok() || IsErrorWithLocation(s)) return s;
  return InvalidArgument("chat_template line " + std::to_string(line) + ": " + s.message());
}

Str Escaped(const Str& s) {
  if (s.markup) return s;
  std::string escaped = HtmlEscape(s.text);
  if (escaped == s.text) return s;
  return Derived(std::move(escaped), s.tainted());
}

class Interpreter {
 public:
  Interpreter(std::function<std::time_t()> clock, const RenderLimits& limits) : limits_(limits) {
    context_.clock = std::move(clock);
    context_.apply_filter = [this](const std::string& name, const Value& v, const CallArgs& args) {
      return ApplyFilter(context_, name, v, args);
    };
    context_.apply_test = [](const std::string& name, const Value& v, const CallArgs& args) {
      return ApplyTest(name, v, args);
    };
  }

  Result<RenderedChat> Run(const Program& program, ScopePtr globals) {
    Str out;
    Flow flow = Flow::kNormal;
    RETURN_IF_ERROR(Exec(program.body, Child(globals), &out, &flow));
    return RenderedChat{std::move(out.text), std::move(out.taint)};
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status Charge(size_t bytes) {
    work_ += bytes;
    if (work_ > limits_.max_work_bytes) return InvalidArgument("template does too much work");
    return Status::Ok();
  }
  Status Step() {
    if (++steps_ > limits_.max_steps) return InvalidArgument("template runs too many steps");
    return Status::Ok();
  }
  Status Emit(Str* out, const Str& s) {
    if (out->text.size() + s.text.size() > limits_.max_output_bytes)
      return InvalidArgument("output too large");
    RETURN_IF_ERROR(Charge(s.text.size()));
    out->Append(s);
    out->markup = false;
    return Status::Ok();
  }

  // ---- statements --------------------------------------------------------------------------

  Status Exec(const Body& body, const ScopePtr& scope, Str* out, Flow* flow) {
    for (const Stmt& s : body) {
      RETURN_IF_ERROR(Step());
      RETURN_IF_ERROR(AtLine(ExecOne(s, scope, out, flow), s.line));
      if (*flow != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  Status ExecOne(const Stmt& s, const ScopePtr& scope, Str* out, Flow* flow) {
    switch (s.type) {
      case Stmt::Type::kText: {
        Str text;
        text.text = s.text;
        return Emit(out, text);
      }
      case Stmt::Type::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
        ASSIGN_OR_RETURN(Str text, ToStr(v));
        return Emit(out, text);
      }
      case Stmt::Type::kIf:
        for (size_t i = 0; i < s.bodies.size(); ++i) {
          bool take = i >= s.conditions.size();
          if (!take) {
            ASSIGN_OR_RETURN(Value condition, Eval(*s.conditions[i], scope));
            take = Truthy(condition);
          }
          if (take) return Exec(s.bodies[i], scope, out, flow);
        }
        return Status::Ok();
      case Stmt::Type::kFor:
        return ExecFor(s, scope, out);
      case Stmt::Type::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
        if (!s.attribute.empty()) {
          const Value* target = scope->Find(s.targets[0]);
          if (target == nullptr || !target->is(Kind::kNamespace)) {
            return InvalidArgument("cannot assign attribute on non-namespace object");
          }
          if (v.holds_namespace()) return InvalidArgument("a namespace cannot hold a namespace");
          target->namespace_attributes().Set(Value::Trusted(s.attribute), std::move(v));
          return Status::Ok();
        }
        return Assign(s.targets, v, scope.get());
      }
      case Stmt::Type::kSetBlock: {
        Str captured;
        Flow inner = Flow::kNormal;
        RETURN_IF_ERROR(Exec(s.body, scope, &captured, &inner));
        scope->vars[s.targets[0]] = Value::String(std::move(captured));
        return Status::Ok();
      }
      case Stmt::Type::kMacro:
        scope->vars[s.macro->name] = Value::Macro(s.macro.get(), scope);
        return Status::Ok();
      case Stmt::Type::kBreak:
        *flow = Flow::kBreak;
        return Status::Ok();
      case Stmt::Type::kContinue:
        *flow = Flow::kContinue;
        return Status::Ok();
    }
    return Status::Ok();
  }

  static Status Assign(const std::vector<std::string>& targets, const Value& v, Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = v;
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (items.size() != targets.size()) {
      return InvalidArgument("cannot unpack " + std::to_string(items.size()) + " values into " +
                             std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = items[i];
    return Status::Ok();
  }

  Status ExecFor(const Stmt& s, const ScopePtr& scope, Str* out) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
    if (iterable.is(Kind::kNone) || iterable.is_number()) {
      return InvalidArgument(std::string("'") + TypeName(iterable) + "' object is not iterable");
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(iterable));
    if (s.filter) {
      ValueList kept;
      for (Value& item : items) {
        RETURN_IF_ERROR(Step());
        ScopePtr probe = Child(scope);
        RETURN_IF_ERROR(Assign(s.targets, item, probe.get()));
        ASSIGN_OR_RETURN(Value keep, Eval(*s.filter, probe));
        if (Truthy(keep)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(Step());
      ScopePtr body_scope = Child(scope);
      Dict loop;
      loop.entries.reserve(11);
      auto add = [&loop](const char* key, Value v) {
        loop.entries.emplace_back(Value::Trusted(key), std::move(v));
      };
      add("index", Value::Int(i + 1));
      add("index0", Value::Int(i));
      add("revindex", Value::Int(n - i));
      add("revindex0", Value::Int(n - i - 1));
      add("first", Value::Bool(i == 0));
      add("last", Value::Bool(i == n - 1));
      add("length", Value::Int(n));
      add("depth", Value::Int(1));
      add("depth0", Value::Int(0));
      add("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                            : Value::Undefined("there is no previous item"));
      add("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                : Value::Undefined("there is no next item"));
      body_scope->vars["loop"] = Value::MakeDict(std::move(loop));
      RETURN_IF_ERROR(Assign(s.targets, items[static_cast<size_t>(i)], body_scope.get()));
      Flow flow = Flow::kNormal;
      RETURN_IF_ERROR(Exec(s.body, body_scope, out, &flow));
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && !s.else_body.empty()) {
      Flow flow = Flow::kNormal;
      return Exec(s.else_body, Child(scope), out, &flow);
    }
    return Status::Ok();
  }

  // ---- expressions -------------------------------------------------------------------------

  Result<Value> Eval(const Expr& e, const ScopePtr& scope) {
    Result<Value> v = EvalInner(e, scope);
    if (!v.ok()) return v;
    if (v->depth() > limits_.max_value_depth) return InvalidArgument("value nested too deeply");
    if (e.type == Expr::Type::kCall || e.type == Expr::Type::kFilter ||
        e.type == Expr::Type::kBinary) {
      if (v->is(Kind::kString)) RETURN_IF_ERROR(Charge(v->str().text.size()));
      if (v->is(Kind::kList)) RETURN_IF_ERROR(Charge(v->list().size() * sizeof(Value)));
    }
    return v;
  }

  Result<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  Result<Value> EvalInner(const Expr& e, const ScopePtr& scope) {
    switch (e.type) {
      case Expr::Type::kLiteral:
        return e.literal;
      case Expr::Type::kName: {
        if (const Value* v = scope->Find(e.name)) return *v;
        return Value::Undefined("'" + e.name + "' is undefined");
      }
      case Expr::Type::kList:
      case Expr::Type::kTuple: {
        ValueList items;
        for (const ExprPtr& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items), e.type == Expr::Type::kTuple);
      }
      case Expr::Type::kDict: {
        Dict dict;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.args[i], scope));
          ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1], scope));
          if (key.is(Kind::kList) && !key.is_tuple())
            return InvalidArgument("unhashable type: 'list'");
          if (key.is(Kind::kDict) || key.is(Kind::kNamespace))
            return InvalidArgument("unhashable type: 'dict'");
          dict.Set(std::move(key), std::move(value));
        }
        return Value::MakeDict(std::move(dict));
      }
      case Expr::Type::kAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        return GetAttribute(obj, e.name);
      }
      case Expr::Type::kItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
        return GetItem(obj, key);
      }
      case Expr::Type::kSlice:
        return EvalSlice(e, scope);
      case Expr::Type::kCall:
        return EvalCall(e, scope);
      case Expr::Type::kFilter: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        return ApplyFilter(context_, e.name, operand, args);
      }
      case Expr::Type::kTest: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, operand, args));
        return Value::Bool(result != e.negated);
      }
      case Expr::Type::kUnary: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
        if (e.name == "not") return Value::Bool(!Truthy(operand));
        if (operand.is(Kind::kFloat))
          return Value::Float(e.name == "-" ? -operand.as_float() : operand.as_float());
        if (operand.is(Kind::kInt) || operand.is(Kind::kBool)) {
          if (e.name == "+") return Value::Int(operand.as_int());
          if (operand.as_int() == INT64_MIN) return InvalidArgument("integer overflow");
          return Value::Int(-operand.as_int());
        }
        return InvalidArgument("bad operand type for unary " + e.name + ": '" + TypeName(operand) +
                               "'");
      }
      case Expr::Type::kBinary:
        return EvalBinary(e, scope);
      case Expr::Type::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
          ASSIGN_OR_RETURN(bool holds, CompareOp(e.ops[i], left, right));
          if (!holds) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expr::Type::kCondition: {
        ASSIGN_OR_RETURN(Value condition, Eval(*e.args[1], scope));
        if (Truthy(condition)) return Eval(*e.args[0], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return InvalidArgument("unknown expression");
  }

  static Result<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Equal(a, b);
    if (op == "!=") return !Equal(a, b);
    if (op == "in") return Contains(b, a);
    if (op == "not in") {
      ASSIGN_OR_RETURN(bool in, Contains(b, a));
      return !in;
    }
    ASSIGN_OR_RETURN(int c, Compare(a, b));
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Result<Value> EvalSlice(const Expr& e, const ScopePtr& scope) {
    ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
    int64_t bound[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[static_cast<size_t>(k) + 1]) continue;
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[static_cast<size_t>(k) + 1], scope));
      if (v.is(Kind::kNone)) continue;
      if (!v.is(Kind::kInt) && !v.is(Kind::kBool))
        return InvalidArgument("slice indices must be integers or None");
      bound[k] = v.as_int();
      given[k] = true;
    }
    const int64_t step = bound[2];
    if (step == 0) return InvalidArgument("slice step cannot be zero");
    if (obj.is(Kind::kUndefined))
      return InvalidArgument(obj.undefined_hint().empty() ? "a value is undefined"
                                                          : obj.undefined_hint());
    std::vector<size_t> offsets;
    int64_t n;
    if (obj.is(Kind::kString)) {
      offsets = CodePointOffsets(obj.str().text);
      n = static_cast<int64_t>(offsets.size()) - 1;
    } else if (obj.is(Kind::kList) && !obj.is_generator()) {
      n = static_cast<int64_t>(obj.list().size());
    } else {
      return InvalidArgument(std::string("'") + TypeName(obj) +
                             "' object is not subscriptable with a slice");
    }
    auto clamp = [&](int64_t index, bool is_given, int64_t fallback) {
      if (!is_given) return fallback;
      if (index < 0) index = std::max<int64_t>(index, -n - 1) + n;
      return step > 0 ? std::clamp<int64_t>(index, 0, n) : std::clamp<int64_t>(index, -1, n - 1);
    };
    const int64_t start = clamp(bound[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bound[1], given[1], step > 0 ? n : -1);
    if (obj.is(Kind::kString)) {
      if (step == 1)
        return Value::String(obj.str().Slice(offsets[static_cast<size_t>(start)],
                                             offsets[static_cast<size_t>(std::max(start, stop))]));
      Str out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.Append(
            obj.str().Slice(offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]));
      }
      return Value::String(std::move(out));
    }
    ValueList items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      items.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value::List(std::move(items), obj.is_tuple());
  }

  Result<Value> EvalCall(const Expr& e, const ScopePtr& scope) {
    ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
    switch (callee.kind()) {
      case Kind::kMethod:
        return CallMethod(callee.receiver(), callee.method_name(), args);
      case Kind::kFunction:
        if (callee.method_name() == "raise_exception") {
          if (args.positional.size() != 1 || !args.keyword.empty())
            return InvalidArgument("raise_exception takes one message");
          ASSIGN_OR_RETURN(Str message, ToStr(args.positional[0]));
          return InvalidArgument("chat_template: " + message.text);
        }
        return CallFunction(context_, callee.method_name(), args);
      case Kind::kMacro:
        return CallMacro(callee, args);
      case Kind::kUndefined:
        return InvalidArgument(callee.undefined_hint().empty() ? "a value is undefined"
                                                               : callee.undefined_hint());
      default:
        return InvalidArgument(std::string("'") + TypeName(callee) + "' object is not callable");
    }
  }

  Result<Value> CallMacro(const Value& callee, const CallArgs& args) {
    const MacroDef& macro = *callee.macro();
    ScopePtr closure = callee.closure().lock();
    if (!closure) return InvalidArgument("macro '" + macro.name + "' called after its scope ended");
    if (args.positional.size() > macro.params.size()) {
      return InvalidArgument("macro '" + macro.name + "' takes not more than " +
                             std::to_string(macro.params.size()) + " argument(s)");
    }
    if (++call_depth_ > limits_.max_call_depth)
      return InvalidArgument("macro calls nested too deeply");
    ScopePtr frame = Child(closure);
    std::vector<bool> bound(macro.params.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      frame->vars[macro.params[i]] = args.positional[i];
      bound[i] = true;
    }
    for (const auto& [key, value] : args.keyword) {
      const auto it = std::find(macro.params.begin(), macro.params.end(), key);
      if (it == macro.params.end())
        return InvalidArgument("macro '" + macro.name + "' takes no keyword argument '" + key +
                               "'");
      const size_t index = static_cast<size_t>(it - macro.params.begin());
      if (bound[index])
        return InvalidArgument("macro '" + macro.name + "' got multiple values for argument '" +
                               key + "'");
      frame->vars[key] = value;
      bound[index] = true;
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (bound[i]) continue;
      if (macro.defaults[i]) {
        ASSIGN_OR_RETURN(frame->vars[macro.params[i]], Eval(*macro.defaults[i], frame));
      } else {
        frame->vars[macro.params[i]] =
            Value::Undefined("parameter '" + macro.params[i] + "' was not provided");
      }
    }
    Str out;
    Flow flow = Flow::kNormal;
    RETURN_IF_ERROR(Exec(macro.body, frame, &out, &flow));
    --call_depth_;
    return Value::String(std::move(out));
  }

  Result<Value> EvalBinary(const Expr& e, const ScopePtr& scope) {
    ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
    const std::string& op = e.name;
    if (op == "and") return Truthy(a) ? Eval(*e.args[1], scope) : Result<Value>(a);
    if (op == "or") return Truthy(a) ? Result<Value>(a) : Eval(*e.args[1], scope);
    ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
    if (op == "~") {
      ASSIGN_OR_RETURN(Str left, ToStr(a));
      ASSIGN_OR_RETURN(Str right, ToStr(b));
      RETURN_IF_ERROR(Charge(left.text.size() + right.text.size()));
      left.markup = false;
      left.Append(right);
      return Value::String(std::move(left));
    }
    for (const Value* v : {&a, &b}) {
      if (v->is(Kind::kUndefined))
        return InvalidArgument(v->undefined_hint().empty() ? "a value is undefined"
                                                           : v->undefined_hint());
    }
    if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
    if (op == "+" && a.is(Kind::kString) && b.is(Kind::kString)) {
      const bool markup = a.str().markup || b.str().markup;
      Str left = markup ? Escaped(a.str()) : a.str();
      const Str right = markup ? Escaped(b.str()) : b.str();
      RETURN_IF_ERROR(Charge(left.text.size() + right.text.size()));
      if (left.text.size() + right.text.size() > limits_.max_output_bytes)
        return InvalidArgument("string too large");
      left.Append(right);
      left.markup = markup;
      return Value::String(std::move(left));
    }
    if (op == "+" && a.is(Kind::kList) && b.is(Kind::kList) && a.is_tuple() == b.is_tuple() &&
        !a.is_generator() && !b.is_generator()) {
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(items), a.is_tuple());
    }
    if (op == "*" &&
        (a.is(Kind::kInt) || a.is(Kind::kBool) || b.is(Kind::kInt) || b.is(Kind::kBool))) {
      const Value& seq = a.is_number() ? b : a;
      const Value& count = a.is_number() ? a : b;
      if (seq.is(Kind::kString) || (seq.is(Kind::kList) && !seq.is_generator()))
        return Repeat(seq, count.as_int());
    }
    if (op == "%" && a.is(Kind::kString))
      return InvalidArgument("string formatting with % is not supported");
    return InvalidArgument("unsupported operand types for " + op + ": '" + TypeName(a) + "' and '" +
                           TypeName(b) + "'");
  }

  Result<Value> Repeat(const Value& seq, int64_t count) {
    if (count <= 0)
      return seq.is(Kind::kString) ? Value::Trusted("") : Value::List({}, seq.is_tuple());
    const size_t unit =
        seq.is(Kind::kString) ? seq.str().text.size() : seq.list().size() * sizeof(Value);
    if (unit > 0 && static_cast<uint64_t>(count) > limits_.max_output_bytes / unit)
      return InvalidArgument("repetition too large");
    if (seq.is(Kind::kString)) {
      Str out;
      for (int64_t i = 0; i < count; ++i) out.Append(seq.str());
      return Value::String(std::move(out));
    }
    ValueList items;
    for (int64_t i = 0; i < count; ++i)
      items.insert(items.end(), seq.list().begin(), seq.list().end());
    return Value::List(std::move(items), seq.is_tuple());
  }

  static Result<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
    const bool floats = a.is(Kind::kFloat) || b.is(Kind::kFloat);
    if (op == "/") {
      if (b.as_float() == 0.0) return InvalidArgument("division by zero");
      return Value::Float(a.as_float() / b.as_float());
    }
    if (floats) {
      const double x = a.as_float(), y = b.as_float();
      if (op == "+") return Value::Float(x + y);
      if (op == "-") return Value::Float(x - y);
      if (op == "*") return Value::Float(x * y);
      if (op == "**") {
        if (x == 0.0 && y < 0) return InvalidArgument("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y))
          return InvalidArgument("complex results are not supported");
        return Value::Float(std::pow(x, y));
      }
      if (y == 0.0) return InvalidArgument("float modulo or floor division by zero");
      if (op == "//") return Value::Float(std::floor(x / y));
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::Float(r);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
    if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
    if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
    if (op == "**") {
      if (y < 0) {
        if (x == 0) return InvalidArgument("0.0 cannot be raised to a negative power");
        return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      // Square and multiply; once the square overflows, so does the result (|x| >= 2).
      int64_t base = x;
      r = 1;
      for (int64_t rest = y; rest > 0 && !overflow;) {
        if (rest & 1) overflow = __builtin_mul_overflow(r, base, &r);
        rest >>= 1;
        if (rest > 0 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
    }
    if (overflow) return InvalidArgument("integer overflow");
    if (op == "+" || op == "-" || op == "*" || op == "**") return Value::Int(r);
    if (y == 0) return InvalidArgument("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1)
      return op == "%" ? Value::Int(0) : Result<Value>(InvalidArgument("integer overflow"));
    if (op == "//") {
      int64_t q = x / y;
      if (x % y != 0 && ((x < 0) != (y < 0))) --q;
      return Value::Int(q);
    }
    r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::Int(r);
  }

  RenderLimits limits_;
  BuiltinContext context_;
  size_t work_ = 0;
  size_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Result<RenderedChat> RenderProgram(const Program& program, std::shared_ptr<Scope> globals,
                                   std::function<std::time_t()> clock, const RenderLimits& limits) {
  return Interpreter(std::move(clock), limits).Run(program, std::move(globals));
}

}  // namespace tpserve::chat
