#include "common/jinja/renderer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/jinja/operators.h"
#include "common/jinja/template.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

constexpr int kMaxDepth = 64;            // nested macro calls
constexpr size_t kMaxOutput = 64 << 20;  // bytes one render may produce
constexpr int64_t kMaxRange = 100000;    // jinja2's sandbox MAX_RANGE

void CheckOutput(const std::string& out) {
  if (out.size() > kMaxOutput) Fail("template output over 64 MiB");
}

// Python's slice(start, stop, step).indices(n), as positions.
std::vector<size_t> SliceIndices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  const int64_t s = step.is_none() ? 1 : step.as_int();
  if (s == 0) Fail("ValueError: slice step cannot be zero");
  const int64_t lower = s > 0 ? 0 : -1, upper = s > 0 ? n : n - 1;
  auto bound = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t x = v.as_int();
    if (x < 0) {
      x += n;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t from = bound(start, s > 0 ? lower : upper), to = bound(stop, s > 0 ? upper : lower);
  std::vector<size_t> out;
  for (int64_t i = from; s > 0 ? i < to : i > to; i += s) out.push_back(static_cast<size_t>(i));
  return out;
}

Value MakeRange(int64_t start, int64_t stop, int64_t step) {
  List items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange)
      Fail("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    items.push_back(Value::Int(i));
  }
  Value range = Value::MakeList(std::move(items), Value::Seq::kRange);
  range.s = "range(" + std::to_string(start) + ", " + std::to_string(stop) +
            (step != 1 ? ", " + std::to_string(step) : "") + ")";
  return range;
}

// range(a, b, c)[slice] is a range again: range(a + i*c, a + j*c, c*k).
Value SliceRange(const Value& range, const Value& start, const Value& stop, const Value& step) {
  long long a = 0, b = 0, c = 1;
  if (std::sscanf(range.s.c_str(), "range(%lld, %lld, %lld)", &a, &b, &c) < 2) Fail("malformed range");
  const int64_t n = static_cast<int64_t>(range.list->size());
  const int64_t k = step.is_none() ? 1 : step.as_int();
  if (k == 0) Fail("ValueError: slice step cannot be zero");
  const int64_t lower = k > 0 ? 0 : -1, upper = k > 0 ? n : n - 1;
  auto bound = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t x = v.as_int();
    if (x < 0) x = std::max(x + n, lower);
    else x = std::min(x, upper);
    return x;
  };
  const int64_t i = bound(start, k > 0 ? lower : upper), j = bound(stop, k > 0 ? upper : lower);
  return MakeRange(a + i * c, a + j * c, c * k);
}

}  // namespace

Renderer::Renderer(const Program& program, const nlohmann::ordered_json& context) : program_(program) {
  if (context.is_object())
    for (const auto& [k, v] : context.items()) globals_[k] = Value::FromJson(v);
  for (const std::string& name : program.shadowed) toplevel_[name] = Value::UndefinedName(name);
}

std::string Renderer::Run() {
  Exec(program_.body);
  return std::move(out_);
}

