// Jinja's built-in filters that chat templates use, with Jinja 3.1's semantics, and transformers'
// tojson (json.dumps without ASCII escaping).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "text/chat/builtins.h"
#include "text/chat/pystr.h"

namespace tpserve::chat {
namespace {

const std::set<std::string, std::less<>> kFilters = {
    "abs",        "capitalize", "count",  "d",          "default", "dictsort", "first",  "float",
    "int",        "items",      "join",   "last",       "length",  "list",     "lower",  "map",
    "max",        "min",        "reject", "rejectattr", "replace", "reverse",  "safe",   "select",
    "selectattr", "sort",       "string", "title",      "tojson",  "trim",     "unique", "upper"};

// Positional argument `index` or keyword `name` of a filter call (after the filtered value).
const Value* Arg(const CallArgs& args, size_t index, std::string_view name) {
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return &value;
  }
  return index < args.positional.size() ? &args.positional[index] : nullptr;
}

Status CheckArgs(const std::string& filter, const CallArgs& args,
                 std::initializer_list<std::string_view> names) {
  if (args.positional.size() > names.size())
    return InvalidArgument("filter '" + filter + "': too many arguments");
  for (const auto& [key, value] : args.keyword) {
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      return InvalidArgument("filter '" + filter + "': unexpected keyword argument '" + key + "'");
    }
  }
  return Status::Ok();
}

bool ArgTrue(const Value* v) {
  return v != nullptr && Truthy(*v);
}

// Jinja's attribute paths ("a.b", integer parts index lists) for attribute= arguments.
Result<Value> Attribute(const Value& item, const Value& path) {
  if (path.is(Kind::kInt)) return GetItem(item, path);
  if (!path.is(Kind::kString)) return InvalidArgument("attribute must be a string");
  Value current = item;
  size_t start = 0;
  const std::string& p = path.str().text;
  while (true) {
    const size_t dot = p.find('.', start);
    const std::string part =
        p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    int64_t index = 0;
    const bool is_index =
        numeric && std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    ASSIGN_OR_RETURN(current, is_index ? GetItem(current, Value::Int(index))
                                       : GetItem(current, Value::Trusted(part)));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// Sort key: strings lowercased unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is(Kind::kString)) return v;
  return Value::Trusted(Lower(v.str().text));
}

Result<ValueList> Sorted(ValueList items, bool reverse, bool case_sensitive,
                         const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = item;
    if (attribute != nullptr && !attribute->is(Kind::kNone)) {
      ASSIGN_OR_RETURN(key, Attribute(item, *attribute));
    }
    keyed.emplace_back(SortKey(key, case_sensitive), std::move(item));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    Result<int> c = reverse ? Compare(b.first, a.first) : Compare(a.first, b.first);
    if (!c.ok()) {
      if (error.ok()) error = c.status();
      return false;
    }
    return *c < 0;
  });
  RETURN_IF_ERROR(error);
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

Result<Value> FirstOrLast(const Value& v, bool last) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::Undefined("no first item, sequence was empty");
  return last ? items.back() : items.front();
}

Result<Value> Select(const BuiltinContext& context, const std::string& name, const Value& v,
                     const CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep = name == "select" || name == "selectattr";
  if (!args.keyword.empty())
    return InvalidArgument("filter '" + name + "' takes no keyword arguments");
  size_t next = 0;
  const Value* attribute = nullptr;
  if (by_attribute) {
    if (args.positional.empty()) return InvalidArgument("filter '" + name + "' needs an attribute");
    attribute = &args.positional[next++];
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    if (!args.positional[next].is(Kind::kString))
      return InvalidArgument("test name must be a string");
    test = args.positional[next++].str().text;
    if (!IsSupportedTest(test)) return InvalidArgument("test '" + test + "' is not supported");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                                args.positional.end());
  }
  // Jinja yields nothing for a false value (None included) without iterating it.
  ASSIGN_OR_RETURN(ValueList items, Truthy(v) ? Iterate(v) : ValueList{});
  ValueList out;
  for (const Value& item : items) {
    Value subject = item;
    if (attribute != nullptr) {
      ASSIGN_OR_RETURN(subject, Attribute(item, *attribute));
    }
    bool passed = Truthy(subject);
    if (!test.empty()) {
      ASSIGN_OR_RETURN(passed, context.apply_test(test, subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Result<Value> Map(const BuiltinContext& context, const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Truthy(v) ? Iterate(v) : ValueList{});
  ValueList out;
  if (args.positional.empty()) {
    RETURN_IF_ERROR(CheckArgs("map", args, {"attribute", "default"}));
    const Value* attribute = Arg(args, 99, "attribute");
    if (attribute == nullptr)
      return InvalidArgument("filter 'map' needs a filter name or attribute=");
    const Value* fallback = Arg(args, 99, "default");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value mapped, Attribute(item, *attribute));
      if (mapped.is(Kind::kUndefined) && fallback != nullptr) mapped = *fallback;
      out.push_back(std::move(mapped));
    }
    return Value::Generator(std::move(out));
  }
  if (!args.positional[0].is(Kind::kString)) return InvalidArgument("filter name must be a string");
  const std::string filter = args.positional[0].str().text;
  if (!IsSupportedFilter(filter))
    return InvalidArgument("filter '" + filter + "' is not supported");
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value mapped, context.apply_filter(filter, item, rest));
    out.push_back(std::move(mapped));
  }
  return Value::Generator(std::move(out));
}

