// Renders a Program: statements write to one output string; expressions are
// evaluated with Python's semantics and jinja2's scoping (a for loop's body
// and a macro call get their own scope; `if` does not).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "common/jinja/ast.h"

namespace floe::jinja {

class Renderer {
 public:
  explicit Renderer(Value::Dict context);
  std::string Run(const Body& body);

  Value Eval(const Expr& e);
  Value Add(const Value& a, const Value& b);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  Flow Exec(const Body& body);
  Flow ExecFor(const Node& node);
  void Assign(const std::string& name, Value value);
  Value Lookup(const std::string& name) const;
  Value Call(const Expr& e);
  Value CallMacro(const MacroDef& macro, const std::vector<Value>& args,
                  const std::vector<std::pair<std::string, Value>>& kwargs);
  Value Arithmetic(const std::string& op, const Value& a, const Value& b);
  Value Item(const Value& obj, const Value& key);
  Value Attr(const Value& obj, const std::string& name);

  std::vector<Scope> scopes_;
  std::string out_;
  int depth_ = 0;
};

}  // namespace floe::jinja
