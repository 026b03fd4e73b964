#include "common/jinja/analysis.h"

#include <map>
#include <set>

namespace floe::jinja {
namespace {

// A frame's symbol table, as jinja2's idtracking.Symbols keeps it: how each
// name the frame touches gets its value when the frame starts.
class Symbols {
 public:
  enum class Load { kParam, kResolve, kAlias, kUndefined };

  explicit Symbols(const Symbols* parent) : parent_(parent) {}

  bool FindRef(const std::string& name) const { return refs_.count(name) || (parent_ && parent_->FindRef(name)); }
  void LoadName(const std::string& name) {
    if (!FindRef(name)) refs_[name] = Load::kResolve;
  }
  void Store(const std::string& name) {
    stores_.insert(name);
    if (!refs_.count(name)) refs_[name] = parent_ && parent_->FindRef(name) ? Load::kAlias : Load::kUndefined;
  }
  void Param(const std::string& name) {
    stores_.insert(name);
    refs_[name] = Load::kParam;
  }

  // After an if: a name assigned on only some of its three branches (body,
  // the elif chain, else) reads its outer value until assigned.
  void BranchUpdate(const std::vector<Symbols>& branches) {
    std::map<std::string, size_t> counts;
    for (const Symbols& branch : branches)
      for (const std::string& name : branch.stores_)
        if (!stores_.count(name)) ++counts[name];
    for (const Symbols& branch : branches) {
      for (const auto& [name, load] : branch.refs_) refs_[name] = load;
      stores_.insert(branch.stores_.begin(), branch.stores_.end());
    }
    for (const auto& [name, count] : counts) {
      if (count == branches.size()) continue;
      refs_[name] = parent_ && parent_->FindRef(name) ? Load::kAlias : Load::kResolve;
    }
  }

  Shadowed Undefined() const {
    Shadowed names;
    for (const auto& [name, load] : refs_)
      if (load == Load::kUndefined) names.push_back(name);
    return names;
  }

 private:
  const Symbols* parent_;
  std::map<std::string, Load> refs_;
  std::set<std::string> stores_;
};

void VisitExpr(const Expr* e, Symbols& s) {
  if (!e) return;
  if (e->type == Expr::Type::kName) s.LoadName(e->name);
  for (const ExprPtr& a : e->args) VisitExpr(a.get(), s);
  for (const auto& [k, v] : e->kwargs) VisitExpr(v.get(), s);
}

void VisitBody(const Body& body, Symbols& s);

void VisitTarget(const Target& target, Symbols& s) {
  if (!target.attr.empty()) {
    s.LoadName(target.names[0]);  // ns.attr reads ns
    return;
  }
  for (const std::string& name : target.names) s.Store(name);
}

// jinja2 nests elifs as If nodes in the first If's elif_ list.
void VisitIf(const Node& node, Symbols& s) {
  VisitExpr(node.exprs[0].get(), s);
  Symbols body = s;
  VisitBody(node.bodies[0], body);
  Symbols elif = s;
  for (size_t k = 1; k < node.exprs.size(); ++k) {
    VisitExpr(node.exprs[k].get(), elif);
    Symbols branch = elif;
    VisitBody(node.bodies[k], branch);
    elif.BranchUpdate({branch, elif, elif});
  }
  Symbols otherwise = s;
  if (node.bodies.size() > node.exprs.size()) VisitBody(node.bodies.back(), otherwise);
  s.BranchUpdate({body, elif, otherwise});
}

// jinja2's FrameSymbolVisitor: one statement, in the frame that holds it;
// it stops at statements that open frames of their own.
void VisitNode(const Node& node, Symbols& s) {
  switch (node.type) {
    case Node::Type::kOutput:
    case Node::Type::kFor:  // only the iterable belongs to this frame
    case Node::Type::kWith:
    case Node::Type::kFilterBlock:
      for (const ExprPtr& e : node.exprs) {
        VisitExpr(e.get(), s);
        if (node.type == Node::Type::kFor) break;
      }
      break;
    case Node::Type::kIf:
      VisitIf(node, s);
      break;
    case Node::Type::kSet:
      VisitExpr(node.exprs[0].get(), s);
      VisitTarget(node.target, s);
      break;
    case Node::Type::kSetBlock:
      VisitTarget(node.target, s);
      break;
    case Node::Type::kMacro:
      s.Store(node.macro->name);
      break;
    default:
      break;
  }
}

void VisitBody(const Body& body, Symbols& s) {
  for (const NodePtr& node : body) VisitNode(*node, s);
}

void AnalyzeChildren(const Body& body, const Symbols& frame);

// A statement's own frame(s), whose parent is `frame` (complete by now).
void AnalyzeChild(Node& node, const Symbols& frame) {
  Symbols child(&frame);
  switch (node.type) {
    case Node::Type::kFor: {
      for (const std::string& name : node.target.names) child.Param(name);
      child.Param("loop");
      VisitBody(node.bodies[0], child);
      node.shadowed = child.Undefined();
      AnalyzeChildren(node.bodies[0], child);
      if (node.bodies.size() > 1) {
        Symbols otherwise(&frame);
        VisitBody(node.bodies[1], otherwise);
        node.else_shadowed = otherwise.Undefined();
        AnalyzeChildren(node.bodies[1], otherwise);
      }
      return;
    }
    case Node::Type::kMacro: {
      MacroDef& macro = *node.macro;
      for (const std::string& param : macro.params) child.Param(param);
      for (const ExprPtr& d : macro.defaults) VisitExpr(d.get(), child);
      VisitBody(macro.body, child);
      macro.shadowed = child.Undefined();
      AnalyzeChildren(macro.body, child);
      return;
    }
    case Node::Type::kWith:
      for (const std::string& name : node.with_names) child.Param(name);
      break;
    case Node::Type::kFilterBlock:
      VisitExpr(node.exprs[0].get(), child);
      break;
    case Node::Type::kSetBlock:
    case Node::Type::kScope:
      break;
    default:
      return;
  }
  VisitBody(node.bodies[0], child);
  node.shadowed = child.Undefined();
  AnalyzeChildren(node.bodies[0], child);
}

void AnalyzeChildren(const Body& body, const Symbols& frame) {
  for (const NodePtr& node : body) {
    if (node->type == Node::Type::kIf) {
      for (const Body& branch : node->bodies) AnalyzeChildren(branch, frame);
    } else {
      AnalyzeChild(*node, frame);
    }
  }
}

bool ExprReads(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->type == Expr::Type::kName && e->name == name) return true;
  for (const ExprPtr& a : e->args)
    if (ExprReads(a.get(), name)) return true;
  for (const auto& [k, v] : e->kwargs)
    if (ExprReads(v.get(), name)) return true;
  return false;
}

}  // namespace

