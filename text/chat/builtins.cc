// Tests, methods, global functions and attribute lookup (the filters are in filters.cc).
#include "text/chat/builtins.h"

#include <ctime>
#include <set>

#include "text/chat/pystr.h"

namespace tpserve::chat {
namespace {

const std::set<std::string, std::less<>> kStringMethods = {
    "strip",  "lstrip", "rstrip", "startswith", "endswith",   "split",
    "rsplit", "upper",  "lower",  "title",      "capitalize", "replace"};
const std::set<std::string, std::less<>> kDictMethods = {"items", "keys", "values", "get"};
const std::set<std::string, std::less<>> kTests = {
    "defined", "undefined",   "none",  "string",      "mapping", "iterable", "sequence",
    "number",  "integer",     "float", "boolean",     "true",    "false",    "eq",
    "equalto", "==",          "ne",    "!=",          "lt",      "lessthan", "<",
    "le",      "<=",          "gt",    "greaterthan", ">",       "ge",       ">=",
    "in",      "divisibleby", "even",  "odd",         "lower",   "upper",    "sameas"};
const std::set<std::string, std::less<>> kFunctions = {"raise_exception", "namespace", "range",
                                                       "strftime_now", "dict"};

Status ArgCount(const std::string& what, const CallArgs& args, size_t max_positional,
                std::initializer_list<std::string_view> keywords = {}) {
  if (args.positional.size() > max_positional)
    return InvalidArgument(what + ": too many arguments");
  for (const auto& [key, value] : args.keyword) {
    if (std::find(keywords.begin(), keywords.end(), key) == keywords.end()) {
      return InvalidArgument(what + ": unexpected keyword argument '" + key + "'");
    }
  }
  return Status::Ok();
}

Result<std::optional<std::string>> OptionalString(const Value* v, const std::string& what) {
  if (v == nullptr || v->is(Kind::kNone)) return std::optional<std::string>{};
  if (!v->is(Kind::kString)) return InvalidArgument(what + " must be a string or None");
  return std::optional<std::string>(v->str().text);
}

Result<int64_t> IntArg(const Value* v, int64_t fallback, const std::string& what) {
  if (v == nullptr || v->is(Kind::kNone)) return fallback;
  if (!v->is(Kind::kInt) && !v->is(Kind::kBool))
    return InvalidArgument(what + " must be an integer");
  return v->as_int();
}

Value StrList(std::vector<Str> parts) {
  ValueList items;
  items.reserve(parts.size());
  for (Str& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::List(std::move(items));
}

Result<Value> StringMethod(const Str& s, const std::string& name, const CallArgs& args) {
  const Value* a0 = args.positional.size() > 0 ? &args.positional[0] : nullptr;
  const Value* a1 = args.positional.size() > 1 ? &args.positional[1] : nullptr;
  if (s.markup && !args.positional.empty())
    return InvalidArgument("method '" + name + "' on a safe string is not supported");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    RETURN_IF_ERROR(ArgCount(name, args, 1));
    ASSIGN_OR_RETURN(auto chars, OptionalString(a0, name + "() argument"));
    return Value::String(Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    RETURN_IF_ERROR(ArgCount(name, args, 1));
    if (a0 == nullptr) return InvalidArgument(name + "() takes one argument");
    ValueList options = a0->is(Kind::kList) && a0->is_tuple() ? a0->list() : ValueList{*a0};
    for (const Value& option : options) {
      if (!option.is(Kind::kString))
        return InvalidArgument(name + "() argument must be str or a tuple of str");
      const std::string& p = option.str().text;
      const bool hit =
          p.size() <= s.text.size() &&
          (name == "startswith" ? s.text.compare(0, p.size(), p) == 0
                                : s.text.compare(s.text.size() - p.size(), p.size(), p) == 0);
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") {
    RETURN_IF_ERROR(ArgCount(name, args, 2, {"sep", "maxsplit"}));
    const Value* sep = a0;
    const Value* maxsplit = a1;
    for (const auto& [key, value] : args.keyword) (key == "sep" ? sep : maxsplit) = &value;
    ASSIGN_OR_RETURN(auto separator, OptionalString(sep, name + "() separator"));
    if (separator && separator->empty()) return InvalidArgument("empty separator");
    ASSIGN_OR_RETURN(int64_t max, IntArg(maxsplit, -1, name + "() maxsplit"));
    return StrList(name == "split" ? Split(s, separator, max) : RSplit(s, separator, max));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    RETURN_IF_ERROR(ArgCount(name, args, 0));
    std::string out = name == "upper"   ? Upper(s.text)
                      : name == "lower" ? Lower(s.text)
                      : name == "title" ? PyTitle(s.text)
                                        : PyCapitalize(s.text);
    Str result = Derived(std::move(out), s.tainted());
    result.markup = s.markup;
    return Value::String(std::move(result));
  }
  if (name == "replace") {
    RETURN_IF_ERROR(ArgCount(name, args, 3));
    if (a0 == nullptr || a1 == nullptr || !a0->is(Kind::kString) || !a1->is(Kind::kString)) {
      return InvalidArgument("replace() takes two strings");
    }
    ASSIGN_OR_RETURN(
        int64_t count,
        IntArg(args.positional.size() > 2 ? &args.positional[2] : nullptr, -1, "replace() count"));
    return Value::String(ReplaceAll(s, a0->str(), a1->str(), count));
  }
  return InvalidArgument("'str' object has no method '" + name + "'");
}

Result<Value> DictMethod(const Value& d, const std::string& name, const CallArgs& args) {
  if (name == "get") {
    RETURN_IF_ERROR(ArgCount(name, args, 2));
    if (args.positional.empty()) return InvalidArgument("get() takes a key");
    const Value* found = d.dict().Find(args.positional[0]);
    if (found != nullptr) return *found;
    return args.positional.size() > 1 ? args.positional[1] : Value::None();
  }
  RETURN_IF_ERROR(ArgCount(name, args, 0));
  ValueList out;
  for (const auto& [key, value] : d.dict().entries) {
    if (name == "keys") {
      out.push_back(key);
    } else if (name == "values") {
      out.push_back(value);
    } else {
      out.push_back(Value::List({key, value}, /*tuple=*/true));
    }
  }
  return Value::List(std::move(out));
}

Status UndefinedError(const Value& v) {
  return InvalidArgument(v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint());
}

}  // namespace

Str ReplaceAll(const Str& s, const Str& old, const Str& replacement, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  bool replaced = false;
  if (old.text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::vector<size_t> offsets = CodePointOffsets(s.text);
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (count >= 0 && done >= count) {
        out.append(s.text, offsets[i], std::string::npos);
        break;
      }
      out += replacement.text;
      replaced = true;
      ++done;
      if (i + 1 < offsets.size()) out.append(s.text, offsets[i], offsets[i + 1] - offsets[i]);
    }
  } else {
    while (count < 0 || done < count) {
      const size_t hit = s.text.find(old.text, pos);
      if (hit == std::string::npos) break;
      out.append(s.text, pos, hit - pos);
      out += replacement.text;
      pos = hit + old.text.size();
      replaced = true;
      ++done;
    }
    out.append(s.text, pos, std::string::npos);
  }
  if (!replaced) return s;
  return Derived(std::move(out), s.tainted() || replacement.tainted());
}

bool IsSupportedTest(std::string_view name) {
  return kTests.count(name) > 0;
}
bool IsSupportedMethod(std::string_view name) {
  return kStringMethods.count(name) > 0 || kDictMethods.count(name) > 0;
}
bool IsSupportedFunction(std::string_view name) {
  return kFunctions.count(name) > 0;
}

Result<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& args) {
  const Kind k = v.kind();
  if (name == "defined" || name == "undefined")
    return (k == Kind::kUndefined) == (name == "undefined");
  if (name == "none") return k == Kind::kNone;
  if (name == "string") return k == Kind::kString;
  if (name == "mapping") return k == Kind::kDict;
  if (name == "iterable")
    return k == Kind::kString || k == Kind::kList || k == Kind::kDict || k == Kind::kUndefined;
  if (name == "sequence") {
    return k == Kind::kString || (k == Kind::kList && !v.is_generator()) || k == Kind::kDict ||
           k == Kind::kUndefined;
  }
  if (name == "number") return v.is_number();
  if (name == "integer") return k == Kind::kInt;
  if (name == "float") return k == Kind::kFloat;
  if (name == "boolean") return k == Kind::kBool;
  if (name == "true" || name == "false") return k == Kind::kBool && v.as_bool() == (name == "true");
  if (name == "lower" || name == "upper") {
    ASSIGN_OR_RETURN(Str s, ToStr(v));
    // str.islower(): some cased character and no character of the other case.
    const std::string mapped = name == "lower" ? Lower(s.text) : Upper(s.text);
    const std::string other = name == "lower" ? Upper(s.text) : Lower(s.text);
    return mapped == s.text && other != s.text;
  }
  if (name == "even" || name == "odd") {
    if (!v.is(Kind::kInt) && !v.is(Kind::kBool))
      return InvalidArgument("test '" + name + "' needs an integer");
    const int64_t r = ((v.as_int() % 2) + 2) % 2;
    return (r == 0) == (name == "even");
  }
  if (args.positional.size() != 1 || !args.keyword.empty())
    return InvalidArgument("test '" + name + "' takes one argument");
  const Value& other = args.positional[0];
  if (name == "eq" || name == "equalto" || name == "==") return Equal(v, other);
  if (name == "ne" || name == "!=") return !Equal(v, other);
  if (name == "sameas")
    return v.kind() == other.kind() && Equal(v, other) &&
           (k == Kind::kNone || k == Kind::kBool || k == Kind::kUndefined);
  if (name == "divisibleby") {
    if (!v.is(Kind::kInt) || !other.is(Kind::kInt) || other.as_int() == 0) {
      return InvalidArgument("divisibleby needs integers and a non-zero divisor");
    }
    return v.as_int() % other.as_int() == 0;
  }
  if (name == "in") return Contains(other, v);
  ASSIGN_OR_RETURN(int c, Compare(v, other));
  if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
  return c >= 0;
}

Result<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is(Kind::kString))
        return InvalidArgument("'in <string>' requires a string as left operand");
      return container.str().text.find(item.str().text) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.list()) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      return container.dict().Find(item) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      return InvalidArgument(std::string("argument of type '") + TypeName(container) +
                             "' is not iterable");
  }
}

