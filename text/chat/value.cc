#include "text/chat/value.h"

#include <algorithm>
#include <cstdio>

#include "text/chat/pystr.h"

namespace tpserve::chat {

void Str::Append(const Str& other) {
  const size_t shift = text.size();
  text += other.text;
  for (const TextRange& r : other.taint) {
    if (!taint.empty() && taint.back().end == r.begin + shift) {
      taint.back().end = r.end + shift;
    } else {
      taint.push_back({r.begin + shift, r.end + shift});
    }
  }
}

void Str::AppendTrusted(std::string_view bytes) {
  text += bytes;
}

Str Str::Slice(size_t begin, size_t end) const {
  Str out;
  out.text = text.substr(begin, end - begin);
  out.markup = markup;
  for (const TextRange& r : taint) {
    const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) out.taint.push_back({b - begin, e - begin});
  }
  return out;
}

Str Derived(std::string text, bool tainted) {
  Str out;
  out.text = std::move(text);
  if (tainted) out.TaintAll();
  return out;
}

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is(Kind::kString) && k.str().text == key) return &v;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (Equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.hint_ = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(Str s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const Str>(std::move(s));
  return v;
}
Value Value::Trusted(std::string text) {
  Str s;
  s.text = std::move(text);
  return String(std::move(s));
}
Value Value::List(ValueList items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  for (const Value& item : items) {
    v.depth_ = std::max(v.depth_, item.depth_ + 1);
    v.holds_namespace_ |= item.holds_namespace_;
  }
  if (items.empty()) v.depth_ = 1;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::Generator(ValueList items) {
  Value v = List(std::move(items));
  v.generator_ = true;
  return v;
}
Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.depth_ = 1;
  for (const auto& [key, value] : dict.entries) {
    v.depth_ = std::max({v.depth_, key.depth_ + 1, value.depth_ + 1});
    v.holds_namespace_ |= key.holds_namespace_ || value.holds_namespace_;
  }
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}
Value Value::Namespace(Dict attributes) {
  Value v = MakeDict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  v.holds_namespace_ = true;
  return v;
}
Value Value::Function(std::string name) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.hint_ = std::move(name);
  return v;
}
Value Value::Macro(const MacroDef* macro, std::weak_ptr<Scope> closure) {
  Value v;
  v.kind_ = Kind::kMacro;
  v.macro_ = macro;
  v.closure_ = std::move(closure);
  return v;
}
Value Value::Method(Value receiver, std::string name) {
  Value v;
  v.kind_ = Kind::kMethod;
  v.list_ = std::make_shared<const ValueList>(ValueList{std::move(receiver)});
  v.hint_ = std::move(name);
  return v;
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.as_bool();
    case Kind::kInt:
      return v.as_int() != 0;
    case Kind::kFloat:
      return v.as_float() != 0.0;
    case Kind::kString:
      return !v.str().text.empty();
    case Kind::kList:
      return v.is_generator() || !v.list().empty();
    case Kind::kDict:
      return !v.dict().entries.empty();
    default:
      return true;
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(Kind::kFloat) || b.is(Kind::kFloat)) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str().text == b.str().text;
    case Kind::kList: {
      if (a.is_generator() || b.is_generator()) return false;
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &a.namespace_attributes() == &b.namespace_attributes();
    case Kind::kMacro:
      return a.macro() == b.macro();
    default:
      return false;
  }
}

const char* TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return v.is_generator() ? "generator" : (v.is_tuple() ? "tuple" : "list");
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kMacro:
      return "Macro";
    case Kind::kMethod:
      return "method";
    case Kind::kFunction:
      return "builtin_function_or_method";
  }
  return "?";
}

Result<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(Kind::kFloat) || b.is(Kind::kFloat)) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is(Kind::kString) && b.is(Kind::kString)) {
    const int c = a.str().text.compare(b.str().text);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is(Kind::kList) && b.is(Kind::kList) && a.is_tuple() == b.is_tuple() && !a.is_generator() &&
      !b.is_generator()) {
    const ValueList &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return InvalidArgument(std::string("ordering not supported between '") + TypeName(a) + "' and '" +
                         TypeName(b) + "'");
}

namespace {

Status ReprInto(const Value& v, std::string* out, bool* tainted, int depth) {
  if (depth > 128) return InvalidArgument("value nested too deeply");
  switch (v.kind()) {
    case Kind::kUndefined:
      *out += "Undefined";
      return Status::Ok();
    case Kind::kNone:
      *out += "None";
      return Status::Ok();
    case Kind::kBool:
      *out += v.as_bool() ? "True" : "False";
      return Status::Ok();
    case Kind::kInt:
      *out += std::to_string(v.as_int());
      return Status::Ok();
    case Kind::kFloat:
      *out += FloatRepr(v.as_float());
      return Status::Ok();
    case Kind::kString:
      *out += PyRepr(v.str().text);
      *tainted |= v.str().tainted();
      return Status::Ok();
    case Kind::kList: {
      if (v.is_generator()) return InvalidArgument("cannot render a generator object");
      *out += v.is_tuple() ? '(' : '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += ", ";
        RETURN_IF_ERROR(ReprInto(v.list()[i], out, tainted, depth + 1));
      }
      if (v.is_tuple() && v.list().size() == 1) *out += ',';
      *out += v.is_tuple() ? ')' : ']';
      return Status::Ok();
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (v.is(Kind::kNamespace)) *out += "<Namespace ";
      *out += '{';
      bool first = true;
      for (const auto& [key, value] : v.dict().entries) {
        if (!first) *out += ", ";
        first = false;
        RETURN_IF_ERROR(ReprInto(key, out, tainted, depth + 1));
        *out += ": ";
        RETURN_IF_ERROR(ReprInto(value, out, tainted, depth + 1));
      }
      *out += '}';
      if (v.is(Kind::kNamespace)) *out += '>';
      return Status::Ok();
    }
    default:
      return InvalidArgument(std::string("cannot convert a ") + TypeName(v) + " to a string");
  }
}

