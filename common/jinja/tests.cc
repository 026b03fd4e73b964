// jinja2's tests (`x is defined`, `x is divisibleby 3`...) and their table.
#include <algorithm>
#include <iterator>

#include "common/jinja/builtins.h"
#include "common/jinja/operators.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

using K = Value::Kind;

const Value& Other(const Args& a, const char* name) {
  if (a.positional.size() + a.keyword.size() != 1)
    Fail(std::string("TypeError: test '") + name + "' takes exactly one argument");
  return a.positional.empty() ? a.keyword[0].second : a.positional[0];
}

void NoArgs(const Args& a, const char* name) { Bound(a, name, {}); }

bool Defined(const Value& v, const Args& a) { return NoArgs(a, "defined"), !v.is_undefined(); }
bool IsUndefined(const Value& v, const Args& a) { return NoArgs(a, "undefined"), v.is_undefined(); }
bool None(const Value& v, const Args& a) { return NoArgs(a, "none"), v.is_none(); }
bool Boolean(const Value& v, const Args& a) { return NoArgs(a, "boolean"), v.kind == K::kBool; }
bool False(const Value& v, const Args& a) { return NoArgs(a, "false"), v.kind == K::kBool && !v.b; }
bool True(const Value& v, const Args& a) { return NoArgs(a, "true"), v.kind == K::kBool && v.b; }
bool Integer(const Value& v, const Args& a) { return NoArgs(a, "integer"), v.kind == K::kInt; }
bool Float(const Value& v, const Args& a) { return NoArgs(a, "float"), v.kind == K::kFloat; }
bool Number(const Value& v, const Args& a) { return NoArgs(a, "number"), v.is_number(); }
bool String(const Value& v, const Args& a) { return NoArgs(a, "string"), v.is_string(); }
bool Mapping(const Value& v, const Args& a) { return NoArgs(a, "mapping"), v.is_dict(); }
bool Escaped(const Value& v, const Args& a) { return NoArgs(a, "escaped"), v.is_string() && v.markup; }

// len(v) and v.__getitem__ both exist.
bool Sequence(const Value& v, const Args& a) {
  NoArgs(a, "sequence");
  return v.is_undefined() || v.is_string() || v.is_dict() ||
         (v.kind == K::kList && v.seq <= Value::Seq::kRange);
}

// iter(v) works.
bool Iterable(const Value& v, const Args& a) {
  NoArgs(a, "iterable");
  return v.is_undefined() || v.is_string() || v.is_dict() || v.kind == K::kList || v.kind == K::kIterator ||
         v.kind == K::kLoop;
}

// Python's callable(): Undefined and the loop object have __call__ too.
bool Callable(const Value& v, const Args& a) {
  NoArgs(a, "callable");
  return v.is_undefined() || v.kind == K::kMacro || v.kind == K::kCallable || v.kind == K::kMethod ||
         v.kind == K::kLoop;
}

// Python's `is`: meaningful for None, booleans, CPython's cached small ints
// and shared objects; refused for strings, whose identity CPython leaves open.
bool SameAs(const Value& v, const Args& a) {
  const Value& other = Other(a, "sameas");
  if (v.kind != other.kind) return false;
  switch (v.kind) {
    case K::kNone: return true;
    case K::kBool: return v.b == other.b;
    case K::kInt: return v.i == other.i && v.i >= -5 && v.i <= 256;
    case K::kString: Fail("unsupported: `is sameas` on strings (object identity)");
    case K::kFloat: case K::kUndefined: return false;
    default: return v.list == other.list && v.dict == other.dict && v.iter == other.iter && v.loop == other.loop &&
                    v.macro == other.macro && v.s == other.s;
  }
}

bool In(const Value& v, const Args& a) { return Contains(Other(a, "in"), v); }
bool Eq(const Value& v, const Args& a) { return Equal(v, Other(a, "eq")); }
bool Ne(const Value& v, const Args& a) { return !Equal(v, Other(a, "ne")); }
bool Gt(const Value& v, const Args& a) { return Less(Other(a, "gt"), v); }
bool Ge(const Value& v, const Args& a) { return !Less(v, Other(a, "ge")); }
bool Lt(const Value& v, const Args& a) { return Less(v, Other(a, "lt")); }
bool Le(const Value& v, const Args& a) { return !Less(Other(a, "le"), v); }

bool Odd(const Value& v, const Args& a) { return NoArgs(a, "odd"), Equal(BinaryOp("%", v, Value::Int(2)), Value::Int(1)); }
bool Even(const Value& v, const Args& a) { return NoArgs(a, "even"), Equal(BinaryOp("%", v, Value::Int(2)), Value::Int(0)); }
bool DivisibleBy(const Value& v, const Args& a) {
  return Equal(BinaryOp("%", v, Other(a, "divisibleby")), Value::Int(0));
}
bool Lower(const Value& v, const Args& a) { return NoArgs(a, "lower"), PyIsLower(Str(v)); }
bool Upper(const Value& v, const Args& a) { return NoArgs(a, "upper"), PyIsUpper(Str(v)); }

// jinja2's own filter and test names, implemented here or not: what
// `x is filter` / `x is test` answer.
constexpr std::string_view kJinjaFilters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "join", "last",
    "length", "list", "lower", "items", "map", "min", "max", "pprint", "random", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum",
    "title", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    "tojson"};
constexpr std::string_view kJinjaTests[] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean", "false", "true",
    "integer", "float", "lower", "upper", "string", "mapping", "number", "sequence", "iterable", "callable",
    "sameas", "escaped", "in", "==", "eq", "equalto", "!=", "ne", ">", "gt", "greaterthan", "ge", ">=", "<",
    "lt", "lessthan", "<=", "le"};

bool NameIn(const Value& v, const auto& names) {
  if (!IsHashable(v)) Fail("TypeError: unhashable type: '" + TypeName(v) + "'");
  return v.is_string() && std::find(std::begin(names), std::end(names), v.s) != std::end(names);
}
bool IsFilter(const Value& v, const Args& a) { return NoArgs(a, "filter"), NameIn(v, kJinjaFilters); }
bool IsTest(const Value& v, const Args& a) { return NoArgs(a, "test"), NameIn(v, kJinjaTests); }

struct Entry {
  std::string_view name;
  TestFn fn;
};

constexpr Entry kTests[] = {
    {"odd", Odd}, {"even", Even}, {"divisibleby", DivisibleBy}, {"defined", Defined},
    {"undefined", IsUndefined}, {"filter", IsFilter}, {"test", IsTest}, {"none", None}, {"boolean", Boolean},
    {"false", False}, {"true", True}, {"integer", Integer}, {"float", Float}, {"lower", Lower}, {"upper", Upper},
    {"string", String}, {"mapping", Mapping}, {"number", Number}, {"sequence", Sequence}, {"iterable", Iterable},
    {"callable", Callable}, {"sameas", SameAs}, {"escaped", Escaped}, {"in", In}, {"==", Eq}, {"eq", Eq},
    {"equalto", Eq}, {"!=", Ne}, {"ne", Ne}, {">", Gt}, {"gt", Gt}, {"greaterthan", Gt}, {">=", Ge}, {"ge", Ge},
    {"<", Lt}, {"lt", Lt}, {"lessthan", Lt}, {"<=", Le}, {"le", Le},
};

}  // namespace

TestFn FindTest(std::string_view name) {
  for (const auto& entry : kTests)
    if (entry.name == name) return entry.fn;
  return nullptr;
}

}  // namespace floe::jinja
