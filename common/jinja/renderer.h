// One render of a parsed template: executes statements into an output
// string and evaluates expressions with Python's semantics and jinja2's
// scoping (a loop iteration, a macro call, a with/filter/set block each get
// a frame; `if` does not; top-level assignments are seen by macros; names
// listed in a frame's `shadowed` start out undefined there).
// A Renderer lives for one Render call on one thread.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/jinja/builtins.h"
#include "common/jinja/program.h"

namespace floe::jinja {

using Scope = std::unordered_map<std::string, Value>;

// A macro value: its definition and the local frames it was defined in
// (so that a macro defined in a loop sees the loop variable).
struct MacroClosure {
  const MacroDef* def = nullptr;
  std::vector<Scope> captured;
};

class Renderer {
 public:
  Renderer(const Program& program, const nlohmann::ordered_json& context);
  // Throws Error.
  std::string Run();
  // jinja2's Expr.as_const: the value of `e` computed at compile time, or
  // nullopt when it reads a variable, calls something, or raises. Slices go
  // through the sandbox's getitem there (an unsliceable value gives
  // Undefined, where a runtime slice raises TypeError).
  static std::optional<Value> Fold(const Expr& e);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Body& body);
  Flow ExecNode(const Node& node);
  Flow ExecFor(const Node& node);
  Flow ExecScoped(const Body& body, const Shadowed& shadowed, std::string* capture);
  void PushScope(const Shadowed& shadowed);
  void Assign(const std::string& name, Value value);
  void AssignTarget(const Target& target, Value value);
  Value Lookup(const std::string& name) const;

  Value Eval(const Expr& e);
  Value EvalSlice(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value EvalCall(const Expr& e);
  Args EvalArgs(const Expr& e, size_t first);
  Value ApplyFilterChain(const Expr& chain, const Value& input);
  Value CallBuiltin(const std::string& name, const Args& args);
  Value CallMacro(const MacroClosure& macro, const Args& args);

  Scope globals_;               // the render context
  Scope toplevel_;              // the template's own assignments
  std::vector<Scope> locals_;   // frames inside the template, innermost last
  std::string out_;
  const Program& program_;
  const Value* filter_input_ = nullptr;  // the subject of a filter block's chain
  int depth_ = 0;
  bool folding_ = false;  // inside Fold
  struct Impossible {};   // thrown by Fold's evaluation: not a constant
};

}  // namespace floe::jinja
