// The parsed form of a template: expressions and statements. Built once by
// the parser; read-only while rendering (so one Template renders on many
// threads at once).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/jinja/value.h"

namespace floe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kLiteral,   // value
    kName,      // name
    kList,      // args
    kDict,      // keys (args, even) and values (odd)
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not] name(args[1..])
    kNot,       // not args[0]
    kNeg,       // -args[0]
    kBinary,    // args[0] name args[1]: or and + - * / // % ** ~ == != < <= > >= in notin
    kCondExpr,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Type type;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest
  int line = 0;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct MacroDef {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};

struct Node {
  enum class Type { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Type type;
  int line = 0;
  std::string text;                 // kText
  ExprPtr expr;                     // kOutput; kSet value; kFor iterable
  // kIf: conditions[i] guards bodies[i]; a last body without condition is else.
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  // kFor: targets; filter (may be null); bodies[0] loop, bodies[1] else (optional).
  // kSet / kSetBlock: targets (several: unpacking), attr (ns.attr assignment).
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr filter;
  std::shared_ptr<MacroDef> macro;  // kMacro
};

}  // namespace floe::jinja