Result<Value> ToInt(const Value& v, const CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs("int", args, {"default", "base"}));
  const Value* fallback = Arg(args, 0, "default");
  const Value* base = Arg(args, 1, "base");
  if (base != nullptr && !(base->is(Kind::kInt) && base->as_int() == 10))
    return InvalidArgument("int: only base 10 is supported");
  const Value result_default = fallback ? *fallback : Value::Int(0);
  if (v.is(Kind::kInt) || v.is(Kind::kBool)) return Value::Int(v.as_int());
  if (v.is(Kind::kFloat)) {
    const double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return result_default;
    return Value::Int(static_cast<int64_t>(f));
  }
  if (!v.is(Kind::kString)) return result_default;
  // int(s), else int(float(s)), else the default: digits with optional sign and underscores.
  const std::string t = Strip(v.str(), std::nullopt, true, true).text;
  size_t i = 0;
  bool negative = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
  int64_t n = 0;
  bool digits = false, ok = i < t.size();
  for (; i < t.size() && ok; ++i) {
    if (t[i] >= '0' && t[i] <= '9') {
      if (n > (INT64_MAX - 9) / 10) return InvalidArgument("int: value out of range");
      n = n * 10 + (t[i] - '0');
      digits = true;
    } else if (!(t[i] == '_' && digits && i + 1 < t.size() && t[i + 1] >= '0' && t[i + 1] <= '9')) {
      ok = false;
    }
  }
  if (ok && digits) return Value::Int(negative ? -n : n);
  char* end = nullptr;
  const double f = std::strtod(t.c_str(), &end);
  const bool hex_or_nan =
      t.find_first_of("xXnN") != std::string::npos;  // strtod is wider than Python's float()
  if (!t.empty() && end == t.c_str() + t.size() && !hex_or_nan && std::isfinite(f) &&
      std::fabs(f) < 9.2e18) {
    return Value::Int(static_cast<int64_t>(f));
  }
  return result_default;
}

Result<Value> ToJsonFilter(const Value& v, const CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions options;
  options.ensure_ascii = ArgTrue(Arg(args, 0, "ensure_ascii"));
  if (const Value* indent = Arg(args, 1, "indent"); indent != nullptr && !indent->is(Kind::kNone)) {
    if (!indent->is(Kind::kInt) || indent->as_int() < 0 || indent->as_int() > 64) {
      return InvalidArgument("tojson: indent must be an integer from 0 to 64");
    }
    options.indent = static_cast<int>(indent->as_int());
  }
  if (const Value* separators = Arg(args, 2, "separators");
      separators != nullptr && !separators->is(Kind::kNone)) {
    if (!separators->is(Kind::kList) || separators->list().size() != 2 ||
        !separators->list()[0].is(Kind::kString) || !separators->list()[1].is(Kind::kString)) {
      return InvalidArgument("tojson: separators must be two strings");
    }
    options.custom_separators = true;
    options.item_separator = separators->list()[0].str().text;
    options.key_separator = separators->list()[1].str().text;
  }
  options.sort_keys = ArgTrue(Arg(args, 3, "sort_keys"));
  ASSIGN_OR_RETURN(Str json, ToJson(v, options));
  return Value::String(std::move(json));
}

}  // namespace

bool IsSupportedFilter(std::string_view name) {
  return kFilters.count(name) > 0;
}