void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {
      char32_t cp;
      const size_t n = DecodeAt(s, i, &cp);
      if (cp == 0xFFFFFFFF) cp = static_cast<unsigned char>(c);
      char buf[16];
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      }
      *out += buf;
      i += n - 1;
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

std::string JsonFloat(double f) {
  if (f != f) return "NaN";
  if (f == std::numeric_limits<double>::infinity()) return "Infinity";
  if (f == -std::numeric_limits<double>::infinity()) return "-Infinity";
  return FloatRepr(f);
}

Result<std::string> JsonKey(const Value& key, bool* tainted) {
  switch (key.kind()) {
    case Kind::kString:
      *tainted |= key.str().tainted();
      return key.str().text;
    case Kind::kInt:
      return std::to_string(key.as_int());
    case Kind::kFloat:
      return JsonFloat(key.as_float());
    case Kind::kBool:
      return std::string(key.as_bool() ? "true" : "false");
    case Kind::kNone:
      return std::string("null");
    default:
      return InvalidArgument(std::string("keys must be str, int, float, bool or None, not ") +
                             TypeName(key));
  }
}

Status JsonInto(const Value& v, const JsonOptions& o, int level, std::string* out, bool* tainted) {
  if (level > 128) return InvalidArgument("value nested too deeply for tojson");
  const std::string item_sep =
      o.custom_separators ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  auto newline = [&](int at) {
    if (o.indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(o.indent) * static_cast<size_t>(at), ' ');
  };
  switch (v.kind()) {
    case Kind::kNone:
      *out += "null";
      return Status::Ok();
    case Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return Status::Ok();
    case Kind::kInt:
      *out += std::to_string(v.as_int());
      return Status::Ok();
    case Kind::kFloat:
      *out += JsonFloat(v.as_float());
      return Status::Ok();
    case Kind::kString:
      JsonString(v.str().text, o.ensure_ascii, out);
      *tainted |= v.str().tainted();
      return Status::Ok();
    case Kind::kList: {
      if (v.is_generator())
        return InvalidArgument("Object of type generator is not JSON serializable");
      if (v.list().empty()) {
        *out += "[]";
        return Status::Ok();
      }
      *out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        RETURN_IF_ERROR(JsonInto(v.list()[i], o, level + 1, out, tainted));
      }
      newline(level);
      *out += ']';
      return Status::Ok();
    }
    case Kind::kDict: {
      if (v.dict().entries.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [key, value] : v.dict().entries) {
        ASSIGN_OR_RETURN(std::string k, JsonKey(key, tainted));
        items.emplace_back(std::move(k), &value);
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        JsonString(items[i].first, o.ensure_ascii, out);
        *out += o.key_separator;
        RETURN_IF_ERROR(JsonInto(*items[i].second, o, level + 1, out, tainted));
      }
      newline(level);
      *out += '}';
      return Status::Ok();
    }
    default:
      return InvalidArgument(std::string("Object of type ") + TypeName(v) +
                             " is not JSON serializable");
  }
}

}  // namespace

Result<Str> Repr(const Value& v) {
  std::string out;
  bool tainted = false;
  RETURN_IF_ERROR(ReprInto(v, &out, &tainted, 0));
  return Derived(std::move(out), tainted);
}

Result<Str> ToStr(const Value& v) {
  switch (v.kind()) {
    case Kind::kString:
      return v.str();
    case Kind::kUndefined:
      return Str{};
    default:
      return Repr(v);
  }
}

Result<Str> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  bool tainted = false;
  RETURN_IF_ERROR(JsonInto(v, options, 0, &out, &tainted));
  return Derived(std::move(out), tainted);
}

template <typename Json>
Value FromJson(const Json& j, bool taint) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::Int(static_cast<int64_t>(u))
                                                   : Value::Float(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(Derived(j.template get<std::string>(), taint));
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(FromJson(item, taint));
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      dict.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        dict.entries.emplace_back(Value::String(Derived(it.key(), taint)),
                                  FromJson(it.value(), taint));
      }
      return Value::MakeDict(std::move(dict));
    }
    default:
      return Value::None();
  }
}
template Value FromJson(const nlohmann::json&, bool);
template Value FromJson(const nlohmann::ordered_json&, bool);

Result<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return ValueList{};
    case Kind::kList:
      return v.list();
    case Kind::kDict: {
      ValueList keys;
      for (const auto& entry : v.dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Kind::kString: {
      const std::vector<size_t> offsets = CodePointOffsets(v.str().text);
      ValueList chars;
      chars.reserve(offsets.size() - 1);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::String(v.str().Slice(offsets[i], offsets[i + 1])));
      }
      return chars;
    }
    default:
      return InvalidArgument(std::string("'") + TypeName(v) + "' object is not iterable");
  }
}

}  // namespace tpserve::chat