void Analyze(Program& program) {
  Symbols root(nullptr);
  VisitBody(program.body, root);
  program.shadowed = root.Undefined();
  AnalyzeChildren(program.body, root);
}

namespace {

// `x.content` or `x['content']`, under filters, tests and slices.
bool IsContentAccess(const Expr* e) {
  while (e != nullptr) {
    switch (e->type) {
      case Expr::Type::kFilter:
      case Expr::Type::kTest:
      case Expr::Type::kSlice:
        e = e->args.empty() ? nullptr : e->args[0].get();
        continue;
      case Expr::Type::kAttr:
        return e->name == "content";
      case Expr::Type::kItem:
        return e->args.size() == 2 && e->args[1]->type == Expr::Type::kLiteral && e->args[1]->value.is_string() &&
               e->args[1]->value.s == "content";
      default:
        return false;
    }
  }
  return false;
}

// A name, under filters, tests and slices: the name; else "".
std::string BaseName(const Expr* e) {
  while (e != nullptr && (e->type == Expr::Type::kFilter || e->type == Expr::Type::kTest ||
                          e->type == Expr::Type::kSlice))
    e = e->args.empty() ? nullptr : e->args[0].get();
  return e != nullptr && e->type == Expr::Type::kName ? e->name : "";
}

void CollectContentNames(const Body& body, std::set<std::string>& names) {
  for (const NodePtr& node : body) {
    if (node->type == Node::Type::kSet && node->target.names.size() == 1 && !node->target.unpack &&
        node->target.attr.empty() && !node->exprs.empty() && IsContentAccess(node->exprs[0].get()))
      names.insert(node->target.names[0]);
    for (const Body& b : node->bodies) CollectContentNames(b, names);
    if (node->macro) CollectContentNames(node->macro->body, names);
  }
}

bool LoopsOver(const Body& body, const std::set<std::string>& names) {
  for (const NodePtr& node : body) {
    if (node->type == Node::Type::kFor && !node->exprs.empty()) {
      const Expr* iter = node->exprs[0].get();
      if (IsContentAccess(iter) || names.count(BaseName(iter))) return true;
    }
    for (const Body& b : node->bodies)
      if (LoopsOver(b, names)) return true;
    if (node->macro && LoopsOver(node->macro->body, names)) return true;
  }
  return false;
}

}  // namespace

bool LoopsOverContent(const Body& body) {
  std::set<std::string> names;
  CollectContentNames(body, names);
  return LoopsOver(body, names);
}

bool ReadsName(const Body& body, const std::string& name) {
  for (const NodePtr& node : body) {
    for (const ExprPtr& e : node->exprs)
      if (ExprReads(e.get(), name)) return true;
    for (const Body& b : node->bodies)
      if (ReadsName(b, name)) return true;
    if (node->macro) {
      for (const ExprPtr& d : node->macro->defaults)
        if (ExprReads(d.get(), name)) return true;
      if (ReadsName(node->macro->body, name)) return true;
    }
  }
  return false;
}

}  // namespace floe::jinja