Value Renderer::Lookup(const std::string& name) const {
  for (auto it = locals_.rbegin(); it != locals_.rend(); ++it) {
    const auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  if (const auto found = toplevel_.find(name); found != toplevel_.end()) return found->second;
  if (const auto found = globals_.find(name); found != globals_.end()) return found->second;
  if (name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" || name == "strftime_now")
    return Value::Callable(name);
  return Value::UndefinedName(name);
}

void Renderer::Assign(const std::string& name, Value value) {
  (locals_.empty() ? toplevel_ : locals_.back())[name] = std::move(value);
}

void Renderer::AssignTarget(const Target& target, Value value) {
  if (!target.attr.empty()) {
    const Value ns = Lookup(target.names[0]);
    if (ns.kind != Value::Kind::kNamespace) Fail("cannot assign attribute on non-namespace object");
    for (auto& [k, v] : *ns.dict) {
      if (k == target.attr) {
        v = std::move(value);
        return;
      }
    }
    ns.dict->emplace_back(target.attr, std::move(value));
    return;
  }
  if (!target.unpack) {
    Assign(target.names[0], std::move(value));
    return;
  }
  const List parts = Iterate(value);
  const size_t want = target.names.size();
  if (parts.size() > want) Fail("ValueError: too many values to unpack (expected " + std::to_string(want) + ")");
  if (parts.size() < want)
    Fail("ValueError: not enough values to unpack (expected " + std::to_string(want) + ", got " +
         std::to_string(parts.size()) + ")");
  for (size_t i = 0; i < want; ++i) Assign(target.names[i], parts[i]);
}

void Renderer::PushScope(const Shadowed& shadowed) {
  Scope& scope = locals_.emplace_back();
  for (const std::string& name : shadowed) scope[name] = Value::UndefinedName(name);
}

Renderer::Flow Renderer::Exec(const Body& body) {
  for (const NodePtr& node : body) {
    const Flow flow = ExecNode(*node);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

// Runs `body` in a frame of its own; its output goes to *capture if given.
Renderer::Flow Renderer::ExecScoped(const Body& body, const Shadowed& shadowed, std::string* capture) {
  std::string saved;
  if (capture) saved = std::move(out_), out_.clear();
  PushScope(shadowed);
  const Flow flow = Exec(body);
  locals_.pop_back();
  if (capture) *capture = std::move(out_), out_ = std::move(saved);
  return flow;
}

Renderer::Flow Renderer::ExecNode(const Node& node) {
  switch (node.type) {
    case Node::Type::kText:
      out_ += node.text;
      break;
    case Node::Type::kOutput:
      out_ += Str(Eval(*node.exprs[0]));
      break;
    case Node::Type::kIf:
      for (size_t i = 0; i < node.bodies.size(); ++i)
        if (i >= node.exprs.size() || Truthy(Eval(*node.exprs[i]))) return Exec(node.bodies[i]);
      break;
    case Node::Type::kFor:
      return ExecFor(node);
    case Node::Type::kSet:
      AssignTarget(node.target, Eval(*node.exprs[0]));
      break;
    case Node::Type::kSetBlock: {
      std::string captured;
      const Flow flow = ExecScoped(node.bodies[0], node.shadowed, &captured);
      if (flow != Flow::kNormal) return flow;
      Value value = Value::String(std::move(captured));
      if (node.exprs[0]) value = ApplyFilterChain(*node.exprs[0], value);
      AssignTarget(node.target, std::move(value));
      break;
    }
    case Node::Type::kMacro: {
      auto closure = std::make_shared<MacroClosure>();
      closure->def = node.macro.get();
      closure->captured = locals_;
      Value macro;
      macro.kind = Value::Kind::kMacro;
      macro.s = node.macro->name;
      macro.macro = std::move(closure);
      Assign(node.macro->name, std::move(macro));
      break;
    }
    case Node::Type::kBreak:
      return Flow::kBreak;
    case Node::Type::kContinue:
      return Flow::kContinue;
    case Node::Type::kWith: {
      List values;
      for (const ExprPtr& e : node.exprs) values.push_back(Eval(*e));
      PushScope(node.shadowed);
      for (size_t i = 0; i < values.size(); ++i) locals_.back()[node.with_names[i]] = values[i];
      const Flow flow = Exec(node.bodies[0]);
      locals_.pop_back();
      return flow;
    }
    case Node::Type::kFilterBlock: {
      std::string captured;
      const Flow flow = ExecScoped(node.bodies[0], node.shadowed, &captured);
      if (flow != Flow::kNormal) return flow;
      out_ += Str(ApplyFilterChain(*node.exprs[0], Value::String(std::move(captured))));
      break;
    }
    case Node::Type::kScope:
      return ExecScoped(node.bodies[0], node.shadowed, nullptr);
  }
  CheckOutput(out_);
  return Flow::kNormal;
}

// jinja2's for loop: items are pulled one at a time, a filtered loop's `if`
// test runs as each item is pulled (seeing what the body did so far), and
// the loop object looks ahead only when asked (loop.last, loop.length...).
Renderer::Flow Renderer::ExecFor(const Node& node) {
  auto loop = std::make_shared<LoopState>();
  std::function<bool(Value*)> source = Puller(Eval(*node.exprs[0]));
  if (node.exprs.size() > 1) {
    // The test sees the loop's enclosing frames, not the body's: pulls made
    // from inside the body (loop.last) set the body's frames aside.
    const size_t depth = locals_.size();
    source = [this, &node, depth, base = std::move(source)](Value* out) {
      if (locals_.size() < depth) Fail("unsupported: a filtered loop's object used after the loop");
      std::vector<Scope> inner(std::make_move_iterator(locals_.begin() + static_cast<std::ptrdiff_t>(depth)),
                               std::make_move_iterator(locals_.end()));
      locals_.resize(depth);
      bool found = false;
      for (Value item; !found && base(&item);) {
        locals_.emplace_back();
        AssignTarget(node.target, item);
        found = Truthy(Eval(*node.exprs[1]));
        locals_.pop_back();
        if (found) *out = std::move(item);
      }
      for (Scope& scope : inner) locals_.push_back(std::move(scope));
      return found;
    };
  }
  loop->pull = std::move(source);
  Value loop_value;
  loop_value.kind = Value::Kind::kLoop;
  loop_value.loop = loop;
  // jinja2 clears its "no iteration" flag at the end of the body, so the
  // else branch also runs when every iteration left by break or continue.
  bool completed = false;
  for (Value item; loop->Advance(&item);) {
    PushScope(node.shadowed);
    AssignTarget(node.target, item);
    locals_.back()["loop"] = loop_value;
    const Flow flow = Exec(node.bodies[0]);
    locals_.pop_back();
    if (flow == Flow::kNormal) completed = true;
    if (flow == Flow::kBreak) break;
  }
  if (!completed && node.bodies.size() > 1) return ExecScoped(node.bodies[1], node.else_shadowed, nullptr);
  return Flow::kNormal;
}

Args Renderer::EvalArgs(const Expr& e, size_t first) {
  Args args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v));
  return args;
}

Value Renderer::ApplyFilterChain(const Expr& chain, const Value& input) {
  const Value* saved = filter_input_;
  filter_input_ = &input;
  Value result = Eval(chain);
  filter_input_ = saved;
  return result;
}

Value Renderer::Eval(const Expr& e) {
  switch (e.type) {
    case Expr::Type::kLiteral:
      return e.value;
    case Expr::Type::kName:
      if (folding_) throw Impossible{};
      return Lookup(e.name);
    case Expr::Type::kList:
    case Expr::Type::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) items.push_back(Eval(*a));
      return Value::MakeList(std::move(items), e.type == Expr::Type::kTuple ? Value::Seq::kTuple : Value::Seq::kList);
    }
    case Expr::Type::kDict: {
      Dict items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = Eval(*e.args[i]);
        Value value = Eval(*e.args[i + 1]);
        if (!key.is_string()) Fail("unsupported: dict keys other than strings");
        auto at = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == key.s; });
        if (at != items.end()) at->second = std::move(value);
        else items.emplace_back(key.s, std::move(value));
      }
      return Value::MakeDict(std::move(items));
    }
    case Expr::Type::kAttr:
      return GetAttr(Eval(*e.args[0]), e.name);
    case Expr::Type::kItem: {
      const Value obj = Eval(*e.args[0]);
      return GetItem(obj, Eval(*e.args[1]));
    }
    case Expr::Type::kSlice:
      return EvalSlice(e);
    case Expr::Type::kCall:
      if (folding_) throw Impossible{};  // the sandbox never folds calls
      return EvalCall(e);
    case Expr::Type::kFilter: {
      if (folding_ && (!e.args[0] || e.name == "map" || e.name == "select" || e.name == "reject" || e.name == "selectattr" ||
                       e.name == "rejectattr"))
        throw Impossible{};  // they take the render context
      const Value subject = e.args[0] ? Eval(*e.args[0]) : *filter_input_;
      const Args args = EvalArgs(e, 1);
      return FindFilter(e.name)(subject, args);
    }
    case Expr::Type::kTest: {
      const Value subject = Eval(*e.args[0]);
      const Args args = EvalArgs(e, 1);
      return Value::Bool(FindTest(e.name)(subject, args) != e.negated);
    }
    case Expr::Type::kNot:
      return Value::Bool(!Truthy(Eval(*e.args[0])));
    case Expr::Type::kNeg:
      return Negate(Eval(*e.args[0]));
    case Expr::Type::kPos:
      return UnaryPlus(Eval(*e.args[0]));
    case Expr::Type::kBinary: {
      const Value a = Eval(*e.args[0]);
      return BinaryOp(e.name, a, Eval(*e.args[1]));
    }
    case Expr::Type::kConcat: {
      std::string out;
      for (const ExprPtr& a : e.args) out += Str(Eval(*a));
      return Value::String(std::move(out));
    }
    case Expr::Type::kAnd: {
      Value a = Eval(*e.args[0]);
      return Truthy(a) ? Eval(*e.args[1]) : a;
    }
    case Expr::Type::kOr: {
      Value a = Eval(*e.args[0]);
      return Truthy(a) ? a : Eval(*e.args[1]);
    }
    case Expr::Type::kCompare:
      return EvalCompare(e);
    case Expr::Type::kCondExpr:
      if (Truthy(Eval(*e.args[0]))) return Eval(*e.args[1]);
      if (e.args[2]) return Eval(*e.args[2]);
      if (folding_) throw Impossible{};
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  Fail("unknown expression");
}

