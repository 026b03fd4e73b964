// The parsed form of a template, as jinja2's parser builds it: expressions
// and statements. Built once by Template::Parse; read-only while rendering,
// so one Template renders on many threads at once.
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
    kList,      // [args...]
    kTuple,     // (args...)
    kDict,      // {args[0]: args[1], ...}
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]], absent parts null
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs); args[0] null in a filter block's chain
    kTest,      // args[0] is [not] name(args[1..], kwargs)
    kNot,       // not args[0]
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kBinary,    // args[0] name args[1], name one of + - * / // % **
    kConcat,    // args[0] ~ args[1] ~ ...
    kAnd,       // args[0] and args[1]
    kOr,        // args[0] or args[1]
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2]... (== != < <= > >= in notin)
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Type type;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest
  int line = 0;
};

// What `set`, `for` and `with` assign to: a name, names unpacked from a
// sequence, or a namespace attribute (`set ns.x = ...`).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // names[0].attr
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// Names a frame (the template, a loop iteration, a macro call...) starts out
// holding as undefined, hiding any outer value until assigned: jinja2 does
// so for a name its frame assigns before reading (see analysis.h).
using Shadowed = std::vector<std::string>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool takes_varargs = false;     // the body reads `varargs`
  bool takes_kwargs = false;      // the body reads `kwargs`
  Shadowed shadowed;
};

struct Node {
  enum class Type {
    kText,         // text
    kOutput,       // {{ exprs[0] }}
    kIf,           // exprs[i] guards bodies[i]; one more body is the else
    kFor,          // for target in exprs[0] [if exprs[1]]: bodies[0], else bodies[1]
    kSet,          // set target = exprs[0]
    kSetBlock,     // set target [| exprs[0]] %} bodies[0] {% endset
    kMacro,        // macro
    kBreak,
    kContinue,
    kWith,         // with with_names = exprs: bodies[0]
    kFilterBlock,  // filter exprs[0]: bodies[0]
    kScope,        // bodies[0] in a frame of its own ({% generation %})
  };
  Type type;
  int line = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  Target target;
  std::vector<std::string> with_names;
  std::shared_ptr<MacroDef> macro;
  Shadowed shadowed;       // the frame of bodies[0]
  Shadowed else_shadowed;  // kFor: the frame of the else body
};

}  // namespace floe::jinja
