// Runtime values of the Jinja subset: the Python objects a jinja2 template
// handles (None, bool, int, float, str, list, tuple, dict, range, dict views,
// generators, namespace(), the loop object, macros, builtins, bound methods)
// plus jinja2's Undefined, with Python's printing, equality, ordering and
// truthiness, so that rendering matches CPython byte for byte.
//
// A value is built during one render and owned by it, except constants
// folded at parse time, which the parsed template keeps and renders only
// read. Lists and dicts are shared and immutable once built (the sandbox is
// immutable); only namespace attributes, generator positions and the loop
// object change, as they do in Python, and those never outlive their render.
// So a parsed template renders on many threads at once.
//
// Errors Python would raise (TypeError, UndefinedError...) are thrown as
// Error and turned into a status at the API boundary (Template::Render).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace floe::jinja {

struct Value;
struct MacroClosure;  // renderer.h
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python's dict

// A generator or iterator (what jinja2's map, select, reverse... return):
// lazy like Python's, one pass, then exhausted.
struct IterState;
// A for loop's `loop` object: jinja2's LoopContext.
struct LoopState;

struct Value {
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace,
    kIterator, kLoop, kMacro, kCallable, kMethod,
  };
  // The Python type behind a kList: they print, compare and index differently.
  enum class Seq : uint8_t { kList, kTuple, kRange, kDictKeys, kDictValues, kDictItems };

  Kind kind = Kind::kUndefined;
  Seq seq = Seq::kList;
  bool markup = false;  // kString made by |safe: jinja2's Markup, which escapes what `+` adds
  bool b = false;
  int64_t i = 0;
  double f = 0;
  // kString: the text; kUndefined: the error its use raises; kCallable and
  // kMethod: the function's name; kList of kRange: its repr.
  std::string s;
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // kDict, kNamespace (whose attributes `set ns.x` changes)
  std::shared_ptr<IterState> iter;
  std::shared_ptr<LoopState> loop;
  std::shared_ptr<const MacroClosure> macro;
  std::shared_ptr<const Value> self;  // kMethod: the object it is bound to

  static Value Undefined(std::string message) { Value v; v.s = std::move(message); return v; }
  static Value UndefinedName(const std::string& name) { return Undefined("'" + name + "' is undefined"); }
  static Value None() { Value v; v.kind = Kind::kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value String(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value MakeList(List items, Seq seq = Seq::kList);
  static Value Tuple(List items) { return MakeList(std::move(items), Seq::kTuple); }
  static Value MakeDict(Dict items);
  static Value Namespace(Dict items);
  // An iterator over `items`, already computed.
  static Value Iterator(List items, std::string type_name);
  // A Python generator: `start` runs on the first pull (the generator
  // function's body up to its loop) and returns the function that yields
  // each item (false once exhausted). Errors surface when pulled, as in
  // Python, not when the generator is made.
  static Value Generator(std::function<std::function<bool(Value*)>()> start, std::string type_name);
  static Value Callable(std::string name) { Value v; v.kind = Kind::kCallable; v.s = std::move(name); return v; }
  static Value Method(Value self, std::string name);
  static Value FromJson(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_int() const { return kind == Kind::kInt || kind == Kind::kBool; }  // Python's isinstance(x, int)
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_list(Seq which) const { return kind == Kind::kList && seq == which; }
  bool is_sequence() const { return kind == Kind::kList; }  // any kList flavour
  int64_t as_int() const { return kind == Kind::kBool ? b : i; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
  // A dict's (or namespace's) item, or null.
  const Value* Find(const std::string& key) const;
};

struct IterState {
  std::function<bool(Value*)> pull;  // next item into *out; false when exhausted
  std::string type_name;             // "generator", "list_reverseiterator"...
  bool done = false;
  bool Next(Value* out) {
    if (done) return false;
    if (!pull(out)) done = true;
    return !done;
  }
};

// jinja2's LoopContext: one object per loop, changing as the loop goes. Items
// are pulled lazily: loop.last and loop.nextitem look one ahead, loop.length
// and loop.revindex drain the rest (running a filtered loop's `if` test for
// them at that moment, as jinja2 does).
struct LoopState {
  std::function<bool(Value*)> pull;
  std::deque<Value> ahead;  // pulled, not yet iterated
  bool exhausted = false;
  int64_t index0 = -1;
  Value current, previous;
  bool has_previous = false;
  bool changed_called = false;
  List changed_last;  // loop.changed()'s memory

  // Pulls one more item into `ahead`; false when there is none.
  bool Fetch();
  // The next item of the loop (false when done); makes it current.
  bool Advance(Value* out);
  // loop.length: drains the rest into `ahead`.
  int64_t Length();
};

// A template error (raise_exception, or what Python would raise).
struct Error {
  std::string message;
};
[[noreturn]] void Fail(std::string message);
// Raises the error using `v` (an Undefined) raises.
[[noreturn]] void FailUndefined(const Value& v);
inline void RequireDefined(const Value& v) {
  if (v.is_undefined()) FailUndefined(v);
}

// Bounds recursion over nested values (repr, ==, <, json, hashing): past
// Python's recursion limit (1000) jinja2 raises RecursionError, and so does
// this, rather than overflow the stack on a hostile input.
class NestingGuard {
 public:
  NestingGuard();
  ~NestingGuard();
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

// Python's bool(), str(), repr(). str() of an object whose text is a memory
// address (a generator, a bound method) throws: no byte-identical output.
bool Truthy(const Value& v);
std::string Str(const Value& v);
std::string Repr(const Value& v);
// Python's float repr: shortest round trip, exponent form below 1e-4 and
// from 1e16.
std::string FloatRepr(double x);
// Python's == (never throws) and < (TypeError between unorderable types).
bool Equal(const Value& a, const Value& b);
bool Less(const Value& a, const Value& b);
// Python's type(v).__name__, for messages.
std::string TypeName(const Value& v);

// iter(v) drained into a list (a generator is consumed); TypeError if v is
// not iterable. Undefined iterates as empty, as jinja2's does.
List Iterate(const Value& v);
// iter(v) as a pull function: a generator is pulled one item at a time;
// anything else is listed (Iterate) on the first pull.
std::function<bool(Value*)> Puller(const Value& v);
// len(v); TypeError if v has none (a generator, a number).
int64_t Length(const Value& v);
// Whether Python can hash v (a dict key, a set member): not lists, dicts,
// dict views, or tuples holding them.
bool IsHashable(const Value& v);
// Python's `x in container`.
bool Contains(const Value& container, const Value& x);

}  // namespace floe::jinja
