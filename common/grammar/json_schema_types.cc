// The per-type half of SchemaCompiler (json_schema_compiler_impl.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/grammar/json_schema_compiler_impl.h"
#include "common/grammar/json_schema_formats.h"
#include "common/grammar/regex_compiler.h"
#include "common/grammar/utf8_ranges.h"
#include "common/status/status_macros.h"

namespace floe::grammar::json_schema_internal {
namespace {

// Bounded numbers keep at most this many fraction digits of a bound
// (rounded inward), so a bound such as "> 0" (the next double, 5e-324)
// costs 20 rules, not 324.
constexpr int kBoundFractionDigits = 20;

bool ValidUtf8(std::string_view text) {
  while (!text.empty()) {
    const Utf8Decoded d = DecodeUtf8(text);
    if (d.length == 0) return false;
    text.remove_prefix(static_cast<size_t>(d.length));
  }
  return true;
}

size_t CodePoints(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

uint8_t TypeOf(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return kNull;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return kInteger;
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && d == std::floor(d) ? kInteger : kNumber;
    }
    case Json::value_t::string: return kString;
    case Json::value_t::array: return kArray;
    default: return kObject;
  }
}

// What a JSON string excludes from a `pattern` or `format` match: the
// bytes it would have to escape.
RegexOptions StringContentRegex(RegexOptions::Match match) {
  RegexOptions options;
  options.excluded = ByteSet::Range(0x00, 0x1f);
  options.excluded.Add('"');
  options.excluded.Add('\\');
  options.match = match;
  return options;
}

bool IsNumericFormat(std::string_view name) {
  return name == "int32" || name == "int64" || name == "float" || name == "double";
}

}  // namespace

absl::StatusOr<int> SchemaCompiler::Count(const Json& s, const char* key, const std::string& path,
                                          int fallback) const {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  const std::string at = PathJoin(path, key);
  if (!it->is_number() || TypeOf(*it) != kInteger || *it < 0)
    return SchemaError(at, "must be a non-negative integer");
  if (it->is_number_float() ? it->get<double>() > options_.limits.max_repeat
                            : it->get<uint64_t>() > static_cast<uint64_t>(options_.limits.max_repeat))
    return SchemaError(at, absl::StrCat(Clip(it->dump()), " is over the limit max_repeat = ",
                                        options_.limits.max_repeat));
  return static_cast<int>(it->get<double>());
}

absl::StatusOr<bool> SchemaCompiler::EnumValueFits(const Json& s, const Json& value, const std::string& path) const {
  FLOE_ASSIGN_OR_RETURN(const uint8_t types, StatedTypes(s, path));
  if (!(types & TypeOf(value))) return false;
  for (const auto& [key, bound] : s.items()) {
    if (ClassifyKeyword(key) == KeywordClass::kAnnotation || key == "type" || key == "nullable" || key == "enum" ||
        key == "const" || key == "$defs" || key == "definitions" || key == "uniqueItems")
      continue;
    const bool lower = key == "minLength" || key == "minItems" || key == "minimum" || key == "exclusiveMinimum";
    if (key == "minLength" || key == "maxLength") {
      if (!value.is_string()) continue;
      FLOE_ASSIGN_OR_RETURN(const int n, Count(s, key.c_str(), path, 0));
      const size_t len = CodePoints(value.get_ref<const std::string&>());
      if (lower ? len < static_cast<size_t>(n) : len > static_cast<size_t>(n)) return false;
    } else if (key == "minItems" || key == "maxItems") {
      if (!value.is_array()) continue;
      FLOE_ASSIGN_OR_RETURN(const int n, Count(s, key.c_str(), path, 0));
      if (lower ? value.size() < static_cast<size_t>(n) : value.size() > static_cast<size_t>(n)) return false;
    } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
      if (!value.is_number() || bound.is_boolean()) continue;
      if (!bound.is_number()) return SchemaError(PathJoin(path, key), "must be a number");
      const bool draft4_exclusive = s.value(lower ? "exclusiveMinimum" : "exclusiveMaximum", Json()) == Json(true);
      const bool exclusive = key[0] == 'e' || draft4_exclusive;
      const double v = value.get<double>(), b = bound.get<double>();
      if (lower ? (exclusive ? v <= b : v < b) : (exclusive ? v >= b : v > b)) return false;
    } else if (key == "required") {
      if (!value.is_object() || !bound.is_array()) continue;
      for (const Json& name : bound)
        if (!name.is_string() || !value.contains(name.get_ref<const std::string&>())) return false;
    } else {
      return SchemaError(path, absl::StrCat("keyword '", key, "' together with 'enum'/'const' is not supported"));
    }
  }
  return true;
}