Result<Value> CallMethod(const Value& receiver, const std::string& name, const CallArgs& args) {
  if (receiver.is(Kind::kString) && kStringMethods.count(name) > 0)
    return StringMethod(receiver.str(), name, args);
  if (receiver.is(Kind::kDict) && kDictMethods.count(name) > 0)
    return DictMethod(receiver, name, args);
  return InvalidArgument(std::string("'") + TypeName(receiver) + "' object has no method '" + name +
                         "'");
}

Result<Value> CallFunction(const BuiltinContext& context, const std::string& name,
                           const CallArgs& args) {
  if (name == "namespace" || name == "dict") {
    if (args.positional.size() > 1 ||
        (args.positional.size() == 1 && !args.positional[0].is(Kind::kDict))) {
      return InvalidArgument(name + "() takes at most one mapping and keyword arguments");
    }
    Dict attributes;
    if (!args.positional.empty()) attributes = args.positional[0].dict();
    for (const auto& [key, value] : args.keyword) attributes.Set(Value::Trusted(key), value);
    return name == "dict" ? Value::MakeDict(std::move(attributes))
                          : Value::Namespace(std::move(attributes));
  }
  if (name == "range") {
    RETURN_IF_ERROR(ArgCount(name, args, 3));
    std::vector<int64_t> n;
    for (const Value& v : args.positional) {
      if (!v.is(Kind::kInt) && !v.is(Kind::kBool)) return InvalidArgument("range() takes integers");
      n.push_back(v.as_int());
    }
    if (n.empty()) return InvalidArgument("range expected at least 1 argument");
    const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0],
                  step = n.size() > 2 ? n[2] : 1;
    if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      // Jinja's sandbox refuses ranges longer than 100000 items.
      if (out.size() >= 100000)
        return InvalidArgument("range too big, maximum size for range is 100000");
      out.push_back(Value::Int(i));
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return Value::List(std::move(out));
  }
  if (name == "strftime_now") {
    RETURN_IF_ERROR(ArgCount(name, args, 1));
    if (args.positional.size() != 1 || !args.positional[0].is(Kind::kString)) {
      return InvalidArgument("strftime_now() takes a format string");
    }
    const std::string& format = args.positional[0].str().text;
    if (format.size() > 256) return InvalidArgument("strftime_now() format too long");
    const std::time_t now = context.clock ? context.clock() : std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(4096, '\0');
    const size_t n =
        format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
    out.resize(n);
    return Value::Trusted(std::move(out));
  }
  return InvalidArgument("function '" + name + "' is not supported");
}

