#include "text/chat/parser.h"

#include <charconv>
#include <set>

#include "text/chat/builtins.h"
#include "text/chat/lexer.h"

namespace tpserve::chat {
namespace {

constexpr int kMaxNesting = 200;  // expression and block depth: bounds the recursion of both passes

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<std::shared_ptr<const Program>> Run() {
    auto program = std::make_shared<Program>();
    std::string end_tag;
    RETURN_IF_ERROR(ParseBody({}, &program->body, &end_tag));
    for (const auto& [name, line] : called_functions_) {
      if (!IsSupportedFunction(name) && macro_names_.count(name) == 0) {
        return TemplateError(line, "function '" + name + "' is not supported");
      }
    }
    return std::shared_ptr<const Program>(std::move(program));
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == T::kOperator && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().type == T::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kEnd:
        return "end of template";
      case T::kBlockEnd:
        return "end of statement block";
      case T::kVarEnd:
        return "end of print statement";
      case T::kString:
        return "string";
      case T::kData:
        return "template data";
      default:
        return "'" + t.text + "'";
    }
  }
  Status Unexpected() const { return TemplateError(Cur().line, "unexpected " + Describe(Cur())); }
  Status ExpectOp(std::string_view op) {
    if (!SkipOp(op))
      return TemplateError(Cur().line,
                           "expected '" + std::string(op) + "', got " + Describe(Cur()));
    return Status::Ok();
  }
  Status ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd)
      return TemplateError(Cur().line, "expected end of statement block, got " + Describe(Cur()));
    Next();
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Cur().type != T::kName)
      return TemplateError(Cur().line, "expected a name, got " + Describe(Cur()));
    std::string name = Cur().text;
    Next();
    return name;
  }
  Status Enter() {
    if (++depth_ > kMaxNesting) return TemplateError(Cur().line, "template nested too deeply");
    return Status::Ok();
  }

  static ExprPtr Node(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // ---- statements --------------------------------------------------------------------------

  // Parses until a block tag named in `ends` (consumed: its name is left in *end_tag, the cursor
  // after the name) or the end of the template (only when `ends` is empty).
  Status ParseBody(const std::set<std::string>& ends, Body* body, std::string* end_tag) {
    RETURN_IF_ERROR(Enter());
    while (true) {
      const Token& tok = Cur();
      if (tok.type == T::kEnd) {
        if (!ends.empty())
          return TemplateError(tok.line,
                               "unexpected end of template, expected '" + *ends.begin() + "'");
        break;
      }
      if (tok.type == T::kData) {
        Stmt s;
        s.type = Stmt::Type::kText;
        s.line = tok.line;
        s.text = tok.text;
        body->push_back(std::move(s));
        Next();
      } else if (tok.type == T::kVarBegin) {
        Next();
        Stmt s;
        s.type = Stmt::Type::kOutput;
        s.line = tok.line;
        ASSIGN_OR_RETURN(s.expr, ParseTuple(false, true, {}, false));
        if (Cur().type != T::kVarEnd) return Unexpected();
        Next();
        body->push_back(std::move(s));
      } else if (tok.type == T::kBlockBegin) {
        Next();
        if (Cur().type != T::kName) return TemplateError(Cur().line, "tag name expected");
        if (ends.count(Cur().text) > 0) {
          *end_tag = Cur().text;
          Next();
          break;
        }
        Stmt s;
        RETURN_IF_ERROR(ParseStatement(&s));
        body->push_back(std::move(s));
      } else {
        return Unexpected();
      }
    }
    --depth_;
    return Status::Ok();
  }

  Status ParseStatement(Stmt* s) {
    const std::string tag = Cur().text;
    s->line = Cur().line;
    Next();
    if (tag == "if") return ParseIf(s);
    if (tag == "for") return ParseFor(s);
    if (tag == "set") return ParseSet(s);
    if (tag == "macro") return ParseMacro(s);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return TemplateError(s->line, "'" + tag + "' outside of a loop");
      s->type = tag == "break" ? Stmt::Type::kBreak : Stmt::Type::kContinue;
      return ExpectBlockEnd();
    }
    static const std::set<std::string> kEndTags = {"endif",    "endfor", "endset",
                                                   "endmacro", "elif",   "else"};
    if (kEndTags.count(tag) > 0) return TemplateError(s->line, "unexpected '" + tag + "'");
    return TemplateError(s->line, "tag '" + tag + "' is not supported");
  }

  Status ParseIf(Stmt* s) {
    s->type = Stmt::Type::kIf;
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr condition, ParseTuple(false, false, {}, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->conditions.push_back(std::move(condition));
      Body body;
      std::string end;
      RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &body, &end));
      s->bodies.push_back(std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        Body else_body;
        RETURN_IF_ERROR(ParseBody({"endif"}, &else_body, &end));
        s->bodies.push_back(std::move(else_body));
      }
      return ExpectBlockEnd();
    }
  }

  Status ParseTargets(std::vector<std::string>* targets) {
    // Names, optionally parenthesized, separated by commas (Jinja's simplified tuple of names).
    const bool paren = SkipOp("(");
    do {
      if (paren && IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets->push_back(std::move(name));
    } while (SkipOp(",") && (Cur().type == T::kName || (paren && !IsOp(")"))));
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    for (const std::string& name : *targets) {
      if (name == "true" || name == "false" || name == "none" || name == "True" ||
          name == "False" || name == "None") {
        return TemplateError(Cur().line, "cannot assign to '" + name + "'");
      }
    }
    return Status::Ok();
  }

  Status ParseFor(Stmt* s) {
    s->type = Stmt::Type::kFor;
    RETURN_IF_ERROR(ParseTargets(&s->targets));
    if (!SkipName("in")) return TemplateError(Cur().line, "expected 'in', got " + Describe(Cur()));
    ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, {"recursive"}, false));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(s->filter, ParseExpression(true));
    }
    if (IsName("recursive")) return TemplateError(Cur().line, "recursive loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    std::string end;
    RETURN_IF_ERROR(ParseBody({"endfor", "else"}, &s->body, &end));
    --loop_depth_;
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      RETURN_IF_ERROR(ParseBody({"endfor"}, &s->else_body, &end));
    }
    return ExpectBlockEnd();
  }

  Status ParseSet(Stmt* s) {
    if (Cur().type == T::kName && Peek().type == T::kOperator && Peek().text == ".") {
      s->targets.push_back(Cur().text);
      Next();
      Next();
      ASSIGN_OR_RETURN(s->attribute, ExpectName());
    } else {
      RETURN_IF_ERROR(ParseTargets(&s->targets));
    }
    if (SkipOp("=")) {
      s->type = Stmt::Type::kSet;
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}, false));
      return ExpectBlockEnd();
    }
    if (!s->attribute.empty() || s->targets.size() != 1)
      return TemplateError(s->line, "block set needs one name");
    if (IsOp("|")) return TemplateError(s->line, "filtered block set is not supported");
    s->type = Stmt::Type::kSetBlock;
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    RETURN_IF_ERROR(ParseBody({"endset"}, &s->body, &end));
    return ExpectBlockEnd();
  }

  Status ParseMacro(Stmt* s) {
    s->type = Stmt::Type::kMacro;
    auto macro = std::make_shared<MacroDef>();
    ASSIGN_OR_RETURN(macro->name, ExpectName());
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!macro->params.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      ExprPtr default_value;
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(default_value, ParseExpression(true));
      } else if (!macro->defaults.empty() && macro->defaults.back() != nullptr) {
        return TemplateError(Cur().line, "non-default argument follows default argument");
      }
      macro->params.push_back(std::move(param));
      macro->defaults.push_back(std::move(default_value));
    }
    Next();
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    RETURN_IF_ERROR(ParseBody({"endmacro"}, &macro->body, &end));
    loop_depth_ = saved_loop_depth;
    if (Cur().type == T::kName) Next();  // {% endmacro name %}
    macro_names_.insert(macro->name);
    s->macro = std::move(macro);
    return ExpectBlockEnd();
  }

  // ---- expressions -------------------------------------------------------------------------

  bool IsTupleEnd(const std::set<std::string>& extra_end) const {
    if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || IsOp(")")) return true;
    return Cur().type == T::kName && extra_end.count(Cur().text) > 0;
  }

  Result<ExprPtr> ParseTuple(bool simplified, bool with_condition,
                             const std::set<std::string>& extra_end, bool explicit_parentheses) {
    const int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      if (simplified) {
        ASSIGN_OR_RETURN(ExprPtr e, ParsePrimary());
        items.push_back(std::move(e));
      } else {
        ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condition));
        items.push_back(std::move(e));
      }
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses)
        return TemplateError(Cur().line, "expected an expression, got " + Describe(Cur()));
    }
    ExprPtr tuple = Node(Expr::Type::kTuple, line);
    tuple->args = std::move(items);
    return tuple;
  }

  Result<ExprPtr> ParseExpression(bool with_condition) {
    RETURN_IF_ERROR(Enter());
    Result<ExprPtr> e = with_condition ? ParseCondition() : ParseOr();
    --depth_;
    return e;
  }

  Result<ExprPtr> ParseCondition() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (IsName("if")) {
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr condition, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        RETURN_IF_ERROR(Enter());
        ASSIGN_OR_RETURN(otherwise, ParseCondition());
        --depth_;
      }
      ExprPtr node = Node(Expr::Type::kCondition, line);
      node->args.push_back(std::move(e));
      node->args.push_back(std::move(condition));
      node->args.push_back(std::move(otherwise));
      e = std::move(node);
    }
    return e;
  }

  static ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr node = Node(Expr::Type::kBinary, line);
    node->name = std::move(op);
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    return node;
  }

  Result<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = Binary("or", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = Binary("and", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      ExprPtr node = Node(Expr::Type::kUnary, Cur().line);
      node->name = "not";
      Next();
      RETURN_IF_ERROR(Enter());
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      --depth_;
      node->args.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (Cur().type == T::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == T::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!node) {
        node = Node(Expr::Type::kCompare, line);
        node->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      node->ops.push_back(op);
      node->args.push_back(std::move(operand));
    }
    return node ? std::move(node) : std::move(first);
  }

  template <typename Next>
  Result<ExprPtr> LeftAssoc(const std::set<std::string>& ops, Next next) {
    ASSIGN_OR_RETURN(ExprPtr left, next());
    while (Cur().type == T::kOperator && ops.count(Cur().text) > 0) {
      const std::string op = Cur().text;
      const int line = Cur().line;
      this->Next();
      ASSIGN_OR_RETURN(ExprPtr right, next());
      left = Binary(op, std::move(left), std::move(right), line);
    }
    return left;
  }
  Result<ExprPtr> ParseMath1() {
    return LeftAssoc({"+", "-"}, [this] { return ParseConcat(); });
  }
  Result<ExprPtr> ParseConcat() {
    return LeftAssoc({"~"}, [this] { return ParseMath2(); });
  }
  Result<ExprPtr> ParseMath2() {
    return LeftAssoc({"*", "/", "//", "%"}, [this] { return ParsePow(); });
  }
  Result<ExprPtr> ParsePow() {
    return LeftAssoc({"**"}, [this] { return ParseUnary(true); });
  }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    RETURN_IF_ERROR(Enter());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Node(Expr::Type::kUnary, Cur().line);
      node->name = Cur().text;
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    --depth_;
    return node;
  }

  Result<ExprPtr> ParsePrimary() {
    RETURN_IF_ERROR(Enter());
    const Token& tok = Cur();
    ExprPtr node = Node(Expr::Type::kLiteral, tok.line);
    if (tok.type == T::kName) {
      if (tok.text == "true" || tok.text == "True") {
        node->literal = Value::Bool(true);
      } else if (tok.text == "false" || tok.text == "False") {
        node->literal = Value::Bool(false);
      } else if (tok.text == "none" || tok.text == "None") {
        node->literal = Value::None();
      } else {
        node->type = Expr::Type::kName;
        node->name = tok.text;
      }
      Next();
    } else if (tok.type == T::kString) {
      std::string text;
      while (Cur().type == T::kString) {
        text += Cur().text;
        Next();
      }
      node->literal = Value::Trusted(std::move(text));
    } else if (tok.type == T::kInteger || tok.type == T::kFloat) {
      std::string digits;
      for (char c : tok.text) {
        if (c != '_') digits += c;
      }
      if (tok.type == T::kInteger) {
        int64_t v = 0;
        const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
        if (r.ec != std::errc()) return TemplateError(tok.line, "integer literal out of range");
        node->literal = Value::Int(v);
      } else {
        node->literal = Value::Float(std::strtod(digits.c_str(), nullptr));
      }
      Next();
    } else if (IsOp("(")) {
      Next();
      ASSIGN_OR_RETURN(node, ParseTuple(false, true, {}, true));
      RETURN_IF_ERROR(ExpectOp(")"));
    } else if (IsOp("[")) {
      node->type = Expr::Type::kList;
      Next();
      while (!IsOp("]")) {
        if (!node->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
        ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
        node->args.push_back(std::move(item));
      }
      Next();
    } else if (IsOp("{")) {
      node->type = Expr::Type::kDict;
      Next();
      while (!IsOp("}")) {
        if (!node->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
        ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
        RETURN_IF_ERROR(ExpectOp(":"));
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node->args.push_back(std::move(key));
        node->args.push_back(std::move(value));
      }
      Next();
    } else {
      return Unexpected();
    }
    --depth_;
    return node;
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (IsOp(".")) {
        Next();
        if (Cur().type == T::kName) {
          ExprPtr attr = Node(Expr::Type::kAttr, line);
          attr->name = Cur().text;
          attr->args.push_back(std::move(node));
          node = std::move(attr);
        } else if (Cur().type == T::kInteger) {
          ExprPtr item = Node(Expr::Type::kItem, line);
          item->args.push_back(std::move(node));
          ExprPtr index = Node(Expr::Type::kLiteral, line);
          int64_t value = 0;
          const std::string& digits = Cur().text;
          const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value);
          if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
            return TemplateError(line, "subscript '" + digits + "' is not a supported integer");
          }
          index->literal = Value::Int(value);
          item->args.push_back(std::move(index));
          node = std::move(item);
        } else {
          return Unexpected();
        }
        Next();
      } else if (IsOp("[")) {
        Next();
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(ExprPtr operand, int line) {
    std::vector<ExprPtr> subscripts;
    while (!IsOp("]")) {
      if (!subscripts.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(ExprPtr sub, ParseSubscribed());
      subscripts.push_back(std::move(sub));
    }
    Next();
    if (subscripts.empty()) return TemplateError(line, "expected a subscript");
    if (subscripts.size() == 1 && subscripts[0]->type == Expr::Type::kSlice) {
      subscripts[0]->args.insert(subscripts[0]->args.begin(), std::move(operand));
      return std::move(subscripts[0]);
    }
    ExprPtr item = Node(Expr::Type::kItem, line);
    item->args.push_back(std::move(operand));
    if (subscripts.size() == 1) {
      item->args.push_back(std::move(subscripts[0]));
    } else {
      ExprPtr tuple = Node(Expr::Type::kTuple, line);
      tuple->args = std::move(subscripts);
      for (const ExprPtr& a : tuple->args) {
        if (a->type == Expr::Type::kSlice)
          return TemplateError(line, "slices inside tuples are not supported");
      }
      item->args.push_back(std::move(tuple));
    }
    return item;
  }

  // One subscript: an expression or a slice [start]:[stop][:[step]] (Jinja's parse_subscribed).
  Result<ExprPtr> ParseSubscribed() {
    const int line = Cur().line;
    std::vector<ExprPtr> parts;
    if (IsOp(":")) {
      Next();
      parts.push_back(nullptr);
    } else {
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      if (!IsOp(":")) return e;
      Next();
      parts.push_back(std::move(e));
    }
    auto optional_part = [&]() -> Result<ExprPtr> {
      if (IsOp("]") || IsOp(",")) return ExprPtr{};
      return ParseExpression(true);
    };
    if (IsOp(":")) {
      parts.push_back(nullptr);
    } else {
      ASSIGN_OR_RETURN(ExprPtr stop, optional_part());
      parts.push_back(std::move(stop));
    }
    if (SkipOp(":")) {
      ASSIGN_OR_RETURN(ExprPtr step, optional_part());
      parts.push_back(std::move(step));
    } else {
      parts.push_back(nullptr);
    }
    ExprPtr slice = Node(Expr::Type::kSlice, line);
    slice->args = std::move(parts);
    return slice;
  }

  Status ParseCallArgs(Expr* node) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**"))
        return TemplateError(Cur().line,
                             "operator '" + Cur().text + "' in call arguments is not supported");
      if (Cur().type == T::kName && Peek().type == T::kOperator && Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node->kwargs.empty())
          return TemplateError(Cur().line, "positional argument after keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node->args.push_back(std::move(value));
      }
    }
    Next();
    return Status::Ok();
  }

  Result<ExprPtr> ParseCall(ExprPtr callee) {
    const int line = Cur().line;
    if (callee->type == Expr::Type::kAttr) {
      if (!IsSupportedMethod(callee->name))
        return TemplateError(line, "method '" + callee->name + "' is not supported");
    } else if (callee->type == Expr::Type::kName) {
      called_functions_.emplace_back(callee->name, line);
    }
    ExprPtr call = Node(Expr::Type::kCall, line);
    call->args.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseCallArgs(call.get()));
    return call;
  }

  Result<std::string> DottedName() {
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      Next();
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (IsOp("|")) {
        Next();
        ExprPtr filter = Node(Expr::Type::kFilter, line);
        ASSIGN_OR_RETURN(filter->name, DottedName());
        if (!IsSupportedFilter(filter->name))
          return TemplateError(line, "filter '" + filter->name + "' is not supported");
        filter->args.push_back(std::move(node));
        if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(filter.get()));
        node = std::move(filter);
      } else if (IsName("is")) {
        Next();
        ExprPtr test = Node(Expr::Type::kTest, line);
        test->negated = SkipName("not");
        ASSIGN_OR_RETURN(test->name, DottedName());
        if (!IsSupportedTest(test->name))
          return TemplateError(line, "test '" + test->name + "' is not supported");
        test->args.push_back(std::move(node));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(test.get()));
        } else if ((Cur().type == T::kName || Cur().type == T::kString ||
                    Cur().type == T::kInteger || Cur().type == T::kFloat || IsOp("(") ||
                    IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) return TemplateError(line, "you cannot chain multiple tests with is");
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          test->args.push_back(std::move(arg));
        }
        node = std::move(test);
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::set<std::string> macro_names_;
  std::vector<std::pair<std::string, int>> called_functions_;
};

}  // namespace

Result<std::shared_ptr<const Program>> Parse(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).Run();
}

}  // namespace tpserve::chat
