#include "common/jinja/fold.h"

#include "common/jinja/renderer.h"

namespace floe::jinja {
namespace {

// jinja2's compiler.has_safe_repr.
bool HasSafeRepr(const Value& v) {
  NestingGuard guard;
  switch (v.kind) {
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kString:
      return true;
    case Value::Kind::kList:
      if (v.seq == Value::Seq::kRange) return true;
      if (v.seq != Value::Seq::kList && v.seq != Value::Seq::kTuple) return false;
      for (const Value& item : *v.list)
        if (!HasSafeRepr(item)) return false;
      return true;
    case Value::Kind::kDict:
      for (const auto& [k, item] : *v.dict)
        if (!HasSafeRepr(item)) return false;
      return true;
    default:
      return false;
  }
}

// The node types whose code generation runs the optimizer (optimizeconst).
bool Optimized(Expr::Type type) {
  switch (type) {
    case Expr::Type::kBinary:
    case Expr::Type::kAnd:
    case Expr::Type::kOr:
    case Expr::Type::kNot:
    case Expr::Type::kNeg:
    case Expr::Type::kPos:
    case Expr::Type::kConcat:
    case Expr::Type::kCompare:
    case Expr::Type::kAttr:
    case Expr::Type::kItem:
    case Expr::Type::kSlice:
    case Expr::Type::kFilter:
    case Expr::Type::kTest:
    case Expr::Type::kCondExpr:
      return true;
    default:
      return false;
  }
}

// Bottom-up, as the optimizer folds children before their parent.
void FoldExpr(ExprPtr& e) {
  if (!e) return;
  for (ExprPtr& a : e->args) FoldExpr(a);
  for (auto& [k, v] : e->kwargs) FoldExpr(v);
  if (!Optimized(e->type)) return;
  std::optional<Value> value = Renderer::Fold(*e);
  if (!value || !HasSafeRepr(*value)) return;
  auto literal = std::make_unique<Expr>();
  literal->type = Expr::Type::kLiteral;
  literal->value = std::move(*value);
  literal->line = e->line;
  e = std::move(literal);
}

void FoldBody(Body& body) {
  for (NodePtr& node : body) {
    for (ExprPtr& e : node->exprs) FoldExpr(e);
    for (Body& b : node->bodies) FoldBody(b);
    if (node->macro) {
      for (ExprPtr& d : node->macro->defaults) FoldExpr(d);
      FoldBody(node->macro->body);
    }
    // A constant {{ }} is printed at compile time, whatever its value.
    if (node->type == Node::Type::kOutput) {
      std::optional<Value> value = Renderer::Fold(*node->exprs[0]);
      if (!value) continue;
      try {
        node->text = Str(*value);
      } catch (const Error&) {
        continue;  // a memory address: left to fail at render
      }
      node->type = Node::Type::kText;
      node->exprs.clear();
    }
  }
}

}  // namespace

void FoldConstants(Program& program) { FoldBody(program.body); }

}  // namespace floe::jinja
