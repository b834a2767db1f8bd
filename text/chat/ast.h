// The parsed form of a chat template: expressions and statements as Jinja's parser builds them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/chat/value.h"

namespace tpserve::chat {

struct Expr {
  enum class Type {
    kLiteral,   // literal
    kName,      // name
    kList,      // args: items
    kTuple,     // args: items
    kDict,      // args: key, value, key, value ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null where omitted)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not] name(args[1..])
    kUnary,     // name ("-", "+", "not") args[0]
    kBinary,    // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition  // args[0] if args[1] else args[2] (null: Undefined)
  };
  Type type = Type::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Stmt;
using Body = std::vector<Stmt>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param; null where required
  Body body;
};

struct Stmt {
  enum class Type {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // conditions[i] -> bodies[i]; bodies[conditions.size()] is the else branch if present
    kFor,     // for targets in expr [if filter]: body, else_body
    kSet,     // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0]: body
    kMacro,     // macro
    kBreak,
    kContinue
  };
  Type type = Type::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attribute;
  ExprPtr filter;
  Body body;
  Body else_body;
  std::shared_ptr<MacroDef> macro;
};

struct Program {
  Body body;
};

}  // namespace tpserve::chat
