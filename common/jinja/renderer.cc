#include "common/jinja/renderer.h"

#include <cmath>
#include <ctime>

#include "common/jinja/builtins.h"
#include "common/jinja/program.h"
#include "common/jinja/template.h"

namespace floe::jinja {
namespace {

constexpr int kMaxDepth = 64;          // nested macro calls
constexpr size_t kMaxOutput = 64 << 20;  // bytes a render may produce
constexpr int64_t kMaxRange = 1 << 20;

double AsDouble(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : v.kind == Value::Kind::kInt ? static_cast<double>(v.i) : v.b;
}

void RequireDefined(const Value& v) {
  if (v.is_undefined()) Fail("'" + v.s + "' is undefined");
}

// Python's index normalization; false when out of range.
bool Normalize(int64_t& i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  return i >= 0 && i < static_cast<int64_t>(size);
}

std::vector<size_t> SliceIndices(size_t size, const Value& start, const Value& stop, const Value& step) {
  auto given = [](const Value& v) { return !v.is_undefined() && v.kind != Value::Kind::kNone; };
  const int64_t n = static_cast<int64_t>(size);
  const int64_t s = given(step) ? step.i : 1;
  if (s == 0) Fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback, bool is_start) {
    if (!given(v)) return fallback;
    int64_t x = v.i;
    if (x < 0) x += n;
    if (s > 0) return std::clamp<int64_t>(x, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t from = clamp(start, s > 0 ? 0 : n - 1, true);
  const int64_t to = clamp(stop, s > 0 ? n : -1, false);
  std::vector<size_t> out;
  for (int64_t i = from; s > 0 ? i < to : i > to; i += s) out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace

Renderer::Renderer(Value::Dict context) {
  scopes_.emplace_back();
  for (auto& [k, v] : context) scopes_.back()[k] = std::move(v);
  scopes_.emplace_back();  // the template's own top-level sets
}

std::string Renderer::Run(const Body& body) {
  Exec(body);
  return std::move(out_);
}

Value Renderer::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  if (name == "range" || name == "namespace" || name == "raise_exception" || name == "strftime_now" ||
      name == "dict")
    return Value::Function(name);
  return Value::Undefined(name);
}

void Renderer::Assign(const std::string& name, Value value) { scopes_.back()[name] = std::move(value); }

Renderer::Flow Renderer::Exec(const Body& body) {
  for (const NodePtr& node : body) {
    switch (node->type) {
      case Node::Type::kText:
        out_ += node->text;
        break;
      case Node::Type::kOutput:
        out_ += Str(Eval(*node->expr));
        break;
      case Node::Type::kIf: {
        size_t branch = 0;
        for (; branch < node->conditions.size(); ++branch)
          if (Truthy(Eval(*node->conditions[branch]))) break;
        if (branch < node->bodies.size()) {
          const Flow flow = Exec(node->bodies[branch]);
          if (flow != Flow::kNormal) return flow;
        }
        break;
      }
      case Node::Type::kFor: {
        const Flow flow = ExecFor(*node);
        if (flow != Flow::kNormal) return flow;
        break;
      }
      case Node::Type::kSet: {
        Value value = Eval(*node->expr);
        if (!node->attr.empty()) {
          Value target = Lookup(node->targets[0]);
          if (target.kind != Value::Kind::kNamespace)
            Fail("cannot assign attribute on non-namespace object '" + node->targets[0] + "'");
          bool found = false;
          for (auto& [k, v] : *target.dict) {
            if (k == node->attr) {
              v = value;
              found = true;
            }
          }
          if (!found) target.dict->emplace_back(node->attr, value);
        } else if (node->targets.size() == 1) {
          Assign(node->targets[0], std::move(value));
        } else {
          std::vector<Value> items = Iterate(value);
          if (items.size() != node->targets.size()) Fail("cannot unpack: wrong number of values");
          for (size_t i = 0; i < items.size(); ++i) Assign(node->targets[i], items[i]);
        }
        break;
      }
      case Node::Type::kSetBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        Exec(node->bodies[0]);
        std::string captured = std::move(out_);
        out_ = std::move(saved);
        Assign(node->targets[0], Value::String(std::move(captured)));
        break;
      }
      case Node::Type::kMacro: {
        Value macro;
        macro.kind = Value::Kind::kMacro;
        macro.macro = node->macro.get();
        macro.s = node->macro->name;
        Assign(node->macro->name, macro);
        break;
      }
      case Node::Type::kBreak:
        return Flow::kBreak;
      case Node::Type::kContinue:
        return Flow::kContinue;
    }
    if (out_.size() > kMaxOutput) Fail("template output over 64 MiB");
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::ExecFor(const Node& node) {
  std::vector<Value> items = Iterate(Eval(*node.expr));
  auto bind = [&](const Value& item) {
    if (node.targets.size() == 1) {
      Assign(node.targets[0], item);
      return;
    }
    std::vector<Value> parts = Iterate(item);
    if (parts.size() != node.targets.size()) Fail("cannot unpack: wrong number of values in for");
    for (size_t i = 0; i < parts.size(); ++i) Assign(node.targets[i], parts[i]);
  };
  if (node.filter) {
    std::vector<Value> kept;
    scopes_.emplace_back();
    for (const Value& item : items) {
      bind(item);
      if (Truthy(Eval(*node.filter))) kept.push_back(item);
    }
    scopes_.pop_back();
    items = std::move(kept);
  }
  if (items.empty()) {
    if (node.bodies.size() > 1) return Exec(node.bodies[1]);
    return Flow::kNormal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    scopes_.emplace_back();
    bind(items[i]);
    Value::Dict loop = {{"index", Value::Int(i + 1)},
                        {"index0", Value::Int(i)},
                        {"revindex", Value::Int(n - i)},
                        {"revindex0", Value::Int(n - i - 1)},
                        {"first", Value::Bool(i == 0)},
                        {"last", Value::Bool(i == n - 1)},
                        {"length", Value::Int(n)},
                        {"depth", Value::Int(1)},
                        {"depth0", Value::Int(0)},
                        {"previtem", i > 0 ? items[i - 1] : Value::Undefined("previtem")},
                        {"nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("nextitem")}};
    Assign("loop", Value::MakeDict(std::move(loop)));
    const Flow flow = Exec(node.bodies[0]);
    scopes_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Renderer::Attr(const Value& obj, const std::string& name) {
  RequireDefined(obj);
  if (obj.is_mapping()) {
    const Value* found = obj.Find(name);
    return found ? *found : Value::Undefined(name);
  }
  return Value::Undefined(name);
}

Value Renderer::Item(const Value& obj, const Value& key) {
  RequireDefined(obj);
  if (obj.is_mapping()) {
    if (!key.is_string()) return Value::Undefined(Str(key));
    const Value* found = obj.Find(key.s);
    return found ? *found : Value::Undefined(key.s);
  }
  if (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool) {
    int64_t i = key.kind == Value::Kind::kInt ? key.i : key.b;
    if (obj.kind == Value::Kind::kList) return Normalize(i, obj.list->size()) ? (*obj.list)[i] : Value::Undefined();
    if (obj.is_string()) {
      std::vector<std::string> cps = CodePoints(obj.s);
      return Normalize(i, cps.size()) ? Value::String(cps[i]) : Value::Undefined();
    }
  }
  if (key.is_string()) return Attr(obj, key.s);
  return Value::Undefined();
}

Value Renderer::Add(const Value& a, const Value& b) { return Arithmetic("+", a, b); }

Value Renderer::Arithmetic(const std::string& op, const Value& a, const Value& b) {
  RequireDefined(a);
  RequireDefined(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.s + b.s);
    if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
      Value::List items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::MakeList(std::move(items));
    }
  }
  if (op == "*" && (a.is_string() || b.is_string()) && (a.kind == Value::Kind::kInt || b.kind == Value::Kind::kInt)) {
    const std::string& s = a.is_string() ? a.s : b.s;
    const int64_t n = a.is_string() ? b.i : a.i;
    if (n > 0 && s.size() * static_cast<size_t>(n) > kMaxOutput) Fail("string repetition too large");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::String(out);
  }
  if (!a.is_number() || !b.is_number())
    Fail("unsupported operand type(s) for " + op + ": '" + TypeName(a) + "' and '" + TypeName(b) + "'");
  const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
  const int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i, y = b.kind == Value::Kind::kBool ? b.b : b.i;
  const double fx = AsDouble(a), fy = AsDouble(b);
  if (op == "+") return ints ? Value::Int(x + y) : Value::Float(fx + fy);
  if (op == "-") return ints ? Value::Int(x - y) : Value::Float(fx - fy);
  if (op == "*") return ints ? Value::Int(x * y) : Value::Float(fx * fy);
  if (op == "/") {
    if (fy == 0) Fail("division by zero");
    return Value::Float(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) Fail("integer division or modulo by zero");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::Int(op == "//" ? q : r);
    }
    if (fy == 0) Fail("float division by zero");
    const double q = std::floor(fx / fy);
    return Value::Float(op == "//" ? q : fx - q * fy);
  }
  if (op == "**") {
    if (ints && y >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < y; ++i) r *= x;
      return Value::Int(r);
    }
    return Value::Float(std::pow(fx, fy));
  }
  Fail("unknown operator " + op);
}

Value Renderer::Eval(const Expr& e) {
  switch (e.type) {
    case Expr::Type::kLiteral:
      return e.value;
    case Expr::Type::kName:
      return Lookup(e.name);
    case Expr::Type::kList: {
      Value::List items;
      for (const ExprPtr& a : e.args) items.push_back(Eval(*a));
      return Value::MakeList(std::move(items));
    }
    case Expr::Type::kDict: {
      Value::Dict items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = Eval(*e.args[i]);
        if (!key.is_string()) Fail("dict keys must be strings here");
        Value value = Eval(*e.args[i + 1]);
        bool replaced = false;
        for (auto& [k, v] : items) {
          if (k == key.s) {
            v = value;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(key.s, std::move(value));
      }
      return Value::MakeDict(std::move(items));
    }
    case Expr::Type::kAttr:
      return Attr(Eval(*e.args[0]), e.name);
    case Expr::Type::kItem:
      return Item(Eval(*e.args[0]), Eval(*e.args[1]));
    case Expr::Type::kSlice: {
      const Value obj = Eval(*e.args[0]);
      RequireDefined(obj);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (!e.args[i + 1]) continue;
        parts[i] = Eval(*e.args[i + 1]);
        if (parts[i].kind != Value::Kind::kInt && parts[i].kind != Value::Kind::kNone)
          Fail("slice indices must be integers or None");
      }
      if (obj.kind == Value::Kind::kList) {
        Value::List items;
        for (size_t i : SliceIndices(obj.list->size(), parts[0], parts[1], parts[2])) items.push_back((*obj.list)[i]);
        return Value::MakeList(std::move(items));
      }
      if (obj.is_string()) {
        std::vector<std::string> cps = CodePoints(obj.s);
        std::string out;
        for (size_t i : SliceIndices(cps.size(), parts[0], parts[1], parts[2])) out += cps[i];
        return Value::String(out);
      }
      Fail(std::string("'") + TypeName(obj) + "' object is not subscriptable");
    }
    case Expr::Type::kCall:
      return Call(e);
    case Expr::Type::kFilter: {
      Args args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
      for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v));
      return ApplyFilter(*this, e.name, Eval(*e.args[0]), args);
    }
    case Expr::Type::kTest: {
      Args args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
      return Value::Bool(ApplyTest(e.name, Eval(*e.args[0]), args) != e.negated);
    }
    case Expr::Type::kNot:
      return Value::Bool(!Truthy(Eval(*e.args[0])));
    case Expr::Type::kNeg: {
      const Value v = Eval(*e.args[0]);
      if (v.kind == Value::Kind::kInt) return Value::Int(-v.i);
      if (v.kind == Value::Kind::kFloat) return Value::Float(-v.f);
      RequireDefined(v);
      Fail(std::string("bad operand type for unary -: '") + TypeName(v) + "'");
    }
    case Expr::Type::kCondExpr: {
      if (Truthy(Eval(*e.args[1]))) return Eval(*e.args[0]);
      return e.args[2] ? Eval(*e.args[2]) : Value::Undefined();
    }
    case Expr::Type::kBinary: {
      const std::string& op = e.name;
      if (op == "and") {
        Value a = Eval(*e.args[0]);
        return Truthy(a) ? Eval(*e.args[1]) : a;
      }
      if (op == "or") {
        Value a = Eval(*e.args[0]);
        return Truthy(a) ? a : Eval(*e.args[1]);
      }
      const Value a = Eval(*e.args[0]);
      const Value b = Eval(*e.args[1]);
      if (op == "~") return Value::String(Str(a) + Str(b));
      if (op == "==") return Value::Bool(Equal(a, b));
      if (op == "!=") return Value::Bool(!Equal(a, b));
      if (op == "<") return Value::Bool(Less(a, b));
      if (op == ">") return Value::Bool(Less(b, a));
      if (op == "<=") return Value::Bool(!Less(b, a));
      if (op == ">=") return Value::Bool(!Less(a, b));
      if (op == "in" || op == "notin") {
        bool found = false;
        if (b.is_string()) {
          if (!a.is_string()) Fail(std::string("'in <string>' requires string as left operand, not ") + TypeName(a));
          found = b.s.find(a.s) != std::string::npos;
        } else if (b.is_mapping()) {
          found = a.is_string() && b.Find(a.s) != nullptr;
        } else if (b.kind == Value::Kind::kList) {
          for (const Value& item : *b.list) found |= Equal(item, a);
        } else {
          RequireDefined(b);
          Fail(std::string("argument of type '") + TypeName(b) + "' is not iterable");
        }
        return Value::Bool(op == "in" ? found : !found);
      }
      return Arithmetic(op, a, b);
    }
  }
  Fail("unknown expression");
}

Value Renderer::Call(const Expr& e) {
  const Expr& callee = *e.args[0];
  std::vector<Value> args;
  for (size_t i = 1; i < e.args.size(); ++i) args.push_back(Eval(*e.args[i]));
  std::vector<std::pair<std::string, Value>> kwargs;
  for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, Eval(*v));
  if (callee.type == Expr::Type::kAttr) {
    const Value obj = Eval(*callee.args[0]);
    if (obj.is_string() || obj.is_mapping() || obj.kind == Value::Kind::kList || obj.is_undefined()) {
      // A dict's own callable item (a macro in a namespace) wins over a method.
      const Value* own = obj.is_mapping() ? obj.Find(callee.name) : nullptr;
      if (!own || own->kind != Value::Kind::kMacro) {
        Args a;
        a.positional = std::move(args);
        a.keyword = std::move(kwargs);
        return CallMethod(obj, callee.name, a);
      }
    }
  }
  const Value f = Eval(callee);
  if (f.kind == Value::Kind::kMacro) return CallMacro(*f.macro, args, kwargs);
  if (f.kind == Value::Kind::kFunction) {
    const std::string& name = f.s;
    if (name == "raise_exception") Fail(args.empty() ? "raise_exception" : Str(args[0]));
    if (name == "range") {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& a : args)
        if (a.kind != Value::Kind::kInt) Fail("range() arguments must be integers");
      if (args.size() == 1) stop = args[0].i;
      else if (args.size() >= 2) start = args[0].i, stop = args[1].i;
      if (args.size() == 3) step = args[2].i;
      if (step == 0) Fail("range() arg 3 must not be zero");
      Value::List items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(items.size()) >= kMaxRange) Fail("range too large");
        items.push_back(Value::Int(i));
      }
      return Value::MakeList(std::move(items));
    }
    if (name == "namespace" || name == "dict") {
      Value::Dict items;
      if (!args.empty() && args[0].is_mapping()) items = *args[0].dict;
      for (auto& [k, v] : kwargs) items.emplace_back(k, v);
      return name == "namespace" ? Value::Namespace(std::move(items)) : Value::MakeDict(std::move(items));
    }
    if (name == "strftime_now") {
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, args.empty() ? "" : Str(args[0]).c_str(), &local);
      return Value::String(std::string(buf, n));
    }
  }
  RequireDefined(f);
  Fail(std::string("'") + TypeName(f) + "' object is not callable");
}