Result<Value> ApplyFilter(const BuiltinContext& context, const std::string& name, const Value& v,
                          const CallArgs& args) {
  if (name == "default" || name == "d") {
    RETURN_IF_ERROR(CheckArgs(name, args, {"default_value", "boolean"}));
    const Value* fallback = Arg(args, 0, "default_value");
    const bool use = v.is(Kind::kUndefined) || (ArgTrue(Arg(args, 1, "boolean")) && !Truthy(v));
    if (!use) return v;
    return fallback != nullptr ? *fallback : Value::Trusted("");
  }
  if (name == "tojson") return ToJsonFilter(v, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return Select(context, name, v, args);
  if (name == "map") return Map(context, v, args);
  if (name == "int") return ToInt(v, args);
  if (name == "replace") {
    RETURN_IF_ERROR(CheckArgs(name, args, {"old", "new", "count"}));
    const Value* old = Arg(args, 0, "old");
    const Value* replacement = Arg(args, 1, "new");
    if (old == nullptr || replacement == nullptr)
      return InvalidArgument("filter 'replace' needs old and new");
    ASSIGN_OR_RETURN(Str s, ToStr(v));
    ASSIGN_OR_RETURN(Str o, ToStr(*old));
    ASSIGN_OR_RETURN(Str r, ToStr(*replacement));
    const Value* count = Arg(args, 2, "count");
    if (count != nullptr && !count->is(Kind::kNone) && !count->is(Kind::kInt))
      return InvalidArgument("replace count must be an integer");
    s.markup = false;
    return Value::String(
        ReplaceAll(s, o, r, count == nullptr || count->is(Kind::kNone) ? -1 : count->as_int()));
  }
  if (name == "sort" || name == "dictsort" || name == "unique") {
    if (name == "dictsort") {
      RETURN_IF_ERROR(CheckArgs(name, args, {"case_sensitive", "by", "reverse"}));
      if (!v.is(Kind::kDict)) return InvalidArgument("dictsort: value is not a mapping");
      const Value* by = Arg(args, 1, "by");
      const bool by_value = by != nullptr && by->is(Kind::kString) && by->str().text == "value";
      if (by != nullptr && !by_value && !(by->is(Kind::kString) && by->str().text == "key")) {
        return InvalidArgument("dictsort: by must be 'key' or 'value'");
      }
      ValueList pairs;
      for (const auto& [key, value] : v.dict().entries)
        pairs.push_back(Value::List({key, value}, true));
      const Value index = Value::Int(by_value ? 1 : 0);
      ASSIGN_OR_RETURN(ValueList sorted, Sorted(std::move(pairs), ArgTrue(Arg(args, 2, "reverse")),
                                                ArgTrue(Arg(args, 0, "case_sensitive")), &index));
      return Value::List(std::move(sorted));
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (name == "sort") {
      RETURN_IF_ERROR(CheckArgs(name, args, {"reverse", "case_sensitive", "attribute"}));
      ASSIGN_OR_RETURN(ValueList sorted,
                       Sorted(std::move(items), ArgTrue(Arg(args, 0, "reverse")),
                              ArgTrue(Arg(args, 1, "case_sensitive")), Arg(args, 2, "attribute")));
      return Value::List(std::move(sorted));
    }
    RETURN_IF_ERROR(CheckArgs(name, args, {"case_sensitive", "attribute"}));
    const bool case_sensitive = ArgTrue(Arg(args, 0, "case_sensitive"));
    const Value* attribute = Arg(args, 1, "attribute");
    ValueList out, seen;
    for (const Value& item : items) {
      Value key = item;
      if (attribute != nullptr && !attribute->is(Kind::kNone)) {
        ASSIGN_OR_RETURN(key, Attribute(item, *attribute));
      }
      key = SortKey(key, case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::Generator(std::move(out));
  }
  if (name == "min" || name == "max") {
    RETURN_IF_ERROR(CheckArgs(name, args, {"case_sensitive", "attribute"}));
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (items.empty()) return Value::Undefined("no " + name + " item, sequence was empty");
    ASSIGN_OR_RETURN(ValueList sorted,
                     Sorted(std::move(items), name == "max",
                            ArgTrue(Arg(args, 0, "case_sensitive")), Arg(args, 1, "attribute")));
    return sorted.front();
  }
  if (name == "join") {
    RETURN_IF_ERROR(CheckArgs(name, args, {"d", "attribute"}));
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    Str separator;
    if (const Value* d = Arg(args, 0, "d")) {
      ASSIGN_OR_RETURN(separator, ToStr(*d));
    }
    const Value* attribute = Arg(args, 1, "attribute");
    std::string out;
    bool tainted = false;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (attribute != nullptr && !attribute->is(Kind::kNone)) {
        ASSIGN_OR_RETURN(item, Attribute(item, *attribute));
      }
      ASSIGN_OR_RETURN(Str s, ToStr(item));
      if (i > 0) out += separator.text;
      out += s.text;
      tainted |= s.tainted() || (i > 0 && separator.tainted());
    }
    return Value::String(Derived(std::move(out), tainted));
  }
  if (name == "safe") {
    RETURN_IF_ERROR(CheckArgs(name, args, {}));
    ASSIGN_OR_RETURN(Str s, ToStr(v));
    s.markup = true;
    return Value::String(std::move(s));
  }
  if (name == "abs") {
    RETURN_IF_ERROR(CheckArgs(name, args, {}));
    if (v.is(Kind::kFloat)) return Value::Float(std::fabs(v.as_float()));
    if (!v.is(Kind::kInt) && !v.is(Kind::kBool))
      return InvalidArgument("bad operand type for abs()");
    if (v.as_int() == INT64_MIN) return InvalidArgument("integer overflow");
    return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "float") {
    RETURN_IF_ERROR(CheckArgs(name, args, {"default"}));
    if (v.is_number()) return Value::Float(v.as_float());
    const Value* fallback = Arg(args, 0, "default");
    if (v.is(Kind::kString)) {
      const std::string t = Strip(v.str(), std::nullopt, true, true).text;
      char* end = nullptr;
      const double f = std::strtod(t.c_str(), &end);
      if (!t.empty() && end == t.c_str() + t.size() && t.find_first_of("xXpP") == std::string::npos)
        return Value::Float(f);
    }
    return fallback != nullptr ? *fallback : Value::Float(0.0);
  }
  // The rest take no arguments.
  RETURN_IF_ERROR(CheckArgs(name, args,
                            name == "trim" ? std::initializer_list<std::string_view>{"chars"}
                                           : std::initializer_list<std::string_view>{}));
  if (name == "length" || name == "count") {
    switch (v.kind()) {
      case Kind::kString:
        return Value::Int(static_cast<int64_t>(CodePointCount(v.str().text)));
      case Kind::kList:
        return Value::Int(static_cast<int64_t>(v.list().size()));
      case Kind::kDict:
        return Value::Int(static_cast<int64_t>(v.dict().entries.size()));
      case Kind::kUndefined:
        return Value::Int(0);
      default:
        return InvalidArgument(std::string("object of type '") + TypeName(v) + "' has no len()");
    }
  }
  if (name == "first" || name == "last") {
    if (name == "last" &&
        ((!v.is(Kind::kList) && !v.is(Kind::kString) && !v.is(Kind::kDict)) || v.is_generator())) {
      return InvalidArgument(std::string("'") + TypeName(v) + "' object is not reversible");
    }
    return FirstOrLast(v, name == "last");
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    return Value::List(std::move(items));
  }
  if (name == "items") {
    if (v.is(Kind::kUndefined)) return Value::Generator({});
    if (!v.is(Kind::kDict)) return InvalidArgument("items: can only get item pairs from a mapping");
    ASSIGN_OR_RETURN(Value pairs, CallMethod(v, "items", {}));
    return Value::Generator(pairs.list());
  }
  if (name == "reverse") {
    if (v.is(Kind::kString)) {
      const std::vector<size_t> offsets = CodePointOffsets(v.str().text);
      Str out;
      for (size_t i = offsets.size() - 1; i > 0; --i)
        out.Append(v.str().Slice(offsets[i - 1], offsets[i]));
      return Value::String(std::move(out));
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    // reversed(list) is an iterator; a generator is first made a list.
    ValueList reversed(items.rbegin(), items.rend());
    return v.is_generator() ? Value::List(std::move(reversed))
                            : Value::Generator(std::move(reversed));
  }
  if (name == "string") {
    ASSIGN_OR_RETURN(Str s, ToStr(v));
    return Value::String(std::move(s));
  }
  ASSIGN_OR_RETURN(Str s, ToStr(v));
  if (name == "trim") {
    const Value* chars = Arg(args, 0, "chars");
    std::optional<std::string> set;
    if (chars != nullptr && !chars->is(Kind::kNone)) {
      if (!chars->is(Kind::kString)) return InvalidArgument("trim chars must be a string");
      set = chars->str().text;
    }
    return Value::String(Strip(s, set, true, true));
  }
  std::string mapped = name == "upper"        ? Upper(s.text)
                       : name == "lower"      ? Lower(s.text)
                       : name == "capitalize" ? PyCapitalize(s.text)
                                              : JinjaTitle(s.text);
  return Value::String(Derived(std::move(mapped), s.tainted()));
}

}  // namespace tpserve::chat
