// jinja2's filters over sequences. Those that are generator functions in
// jinja2 (map, select*, reject*, unique, items) return lazy generators here
// too: always truthy, no length, exhausted after one pass, and their work
// (and errors) happen item by item as they are pulled.
#include <algorithm>
#include <optional>

#include "common/jinja/filters_internal.h"
#include "common/jinja/operators.h"
#include "common/jinja/unicode.h"

namespace floe::jinja::filters {
namespace {

// make_attrgetter(attribute, postprocess, default).
Value KeyOf(const Value& item, const Value& attribute, bool ignore_case, const Value* fallback = nullptr) {
  Value v = item;
  if (!attribute.is_none()) {
    v = AttributePath(item, attribute);
    if (fallback && v.is_undefined()) v = *fallback;
  }
  return ignore_case ? IgnoreCase(v) : v;
}

void RequireHashable(const Value& v) {
  if (!IsHashable(v)) Fail("TypeError: unhashable type: '" + TypeName(v) + "'");
}

// select/reject and their *attr forms: jinja2's select_or_reject.
Value SelectOrReject(const Value& v, const Args& a, bool select, bool attr, const char* name) {
  return Value::Generator(
      [v, a, select, attr, name]() -> std::function<bool(Value*)> {
        if (!Truthy(v)) return [](Value*) { return false; };
        size_t off = 0;
        Value attribute = Value::None();
        if (attr) {
          if (a.positional.empty()) Fail("FilterArgumentError: Missing parameter for attribute name");
          attribute = a.positional[0];
          off = 1;
        }
        TestFn test = nullptr;
        Args test_args;
        if (a.positional.size() > off) {
          const Value& test_name = a.positional[off];
          test = test_name.is_string() ? FindTest(test_name.s) : nullptr;
          if (!test) Fail("TemplateRuntimeError: No test named " + Repr(test_name) + ".");
          test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(off + 1), a.positional.end());
          test_args.keyword = a.keyword;
        } else if (!a.keyword.empty()) {
          Fail(std::string("TypeError: ") + name + "() got an unexpected keyword argument '" + a.keyword[0].first + "'");
        }
        auto source = Puller(v);
        return [=](Value* out) {
          for (Value item; source(&item);) {
            const Value subject = KeyOf(item, attribute, false);
            if ((test ? test(subject, test_args) : Truthy(subject)) == select) {
              *out = std::move(item);
              return true;
            }
          }
          return false;
        };
      },
      "generator");
}

// Python's sorted(items, key=..., reverse=...): stable either way.
void SortBy(List& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? Less(keys[y], keys[x]) : Less(keys[x], keys[y]);
  });
  List sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