absl::StatusOr<Compiled> SchemaCompiler::CompileEnum(const Json& s, const std::string& path) {
  Json values;
  if (auto e = s.find("enum"); e != s.end()) {
    if (!e->is_array()) return SchemaError(PathJoin(path, "enum"), "must be an array");
    values = *e;
    if (auto c = s.find("const"); c != s.end()) {
      Json kept = Json::array();
      for (const Json& v : values)
        if (v == *c) kept.push_back(v);
      values = std::move(kept);
    }
  } else {
    values = Json::array({s["const"]});
  }
  FLOE_RETURN_IF_ERROR(CheckCount(PathJoin(path, "enum"), "the value count", values.size(),
                                  options_.limits.max_enum_values, "max_enum_values"));
  FLOE_RETURN_IF_ERROR(budget_.Charge(static_cast<int64_t>(values.size()), path));
  // Scalars share one byte trie of their texts (so "red" and "rose" share
  // the "r" a model writes first); objects and arrays follow the layout.
  struct Node {
    std::map<uint8_t, uint32_t> children;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  std::vector<Sequence> alts;
  std::vector<const Json*> seen;
  for (size_t i = 0; i < values.size(); ++i) {
    const Json& v = values[i];
    if (std::any_of(seen.begin(), seen.end(), [&](const Json* o) { return *o == v; })) continue;
    seen.push_back(&v);
    FLOE_ASSIGN_OR_RETURN(const bool fits, EnumValueFits(s, v, path));
    if (!fits) continue;
    if (v.is_structured()) {
      absl::StatusOr<Element> e = syntax_.Value(v, "enum-value");
      if (!e.ok()) return SchemaError(PathIndex(PathJoin(path, "enum"), i), e.status().message());
      alts.push_back({*e});
      continue;
    }
    absl::StatusOr<std::string> text = JsonSyntax::ScalarText(v);
    if (!text.ok()) return SchemaError(PathIndex(PathJoin(path, "enum"), i), text.status().message());
    uint32_t at = 0;
    for (char c : *text) {
      const uint8_t b = static_cast<uint8_t>(c);
      auto it = trie[at].children.find(b);
      if (it == trie[at].children.end()) {
        trie.push_back({});
        it = trie[at].children.emplace(b, static_cast<uint32_t>(trie.size() - 1)).first;
      }
      at = it->second;
    }
    trie[at].terminal = true;
  }
  if (!trie[0].children.empty()) {
    // Bottom-up (children have larger ids); single-child chains become one
    // literal, so only branch points and ends are rules.
    std::vector<std::optional<Element>> rule(trie.size());
    for (size_t n = trie.size(); n-- > 0;) {
      const Node& node = trie[n];
      if (n != 0 && !node.terminal && node.children.size() == 1) continue;  // inside a chain
      if (n != 0 && node.children.empty()) continue;                         // a leaf: nothing follows
      std::vector<Sequence> node_alts;
      if (node.terminal) node_alts.push_back({});
      for (const auto& [byte, child] : node.children) {
        Sequence seq{g_.Byte(byte)};
        uint32_t m = child;
        while (!trie[m].terminal && trie[m].children.size() == 1) {
          seq.push_back(g_.Byte(trie[m].children.begin()->first));
          m = trie[m].children.begin()->second;
        }
        if (!trie[m].children.empty()) seq.push_back(*rule[m]);
        node_alts.push_back(std::move(seq));
      }
      rule[n] = g_.Choice(std::move(node_alts), "enum");
    }
    alts.push_back({*rule[0]});
  }
  if (alts.empty()) return Compiled();
  if (alts.size() == 1) return Compiled(alts[0][0]);
  return Compiled(g_.Choice(std::move(alts), "enum"));
}

absl::StatusOr<std::optional<Decimal>> SchemaCompiler::Bound(const Json& s, bool lower, bool integer,
                                                             const std::string& path) const {
  const char* inclusive = lower ? "minimum" : "maximum";
  const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
  auto exc = s.find(exclusive);
  const bool draft4 = exc != s.end() && exc->is_boolean();
  std::vector<std::pair<const char*, bool>> keys;  // (keyword, exclusive)
  if (s.contains(inclusive)) keys.push_back({inclusive, draft4 && exc->get<bool>()});
  if (exc != s.end() && !draft4) keys.push_back({exclusive, true});
  std::optional<Decimal> best;
  auto tighter = [&](const Decimal& d) {
    if (!best || (lower ? CompareDecimal(d, *best) > 0 : CompareDecimal(d, *best) < 0)) best = d;
  };
  for (const auto& [key, is_exclusive] : keys) {
    const Json& v = s[key];
    const std::string at = PathJoin(path, key);
    if (!v.is_number()) return SchemaError(at, "must be a number");
    // Validators compare doubles: the grammar's bound is one whose every
    // admitted value, read as a double, passes the double comparison. An
    // exclusive bound becomes the next double, then inclusive.
    double x = v.get<double>();
    if (is_exclusive) x = std::nextafter(x, lower ? std::numeric_limits<double>::infinity()
                                                  : -std::numeric_limits<double>::infinity());
    if (!std::isfinite(x)) return SchemaError(at, "is outside the range of a double");
    tighter(RoundDecimal(DecimalOf(x), integer ? 0 : kBoundFractionDigits, lower));
    // An integer bound is also exact as written (past 2^53 the double
    // alone would round it); exclusive, it is one integer further, which
    // only integers may step by.
    if (v.is_number_integer() && (integer || !is_exclusive)) {
      Decimal exact = v.is_number_unsigned() ? DecimalOfInteger(v.get<unsigned long long>())
                                             : DecimalOfInteger(v.get<long long>());
      if (is_exclusive) exact = AdjacentInteger(exact, lower);
      tighter(exact);
    }
  }
  return best;
}

absl::StatusOr<Compiled> SchemaCompiler::CompileNumber(const Json& s, const std::string& path, bool integer) {
  if (auto m = s.find("multipleOf"); m != s.end()) {
    if (!m->is_number() || *m != 1)
      return SchemaError(PathJoin(path, "multipleOf"), "keyword 'multipleOf' is not supported (only 1)");
    integer = true;
  }
  std::optional<Decimal> format_lo, format_hi;
  if (auto f = s.find("format"); f != s.end()) {
    const std::string name = f->is_string() ? f->get<std::string>() : "";
    if (name == "int32") {
      format_lo = DecimalOfInteger(-2147483648LL);
      format_hi = DecimalOfInteger(2147483647LL);
    }
    if (name == "int32" || name == "int64") integer = true;
    // A string format on a number constrains nothing (it applies to strings).
    if (!IsNumericFormat(name) && !FindStringFormat(name))
      return SchemaError(PathJoin(path, "format"),
                         absl::StrCat("format '", Clip(name.empty() ? f->dump() : name), "' is not supported (supported: ",
                                      std::string(StringFormatNames()), ", int32, int64, float, double)"));
  }
  FLOE_ASSIGN_OR_RETURN(std::optional<Decimal> lo, Bound(s, true, integer, path));
  FLOE_ASSIGN_OR_RETURN(std::optional<Decimal> hi, Bound(s, false, integer, path));
  if (format_lo && (!lo || CompareDecimal(*format_lo, *lo) > 0)) lo = format_lo;
  if (format_hi && (!hi || CompareDecimal(*format_hi, *hi) < 0)) hi = format_hi;
  if (!lo && !hi) return Compiled(integer ? syntax_.AnyInteger() : syntax_.AnyNumber());
  return integer ? IntegerInRange(&g_, lo, hi) : NumberInRange(&g_, lo, hi);
}

absl::StatusOr<Compiled> SchemaCompiler::CompileString(const Json& s, const std::string& path) {
  FLOE_ASSIGN_OR_RETURN(const int min, Count(s, "minLength", path, 0));
  FLOE_ASSIGN_OR_RETURN(const int max, Count(s, "maxLength", path, -1));
  if (max >= 0 && min > max) return Compiled();
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  auto quoted = [&](Element content, std::string_view name) {
    return Compiled(g_.Group({g_.Byte('"'), content, g_.Byte('"')}, name));
  };
  auto f = s.find("format");
  if (f != s.end() && !(f->is_string() && IsNumericFormat(f->get_ref<const std::string&>()))) {
    const std::string at = PathJoin(path, "format");
    const std::optional<StringFormat> format =
        f->is_string() ? FindStringFormat(f->get_ref<const std::string&>()) : std::nullopt;
    if (!format)
      return SchemaError(at, absl::StrCat("format '", Clip(f->is_string() ? f->get<std::string>() : f->dump()),
                                          "' is not supported (supported: ", std::string(StringFormatNames()), ")"));
    if (s.contains("pattern")) return SchemaError(path, "'format' together with 'pattern' is not supported");
    // Lengths are honoured only when the format's own lengths already meet
    // them (a date is always 10 characters).
    if (lengths && !(format->min_chars >= min && (max < 0 || (format->max_chars >= 0 && format->max_chars <= max))))
      return SchemaError(path, absl::StrCat("'minLength'/'maxLength' together with format '", std::string(format->name),
                                            "' are not supported"));
    absl::StatusOr<Element> e = AddRegex(&g_, format->regex, absl::StrCat("format-", std::string(format->name)),
                                         StringContentRegex(RegexOptions::Match::kFull));
    if (!e.ok()) return SchemaError(at, e.status().message());
    return quoted(*e, format->name);
  }
  if (auto p = s.find("pattern"); p != s.end()) {
    const std::string at = PathJoin(path, "pattern");
    if (!p->is_string()) return SchemaError(at, "must be a string");
    if (lengths) return SchemaError(path, "'minLength'/'maxLength' together with 'pattern' are not supported");
    absl::StatusOr<Element> e =
        AddRegex(&g_, p->get_ref<const std::string&>(), "pattern", StringContentRegex(RegexOptions::Match::kSearch));
    if (!e.ok()) return SchemaError(at, e.status().message());
    return quoted(*e, "pattern");
  }
  return Compiled(syntax_.String(min, max));
}

absl::StatusOr<Compiled> SchemaCompiler::CompileArray(const Json& s, const std::string& path, int depth) {
  FLOE_ASSIGN_OR_RETURN(const int min, Count(s, "minItems", path, 0));
  FLOE_ASSIGN_OR_RETURN(int max, Count(s, "maxItems", path, -1));
  // Tuples: prefixItems (2020-12) or an array `items` (draft 4-7, with
  // additionalItems for the rest).
  const Json* prefix = nullptr;
  const Json* rest = nullptr;
  std::string prefix_key = "prefixItems", rest_key = "items";
  auto items = s.find("items");
  if (auto p = s.find("prefixItems"); p != s.end()) {
    if (items != s.end() && items->is_array())
      return SchemaError(path, "'prefixItems' together with an array 'items' is not supported");
    prefix = &*p;
    if (items != s.end()) rest = &*items;
  } else if (items != s.end() && items->is_array()) {
    prefix = &*items;
    prefix_key = "items";
    rest_key = "additionalItems";
    if (auto a = s.find("additionalItems"); a != s.end()) rest = &*a;
  } else if (items != s.end()) {
    rest = &*items;
  }
  std::vector<Element> prefix_items;
  if (prefix) {
    const std::string at = PathJoin(path, prefix_key);
    if (!prefix->is_array()) return SchemaError(at, "must be an array");
    FLOE_RETURN_IF_ERROR(CheckCount(at, "the tuple length", prefix->size(), options_.limits.max_repeat, "max_repeat"));
    for (size_t i = 0; i < prefix->size(); ++i) {
      FLOE_ASSIGN_OR_RETURN(const Compiled c, Compile((*prefix)[i], PathIndex(at, i), depth + 1));
      if (!c) {
        // No value fits item i: the array ends before it.
        max = max < 0 ? static_cast<int>(i) : std::min(max, static_cast<int>(i));
        break;
      }
      prefix_items.push_back(*c);
    }
  }
  std::optional<Element> rest_item;
  if (rest) {
    FLOE_ASSIGN_OR_RETURN(rest_item, Compile(*rest, PathJoin(path, rest_key), depth + 1));
  } else if (!prefix || options_.additional_properties_default || min > static_cast<int>(prefix_items.size())) {
    rest_item = syntax_.AnyValue();
  }
  if (static_cast<int>(prefix_items.size()) < (prefix ? static_cast<int>(prefix->size()) : 0)) rest_item.reset();
  return syntax_.Array(prefix_items, rest_item, min, max, "array");
}

absl::StatusOr<Compiled> SchemaCompiler::CompileObject(const Json& s, const std::string& path, int depth) {
  const Json empty = Json::object();
  const Json* props = &empty;
  if (auto p = s.find("properties"); p != s.end()) {
    if (!p->is_object()) return SchemaError(PathJoin(path, "properties"), "must be an object");
    props = &*p;
  }
  FLOE_RETURN_IF_ERROR(CheckCount(PathJoin(path, "properties"), "the property count", props->size(),
                                  options_.limits.max_properties, "max_properties"));
  std::vector<std::string> required;
  if (auto r = s.find("required"); r != s.end()) {
    const std::string at = PathJoin(path, "required");
    if (!r->is_array()) return SchemaError(at, "must be an array of strings");
    FLOE_RETURN_IF_ERROR(CheckCount(at, "the required count", r->size(), options_.limits.max_properties,
                                    "max_properties"));
    for (const Json& name : *r) {
      if (!name.is_string()) return SchemaError(at, "must be an array of strings");
      if (std::find(required.begin(), required.end(), name.get<std::string>()) == required.end())
        required.push_back(name.get<std::string>());
    }
  }
  auto is_required = [&](const std::string& name) {
    return std::find(required.begin(), required.end(), name) != required.end();
  };
  auto ap = s.find("additionalProperties");
  if (options_.strict) {
    if (ap == s.end() || !(ap->is_boolean() && !ap->get<bool>()))
      return SchemaError(path, "strict mode requires \"additionalProperties\": false");
    for (const auto& [name, sub] : props->items())
      if (!is_required(name))
        return SchemaError(path, absl::StrCat("strict mode requires every property in 'required' (missing '",
                                              Clip(name), "')"));
  }
  // What JSON Schema admits under undeclared names (absent: anything), and
  // what the grammar writes there unasked: nothing past declared
  // properties unless additional_properties_default says otherwise.
  // Required names `properties` does not declare take the former.
  std::optional<Element> undeclared_value;
  if (ap == s.end()) {
    undeclared_value = syntax_.AnyValue();
  } else {
    FLOE_ASSIGN_OR_RETURN(undeclared_value, Compile(*ap, PathJoin(path, "additionalProperties"), depth + 1));
  }
  std::optional<Element> extra_value = undeclared_value;
  if (ap == s.end() && !props->empty() && !options_.additional_properties_default) extra_value.reset();
  std::vector<JsonSyntax::ObjectMember> members;
  std::vector<std::string> names;
  for (const auto& [name, sub] : props->items()) {
    const std::string at = PathJoin(PathJoin(path, "properties"), name);
    if (!ValidUtf8(name)) return SchemaError(at, "the property name is not valid UTF-8");
    names.push_back(name);
    FLOE_ASSIGN_OR_RETURN(const Compiled value, Compile(sub, at, depth + 1));
    if (!value) {
      if (is_required(name)) return Compiled();  // required, yet no value fits
      continue;
    }
    members.push_back({syntax_.Member(syntax_.Key(name), *value, absl::StrCat("prop-", Clip(name, 32))), is_required(name)});
  }
  for (const std::string& name : required) {
    if (props->contains(name)) continue;
    if (!ValidUtf8(name)) return SchemaError(PathJoin(path, "required"), "a property name is not valid UTF-8");
    if (!undeclared_value) return Compiled();
    names.push_back(name);
    members.push_back(
        {syntax_.Member(syntax_.Key(name), *undeclared_value, absl::StrCat("prop-", Clip(name, 32))), true});
  }
  const size_t required_count = static_cast<size_t>(
      std::count_if(members.begin(), members.end(), [](const auto& m) { return m.required; }));
  if (auto m = s.find("minProperties"); m != s.end()) {
    FLOE_ASSIGN_OR_RETURN(const int n, Count(s, "minProperties", path, 0));
    if (static_cast<size_t>(n) > required_count)
      return SchemaError(PathJoin(path, "minProperties"),
                         "keyword 'minProperties' is not supported beyond the required properties");
  }
  if (auto m = s.find("maxProperties"); m != s.end()) {
    FLOE_ASSIGN_OR_RETURN(const int n, Count(s, "maxProperties", path, 0));
    if (extra_value || static_cast<size_t>(n) < members.size())
      return SchemaError(PathJoin(path, "maxProperties"),
                         "keyword 'maxProperties' is not supported below the declared properties");
  }
  std::optional<Element> extra;
  if (extra_value) extra = syntax_.Member(syntax_.KeyNotIn(names), *extra_value, "extra-prop");
  return Compiled(syntax_.Object(members, extra, "object"));
}

}  // namespace floe::grammar::json_schema_internal