Result<Value> GetAttribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      return UndefinedError(obj);
    case Kind::kDict:
      if (kDictMethods.count(name) > 0) return Value::Method(obj, name);
      if (const Value* v = obj.dict().Find(std::string_view(name))) return *v;
      return Value::Undefined("'dict object' has no attribute '" + name + "'");
    case Kind::kNamespace:
      if (const Value* v = obj.namespace_attributes().Find(std::string_view(name))) return *v;
      return Value::Undefined("namespace has no attribute '" + name + "'");
    case Kind::kString:
      if (kStringMethods.count(name) > 0) return Value::Method(obj, name);
      [[fallthrough]];
    default:
      return Value::Undefined(std::string("'") + TypeName(obj) + "' object has no attribute '" +
                              name + "'");
  }
}

Result<Value> GetItem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      return UndefinedError(obj);
    case Kind::kDict:
    case Kind::kNamespace:
      if (const Value* v = obj.dict().Find(key)) return *v;
      break;
    case Kind::kList:
      if (obj.is_generator()) return Value::Undefined("'generator' object is not subscriptable");
      if (key.is(Kind::kInt) || key.is(Kind::kBool)) {
        const int64_t n = static_cast<int64_t>(obj.list().size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
        return Value::Undefined(std::string(obj.is_tuple() ? "tuple" : "list") +
                                " index out of range");
      }
      break;
    case Kind::kString:
      if (key.is(Kind::kInt) || key.is(Kind::kBool)) {
        const std::vector<size_t> offsets = CodePointOffsets(obj.str().text);
        const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          return Value::String(obj.str().Slice(offsets[static_cast<size_t>(i)],
                                               offsets[static_cast<size_t>(i) + 1]));
        }
        return Value::Undefined("string index out of range");
      }
      break;
    default:
      break;
  }
  if (key.is(Kind::kString) && !obj.is(Kind::kNamespace)) return GetAttribute(obj, key.str().text);
  return Value::Undefined(std::string("'") + TypeName(obj) + "' object has no item");
}

}  // namespace tpserve::chat
