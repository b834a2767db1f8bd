// The values a chat template computes with: Python's None, bool, int, float, str, list, tuple and
// dict as Jinja sees them, plus Jinja's Undefined, namespace(), macros and bound methods.
//
// Strings carry taint: the byte ranges that came from the request. Values are immutable once
// built (the sandbox is immutable), except a namespace's attributes, which `set ns.x` assigns.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "text/chat/chat_template.h"

namespace tpserve::chat {

// A string and the byte ranges of it (relative to `text`; sorted, merged) that are untrusted.
struct Str {
  std::string text;
  std::vector<TextRange> taint;
  bool markup = false;  // Jinja's Markup (the `safe` filter): `+` HTML-escapes its plain operand

  bool tainted() const { return !taint.empty(); }
  void Append(const Str& other);  // keeps both sides' ranges exact
  void AppendTrusted(std::string_view bytes);
  Str Slice(size_t begin, size_t end) const;  // byte offsets; ranges clipped exactly
  void TaintAll() {
    taint = text.empty() ? std::vector<TextRange>{} : std::vector<TextRange>{{0, text.size()}};
  }
};

// A transformed string: wholly untrusted when any input was.
Str Derived(std::string text, bool tainted);

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kMacro,
  kMethod,
  kFunction
};

struct MacroDef;
struct Scope;
class Value;
using ValueList = std::vector<Value>;

// Insertion-ordered, as Python's dict.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
};

class Value {
 public:
  Value() = default;  // Undefined
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(Str s);
  static Value Trusted(std::string text);
  static Value List(ValueList items, bool tuple = false);
  // What Jinja's select/reject/map/unique/items filters return: a Python generator, which is
  // iterable but cannot be indexed, printed or serialized, and is always true.
  static Value Generator(ValueList items);
  static Value MakeDict(Dict dict);
  static Value Namespace(Dict attributes);
  // A macro holds its defining scope weakly: scopes hold the macros defined in them.
  static Value Macro(const MacroDef* macro, std::weak_ptr<Scope> closure);
  static Value Method(Value receiver, std::string name);
  static Value Function(std::string name);  // a global: raise_exception, namespace, range ...

  Kind kind() const { return kind_; }
  bool is(Kind k) const { return kind_ == k; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const Str& str() const { return *s_; }
  const ValueList& list() const { return *list_; }
  bool is_tuple() const { return tuple_; }
  bool is_generator() const { return generator_; }
  const Dict& dict() const { return *dict_; }
  Dict& namespace_attributes() const { return *dict_; }  // kNamespace only
  const std::string& undefined_hint() const { return hint_; }
  const MacroDef* macro() const { return macro_; }
  const std::weak_ptr<Scope>& closure() const { return closure_; }
  const Value& receiver() const { return list_->front(); }  // kMethod
  const std::string& method_name() const { return hint_; }  // kMethod, kFunction
  // Nesting depth of lists and dicts (0 for scalars), bounded so that recursion over values is.
  int depth() const { return depth_; }
  // Whether a namespace is inside: such values may not go into a namespace (no cycles).
  bool holds_namespace() const { return holds_namespace_; }

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool generator_ = false;
  bool holds_namespace_ = false;
  int depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const Str> s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::string hint_;
  const MacroDef* macro_ = nullptr;
  std::weak_ptr<Scope> closure_;
};

// Python's truth value, ==, and ordering (an error where Python raises TypeError).
bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);
Result<int> Compare(const Value& a, const Value& b);

// Python's str() and repr(); untrusted when any string inside was.
Result<Str> ToStr(const Value& v);
Result<Str> Repr(const Value& v);
const char* TypeName(const Value& v);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=sort_keys);
// indent < 0 means None. Whole result untrusted when any string inside was.
struct JsonOptions {
  int indent = -1;
  bool ensure_ascii = false;
  std::string item_separator;  // empty: Python's default for the indent
  std::string key_separator = ": ";
  bool custom_separators = false;
  bool sort_keys = false;
};
Result<Str> ToJson(const Value& v, const JsonOptions& options);

// A request's JSON as template values; every string (keys too) is marked untrusted when `taint`.
template <typename Json>
Value FromJson(const Json& j, bool taint);

// ValueList of a value Python can iterate (str: code points; dict: keys; Undefined: nothing).
Result<ValueList> Iterate(const Value& v);

}  // namespace tpserve::chat