Value Renderer::EvalCompare(const Expr& e) {
  Value left = Eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    const bool nan = (left.kind == Value::Kind::kFloat && std::isnan(left.f)) ||
                     (right.kind == Value::Kind::kFloat && std::isnan(right.f));
    bool ok;
    if (op == "==") ok = Equal(left, right);
    else if (op == "!=") ok = !Equal(left, right);
    else if (op == "<") ok = Less(left, right);
    else if (op == ">") ok = Less(right, left);
    else if (op == "<=") ok = !Less(right, left) && !nan;
    else if (op == ">=") ok = !Less(left, right) && !nan;
    else if (op == "in") ok = Contains(right, left);
    else ok = !Contains(right, left);  // notin
    if (!ok) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

// obj[start:stop:step]: jinja2 compiles slices to Python's own subscript,
// not to the sandbox's getitem, so a type that cannot be sliced raises.
Value Renderer::EvalSlice(const Expr& e) {
  const Value obj = Eval(*e.args[0]);
  Value parts[3] = {Value::None(), Value::None(), Value::None()};
  for (int i = 0; i < 3; ++i) {
    if (!e.args[static_cast<size_t>(i) + 1]) continue;
    parts[i] = Eval(*e.args[static_cast<size_t>(i) + 1]);
    if (!parts[i].is_int() && !parts[i].is_none())
      Fail("TypeError: slice indices must be integers or None or have an __index__ method");
  }
  RequireDefined(obj);
  if (obj.is_string()) {
    const std::u32string cps = Decode(obj.s);
    std::u32string out;
    for (size_t i : SliceIndices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2])) out += cps[i];
    Value v = Value::String(Encode(out));
    v.markup = obj.markup;
    return v;
  }
  if (obj.is_list(Value::Seq::kList) || obj.is_list(Value::Seq::kTuple)) {
    List items;
    for (size_t i : SliceIndices(static_cast<int64_t>(obj.list->size()), parts[0], parts[1], parts[2]))
      items.push_back((*obj.list)[i]);
    return Value::MakeList(std::move(items), obj.seq);
  }
  if (obj.is_list(Value::Seq::kRange)) return SliceRange(obj, parts[0], parts[1], parts[2]);
  if (folding_) return Value::Undefined("'" + TypeName(obj) + " object' has no element slice");
  if (obj.is_dict()) Fail("TypeError: unhashable type: 'slice'");
  Fail("TypeError: '" + TypeName(obj) + "' object is not subscriptable");
}