Value Renderer::CallMacro(const MacroDef& macro, const std::vector<Value>& args,
                          const std::vector<std::pair<std::string, Value>>& kwargs) {
  if (++depth_ > kMaxDepth) Fail("macro calls nested too deep");
  if (args.size() > macro.params.size()) Fail("macro '" + macro.name + "' takes " +
                                              std::to_string(macro.params.size()) + " arguments");
  // The macro sees the render's variables and the template's top-level sets,
  // not the caller's locals.
  std::vector<Scope> saved = std::move(scopes_);
  scopes_ = {saved[0], saved[1], Scope()};
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const auto& [param, default_expr] = macro.params[i];
    Value v = i < args.size() ? args[i] : Value::Undefined(param);
    for (const auto& [k, kv] : kwargs)
      if (k == param) v = kv;
    if (v.is_undefined() && default_expr) v = Eval(*default_expr);
    scopes_.back()[param] = v;
  }
  std::string saved_out = std::move(out_);
  out_.clear();
  Exec(macro.body);
  std::string result = std::move(out_);
  out_ = std::move(saved_out);
  scopes_ = std::move(saved);
  --depth_;
  return Value::String(std::move(result));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  try {
    Value::Dict variables;
    if (context.is_object())
      for (const auto& [k, v] : context.items()) variables.emplace_back(k, Value::FromJson(v));
    return Renderer(std::move(variables)).Run(program_->body);
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.message);
  }
}

}  // namespace floe::jinja