Value MinMax(const Value& v, const Args& a, bool max, const char* name) {
  Bound b(a, name, {"case_sensitive", "attribute"});
  const List items = Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool ignore_case = !Truthy(b.get(0, Value::Bool(false)));
  const Value attribute = b.get(1, Value::None());
  size_t best = 0;
  Value best_key = KeyOf(items[0], attribute, ignore_case);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = KeyOf(items[i], attribute, ignore_case);
    if (max ? Less(best_key, key) : Less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

}  // namespace

Value IgnoreCase(const Value& v) {
  if (!v.is_string()) return v;
  return Value::String(PyLower(v.s));
}

Value First(const Value& v, const Args& a) {
  Bound(a, "first", {});
  if (v.kind == Value::Kind::kIterator) {
    Value item;
    if (v.iter->Next(&item)) return item;
  } else {
    const List items = Iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::Undefined("No first item, sequence was empty.");
}

Value Last(const Value& v, const Args& a) {
  Bound(a, "last", {});
  const bool reversible = v.is_undefined() || v.is_string() || v.is_dict() || v.kind == Value::Kind::kList;
  if (!reversible) Fail("TypeError: '" + TypeName(v) + "' object is not reversible");
  const List items = Iterate(v);
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Value Join(const Value& v, const Args& a) {
  Bound b(a, "join", {"d", "attribute"});
  const std::string separator = Str(b.get(0, Value::String("")));
  const Value attribute = b.get(1, Value::None());
  std::string out;
  bool first = true;
  for (const Value& item : Iterate(v)) {
    if (!first) out += separator;
    out += Str(KeyOf(item, attribute, false));
    first = false;
  }
  return Value::String(std::move(out));
}

Value ToList(const Value& v, const Args& a) {
  Bound(a, "list", {});
  return Value::MakeList(Iterate(v));
}

Value Items(const Value& v, const Args& a) {
  Bound(a, "items", {});
  return Value::Generator(
      [v]() -> std::function<bool(Value*)> {
        if (v.is_undefined()) return [](Value*) { return false; };
        if (!v.is_dict()) Fail("TypeError: Can only get item pairs from a mapping.");
        auto pos = std::make_shared<size_t>(0);
        return [v, pos](Value* out) {
          if (*pos >= v.dict->size()) return false;
          const auto& [k, e] = (*v.dict)[(*pos)++];
          *out = Value::Tuple({Value::String(k), e});
          return true;
        };
      },
      "generator");
}

Value Reverse(const Value& v, const Args& a) {
  Bound(a, "reverse", {});
  if (v.is_string()) {
    std::u32string cps = Decode(v.s);
    std::reverse(cps.begin(), cps.end());
    Value out = Value::String(Encode(cps));
    out.markup = v.markup;
    return out;
  }
  const char* type = nullptr;
  if (v.is_undefined()) type = "reversed";
  else if (v.is_dict()) type = "dict_reversekeyiterator";
  else if (v.kind == Value::Kind::kList)
    switch (v.seq) {
      case Value::Seq::kList: type = "list_reverseiterator"; break;
      case Value::Seq::kRange: type = "range_iterator"; break;
      case Value::Seq::kTuple: type = "reversed"; break;
      case Value::Seq::kDictKeys: type = "dict_reversekeyiterator"; break;
      case Value::Seq::kDictValues: type = "dict_reversevalueiterator"; break;
      case Value::Seq::kDictItems: type = "dict_reverseitemiterator"; break;
    }
  List items;
  try {
    items = Iterate(v);
  } catch (const Error&) {
    Fail("FilterArgumentError: argument must be iterable");
  }
  std::reverse(items.begin(), items.end());
  // Not reversible (a generator): jinja2 falls back to a reversed list.
  if (!type) return Value::MakeList(std::move(items));
  return Value::Iterator(std::move(items), type);
}

Value Map(const Value& v, const Args& a) {
  return Value::Generator(
      [v, a]() -> std::function<bool(Value*)> {
        if (!Truthy(v)) return [](Value*) { return false; };
        std::function<Value(const Value&)> fn;
        if (a.positional.empty()) {  // map(attribute=..., default=...)
          std::optional<Value> attribute, fallback;
          for (const auto& [k, e] : a.keyword) {
            if (k == "attribute") attribute = e;
            else if (k == "default") fallback = e;
            else Fail("FilterArgumentError: Unexpected keyword argument '" + k + "'");
          }
          if (!attribute) Fail("FilterArgumentError: map requires a filter argument");
          const bool has_default = fallback && !fallback->is_none();
          fn = [attribute = *attribute, fallback = fallback.value_or(Value::None()), has_default](const Value& item) {
            return KeyOf(item, attribute, false, has_default ? &fallback : nullptr);
          };
        } else {  // map('filter', *args, **kwargs)
          const Value& name = a.positional[0];
          const FilterFn filter = name.is_string() ? FindFilter(name.s) : nullptr;
          if (!filter) Fail("TemplateRuntimeError: No filter named " + Repr(name) + ".");
          Args rest;
          rest.positional.assign(a.positional.begin() + 1, a.positional.end());
          rest.keyword = a.keyword;
          fn = [filter, rest](const Value& item) { return filter(item, rest); };
        }
        auto source = Puller(v);
        return [source, fn](Value* out) {
          Value item;
          if (!source(&item)) return false;
          *out = fn(item);
          return true;
        };
      },
      "generator");
}

Value Select(const Value& v, const Args& a) { return SelectOrReject(v, a, true, false, "select"); }
Value Reject(const Value& v, const Args& a) { return SelectOrReject(v, a, false, false, "reject"); }
Value SelectAttr(const Value& v, const Args& a) { return SelectOrReject(v, a, true, true, "selectattr"); }
Value RejectAttr(const Value& v, const Args& a) { return SelectOrReject(v, a, false, true, "rejectattr"); }

Value Sort(const Value& v, const Args& a) {
  Bound b(a, "sort", {"reverse", "case_sensitive", "attribute"});
  List items = Iterate(v);
  const bool ignore_case = !Truthy(b.get(1, Value::Bool(false)));
  const Value attribute = b.get(2, Value::None());
  // make_multi_attrgetter: "a,b" sorts by a, then b; the key is a list.
  std::vector<Value> parts;
  if (attribute.is_string()) {
    size_t start = 0;
    for (;;) {
      const size_t comma = attribute.s.find(',', start);
      parts.push_back(Value::String(attribute.s.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    List key;
    for (const Value& part : parts) key.push_back(KeyOf(item, part, ignore_case));
    keys.push_back(Value::MakeList(std::move(key)));
  }
  SortBy(items, keys, Truthy(b.get(0, Value::Bool(false))));
  return Value::MakeList(std::move(items));
}

Value DictSort(const Value& v, const Args& a) {
  Bound b(a, "dictsort", {"case_sensitive", "by", "reverse"});
  const Value by = b.get(1, Value::String("key"));
  if (!by.is_string() || (by.s != "key" && by.s != "value"))
    Fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) Fail("AttributeError: '" + TypeName(v) + "' object has no attribute 'items'");
  const bool ignore_case = !Truthy(b.get(0, Value::Bool(false)));
  List items;
  std::vector<Value> keys;
  for (const auto& [k, e] : *v.dict) {
    items.push_back(Value::Tuple({Value::String(k), e}));
    const Value key = by.s == "key" ? Value::String(k) : e;
    keys.push_back(ignore_case ? IgnoreCase(key) : key);
  }
  SortBy(items, keys, Truthy(b.get(2, Value::Bool(false))));
  return Value::MakeList(std::move(items));
}

Value Unique(const Value& v, const Args& a) {
  Bound b(a, "unique", {"case_sensitive", "attribute"});
  const bool ignore_case = !Truthy(b.get(0, Value::Bool(false)));
  const Value attribute = b.get(1, Value::None());
  return Value::Generator(
      [v, ignore_case, attribute]() -> std::function<bool(Value*)> {
        auto source = Puller(v);
        auto seen = std::make_shared<List>();
        return [=](Value* out) {
          for (Value item; source(&item);) {
            const Value key = KeyOf(item, attribute, ignore_case);
            RequireHashable(key);
            if (std::any_of(seen->begin(), seen->end(), [&](const Value& s) { return Equal(s, key); })) continue;
            seen->push_back(key);
            *out = std::move(item);
            return true;
          }
          return false;
        };
      },
      "generator");
}

Value Min(const Value& v, const Args& a) { return MinMax(v, a, false, "min"); }
Value Max(const Value& v, const Args& a) { return MinMax(v, a, true, "max"); }

Value Sum(const Value& v, const Args& a) {
  Bound b(a, "sum", {"attribute", "start"});
  Value total = b.get(1, Value::Int(0));
  if (total.is_string()) Fail("TypeError: sum() can't sum strings [use ''.join(seq) instead]");
  const Value attribute = b.get(0, Value::None());
  for (const Value& item : Iterate(v)) total = BinaryOp("+", total, KeyOf(item, attribute, false));
  return total;
}

}  // namespace floe::jinja::filters