Value Renderer::EvalCall(const Expr& e) {
  const Value callee = Eval(*e.args[0]);
  const Args args = EvalArgs(e, 1);
  switch (callee.kind) {
    case Value::Kind::kMacro:
      return CallMacro(*callee.macro, args);
    case Value::Kind::kMethod:
      return CallMethod(callee, args);
    case Value::Kind::kCallable:
      return CallBuiltin(callee.s, args);
    case Value::Kind::kUndefined:
      FailUndefined(callee);
    default:
      Fail("TypeError: '" + TypeName(callee) + "' object is not callable");
  }
}

Value Renderer::CallBuiltin(const std::string& name, const Args& args) {
  if (name == "raise_exception") {
    Bound b(args, name, {"message"});
    Fail(Str(b.get(0)));
  }
  if (name == "strftime_now") {
    Bound b(args, name, {"format"});
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof buf, Str(b.get(0)).c_str(), &local);
    return Value::String(std::string(buf, n));
  }
  if (name == "range") {
    if (!args.keyword.empty()) Fail("TypeError: range() takes no keyword arguments");
    const List& a = args.positional;
    if (a.empty() || a.size() > 3) Fail("TypeError: range expected 1 to 3 arguments, got " + std::to_string(a.size()));
    for (const Value& v : a)
      if (!v.is_int()) Fail("TypeError: '" + TypeName(v) + "' object cannot be interpreted as an integer");
    const int64_t start = a.size() > 1 ? a[0].as_int() : 0, stop = a.size() > 1 ? a[1].as_int() : a[0].as_int();
    const int64_t step = a.size() > 2 ? a[2].as_int() : 1;
    if (step == 0) Fail("ValueError: range() arg 3 must not be zero");
    return MakeRange(start, stop, step);
  }
  // dict(...) and namespace(...): dict(mapping_or_pairs, **kwargs).
  if (args.positional.size() > 1) Fail("TypeError: " + name + " expected at most 1 argument");
  Dict items;
  auto put = [&](const std::string& k, const Value& v) {
    for (auto& [key, value] : items)
      if (key == k) {
        value = v;
        return;
      }
    items.emplace_back(k, v);
  };
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict() || source.kind == Value::Kind::kNamespace) {
      if (source.kind == Value::Kind::kNamespace) Fail("TypeError: 'Namespace' object is not iterable");
      for (const auto& [k, v] : *source.dict) put(k, v);
    } else {
      for (const Value& pair : Iterate(source)) {
        const List kv = Iterate(pair);
        if (kv.size() != 2) Fail("ValueError: dictionary update sequence element has wrong length");
        if (!kv[0].is_string()) Fail("unsupported: dict keys other than strings");
        put(kv[0].s, kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) put(k, v);
  return name == "namespace" ? Value::Namespace(std::move(items)) : Value::MakeDict(std::move(items));
}

Value Renderer::CallMacro(const MacroClosure& closure, const Args& args) {
  const MacroDef& macro = *closure.def;
  if (args.positional.size() > macro.params.size() && !macro.takes_varargs)
    Fail("TypeError: macro '" + macro.name + "' takes not more than " + std::to_string(macro.params.size()) +
         " argument(s)");
  if (++depth_ > kMaxDepth) Fail("macro calls nested too deep");
  std::vector<Scope> saved_locals = std::move(locals_);
  locals_ = closure.captured;
  PushScope(macro.shadowed);
  std::vector<bool> used(args.keyword.size(), false);
  const size_t first_default = macro.params.size() - macro.defaults.size();
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const std::string& param = macro.params[i];
    Value v;
    bool given = false;
    if (i < args.positional.size()) {
      v = args.positional[i];
      given = true;
    } else {
      for (size_t k = 0; k < args.keyword.size(); ++k)
        if (!used[k] && args.keyword[k].first == param) {
          v = args.keyword[k].second;
          used[k] = given = true;
          break;
        }
    }
    if (!given) {
      v = i >= first_default ? Eval(*macro.defaults[i - first_default])
                             : Value::Undefined("parameter '" + param + "' was not provided");
    }
    locals_.back()[param] = std::move(v);
  }
  Dict extra_kwargs;
  for (size_t k = 0; k < args.keyword.size(); ++k) {
    if (used[k]) continue;
    if (!macro.takes_kwargs)
      Fail("TypeError: macro '" + macro.name + "' takes no keyword argument '" + args.keyword[k].first + "'");
    extra_kwargs.emplace_back(args.keyword[k].first, args.keyword[k].second);
  }
  if (macro.takes_varargs) {
    List rest;
    for (size_t i = macro.params.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    locals_.back()["varargs"] = Value::Tuple(std::move(rest));
  }
  if (macro.takes_kwargs) locals_.back()["kwargs"] = Value::MakeDict(std::move(extra_kwargs));
  std::string saved_out = std::move(out_);
  out_.clear();
  Exec(macro.body);
  std::string result = std::move(out_);
  out_ = std::move(saved_out);
  locals_ = std::move(saved_locals);
  --depth_;
  return Value::String(std::move(result));
}

std::optional<Value> Renderer::Fold(const Expr& e) {
  static const Program kEmpty;
  Renderer renderer(kEmpty, nullptr);
  renderer.folding_ = true;
  try {
    return renderer.Eval(e);
  } catch (const Error&) {
  } catch (const Impossible&) {
  }
  return std::nullopt;
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  try {
    return Renderer(*program_, context).Run();
  } catch (const Error& e) {
    return absl::InvalidArgumentError(e.message);
  }
}

}  // namespace floe::jinja
