#include "common/grammar/json_schema_merge.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"

namespace floe::grammar::json_schema_internal {
namespace {

constexpr int kMaxMergeChain = 32;  // $ref/allOf expansions inside one merge

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t CutAt(absl::string_view text, size_t n) {
  while (n > 0 && n < text.size() && IsContinuation(text[n])) --n;
  return n;
}

// Nodes of `value`, counted without recursion (values may nest deeply).
int64_t NodeCount(const Json& value) {
  int64_t n = 0;
  std::vector<const Json*> stack{&value};
  while (!stack.empty()) {
    const Json* v = stack.back();
    stack.pop_back();
    ++n;
    if (v->is_structured())
      for (const Json& child : *v) stack.push_back(&child);
  }
  return n;
}

bool IsFalse(const Json& s) { return s.is_boolean() && !s.get<bool>(); }
bool IsTrue(const Json& s) { return (s.is_boolean() && s.get<bool>()) || (s.is_object() && s.empty()); }

// The conjunction of two subschemas, kept for the compiler to merge when
// it reaches them (so merging stays one level deep).
Json Conjoin(const Json& a, const Json& b) {
  if (IsTrue(a) || IsFalse(b)) return b;
  if (IsTrue(b) || IsFalse(a)) return a;
  return Json{{"allOf", Json::array({a, b})}};
}

constexpr absl::string_view kTypeNames[] = {"null", "boolean", "integer", "number", "string", "array", "object"};

class Merger {
 public:
  Merger(const Json& root, Budget* budget) : root_(root), budget_(budget) {}

  absl::Status Add(const Json& s, const std::string& path, int chain) {
    if (chain > kMaxMergeChain)
      return SchemaError(path, absl::StrCat("$ref and allOf nest more than ", kMaxMergeChain,
                                            " levels deep (a reference cycle?)"));
    FLOE_RETURN_IF_ERROR(budget_->Charge(1, path));
    if (s.is_boolean()) {
      if (!s.get<bool>()) unsatisfiable_ = true;
      return absl::OkStatus();
    }
    if (!s.is_object()) return SchemaError(path, "a schema must be an object or a boolean");
    FLOE_RETURN_IF_ERROR(CheckKeywords(s, path));
    if (auto ref = s.find("$ref"); ref != s.end()) {
      if (!ref->is_string()) return SchemaError(path, "'$ref' must be a string");
      FLOE_ASSIGN_OR_RETURN(const Json* target, ResolveRef(root_, ref->get<std::string>(), path));
      FLOE_RETURN_IF_ERROR(Add(*target, PathJoin(path, "$ref"), chain + 1));
    }
    if (auto all = s.find("allOf"); all != s.end()) {
      if (!all->is_array() || all->empty()) return SchemaError(path, "'allOf' must be a non-empty array");
      for (size_t i = 0; i < all->size(); ++i)
        FLOE_RETURN_IF_ERROR(Add((*all)[i], PathIndex(PathJoin(path, "allOf"), i), chain + 1));
    }
    FLOE_ASSIGN_OR_RETURN(const uint8_t types, StatedTypes(s, path));
    types_ &= types;
    FLOE_RETURN_IF_ERROR(AddObjectKeywords(s, path));
    FLOE_RETURN_IF_ERROR(AddBounds(s, path));
    for (const auto& [key, value] : s.items()) {
      if (ClassifyKeyword(key) != KeywordClass::kHonoured || kHandled.contains(key)) continue;
      if (key == "enum" || key == "const") {
        FLOE_RETURN_IF_ERROR(AddEnum(key == "const" ? Json::array({value}) : value, PathJoin(path, key)));
      } else if (key == "minLength" || key == "minItems" || key == "minProperties") {
        Tighten(key, value, /*lower=*/true);
      } else if (key == "maxLength" || key == "maxItems" || key == "maxProperties") {
        Tighten(key, value, /*lower=*/false);
      } else if (key == "items" || key == "additionalItems") {
        if (!acc_.contains(key)) {
          FLOE_RETURN_IF_ERROR(Copy(key, value, path));
        } else if (value.is_array() || acc_[key].is_array()) {
          if (acc_[key] != value) return Conflict(path, key);
        } else {
          acc_[key] = Conjoin(acc_[key], value);
        }
      } else if (key == "anyOf" || key == "oneOf") {
        if (acc_.contains("anyOf") || acc_.contains("oneOf"))
          return SchemaError(path, "allOf: more than one 'anyOf'/'oneOf' cannot be combined");
        FLOE_RETURN_IF_ERROR(Copy(key, value, path));
      } else if (acc_.contains(key) && acc_[key] != value) {
        // pattern, format, multipleOf, prefixItems, uniqueItems.
        return Conflict(path, key);
      } else {
        FLOE_RETURN_IF_ERROR(Copy(key, value, path));
      }
    }
    return absl::OkStatus();
  }

  Json Take() {
    if (types_ == 0) unsatisfiable_ = true;
    if (auto e = acc_.find("enum"); e != acc_.end() && e->empty()) unsatisfiable_ = true;
    if (unsatisfiable_) return Json(false);
    if (types_ != kAllTypes) {
      Json names = Json::array();
      for (size_t i = 0; i < std::size(kTypeNames); ++i) {
        const uint8_t bit = static_cast<uint8_t>(1u << i);
        // kInteger alone is "integer"; with kNumber it is part of "number".
        if (bit == kInteger && (types_ & kNumber)) continue;
        if (types_ & bit) names.push_back(kTypeNames[i]);
      }
      acc_["type"] = names.size() == 1 ? names[0] : names;
    }
    return std::move(acc_);
  }

 private:
  static inline const absl::flat_hash_set<absl::string_view> kHandled = {
      "$ref", "allOf", "type", "nullable", "properties", "additionalProperties", "required", "$defs",
      "definitions", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

  absl::Status Copy(const std::string& key, const Json& value, absl::string_view path) {
    FLOE_RETURN_IF_ERROR(budget_->Charge(NodeCount(value), path));
    acc_[key] = value;
    return absl::OkStatus();
  }

  absl::Status Conflict(absl::string_view path, absl::string_view key) {
    return SchemaError(path, absl::StrCat("allOf: two different '", key, "' values cannot be combined"));
  }

  void Tighten(const std::string& key, const Json& value, bool lower) {
    if (!value.is_number()) {
      acc_[key] = value;  // the compiler reports the bad value
      return;
    }
    auto it = acc_.find(key);
    if (it == acc_.end() || !it->is_number() || (lower ? value > *it : value < *it)) acc_[key] = value;
  }

  // minimum/maximum and both forms of the exclusive bounds (draft 4's
  // booleans modify minimum/maximum; later drafts' numbers stand alone).
  absl::Status AddBounds(const Json& s, absl::string_view path) {
    for (const bool lower : {true, false}) {
      const char* inclusive = lower ? "minimum" : "maximum";
      const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      auto inc = s.find(inclusive);
      auto exc = s.find(exclusive);
      const bool draft4 = exc != s.end() && exc->is_boolean();
      if (inc != s.end()) {
        if (!inc->is_number()) return SchemaError(PathJoin(path, inclusive), "must be a number");
        Tighten(draft4 && exc->get<bool>() ? exclusive : inclusive, *inc, lower);
      }
      if (exc != s.end() && !draft4) {
        if (!exc->is_number()) return SchemaError(PathJoin(path, exclusive), "must be a number or a boolean");
        Tighten(exclusive, *exc, lower);
      }
    }
    return absl::OkStatus();
  }

  absl::Status AddEnum(const Json& values, const std::string& path) {
    if (!values.is_array()) return SchemaError(path, "must be an array");
    FLOE_RETURN_IF_ERROR(budget_->Charge(NodeCount(values), path));
    auto it = acc_.find("enum");
    if (it == acc_.end()) {
      acc_["enum"] = values;
      return absl::OkStatus();
    }
    Json kept = Json::array();
    for (const Json& v : *it)
      if (std::find(values.begin(), values.end(), v) != values.end()) kept.push_back(v);
    *it = std::move(kept);
    return absl::OkStatus();
  }

  // properties, additionalProperties and required. Each side's
  // additionalProperties constrains the names only the other side declares.
  absl::Status AddObjectKeywords(const Json& s, const std::string& path) {
    const Json* props = nullptr;
    const Json* extra = nullptr;
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return SchemaError(PathJoin(path, "properties"), "must be an object");
      props = &*p;
    }
    if (auto a = s.find("additionalProperties"); a != s.end()) extra = &*a;
    if (props) FLOE_RETURN_IF_ERROR(budget_->Charge(NodeCount(*props), path));
    if (extra) FLOE_RETURN_IF_ERROR(budget_->Charge(NodeCount(*extra), path));
    if (extra && acc_.contains("properties"))
      for (auto& [name, sub] : acc_["properties"].items())
        if (!props || !props->contains(name)) sub = Conjoin(sub, *extra);
    if (props) {
      Json& mine = acc_["properties"];
      if (mine.is_null()) mine = Json::object();
      const Json* acc_extra = acc_.contains("additionalProperties") ? &acc_["additionalProperties"] : nullptr;
      for (const auto& [name, sub] : props->items()) {
        if (auto it = mine.find(name); it != mine.end()) {
          *it = Conjoin(*it, sub);
        } else {
          mine[name] = acc_extra ? Conjoin(*acc_extra, sub) : sub;
        }
      }
    }
    if (extra) {
      auto a = acc_.find("additionalProperties");
      acc_["additionalProperties"] = a == acc_.end() ? *extra : Conjoin(*a, *extra);
    }
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return SchemaError(PathJoin(path, "required"), "must be an array of strings");
      Json& mine = acc_["required"];
      if (mine.is_null()) mine = Json::array();
      for (const Json& name : *r)
        if (std::find(mine.begin(), mine.end(), name) == mine.end()) mine.push_back(name);
    }
    return absl::OkStatus();
  }

  const Json& root_;
  Budget* budget_;
  Json acc_ = Json::object();
  uint8_t types_ = kAllTypes;
  bool unsatisfiable_ = false;
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

KeywordClass ClassifyKeyword(absl::string_view keyword) {
  static const absl::flat_hash_set<absl::string_view> kHonouredSet = {
      "type", "nullable", "enum", "const", "properties", "required", "additionalProperties", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
      "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
      "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minProperties", "maxProperties"};
  static const absl::flat_hash_set<absl::string_view> kAnnotations = {
      "title", "description", "default", "examples", "example", "$schema", "$id", "id", "$comment",
      "$anchor", "$dynamicAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly", "contentMediaType",
      "contentEncoding", "contentSchema", "discriminator", "externalDocs", "xml"};
  if (kHonouredSet.contains(keyword)) return KeywordClass::kHonoured;
  if (kAnnotations.contains(keyword) || absl::StartsWith(keyword, "x-")) return KeywordClass::kAnnotation;
  return KeywordClass::kRefused;
}

std::string Clip(absl::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return absl::StrCat(text.substr(0, CutAt(text, max)), "...");
}

std::string PathJoin(absl::string_view path, absl::string_view key) { return absl::StrCat(path, ".", Clip(key, 48)); }

std::string PathIndex(absl::string_view path, size_t index) { return absl::StrCat(path, "[", index, "]"); }

absl::Status SchemaError(absl::string_view path, absl::string_view message) {
  std::string shown(path);
  if (shown.size() > 256) {
    const size_t head = CutAt(path, 96);
    const size_t tail = CutAt(path, path.size() - 150);
    shown = absl::StrCat(path.substr(0, head), "...", path.substr(tail));
  }
  return absl::InvalidArgumentError(absl::StrCat(shown, ": ", message));
}

absl::Status CheckKeywords(const Json& schema, absl::string_view path) {
  for (const auto& [key, value] : schema.items()) {
    if (ClassifyKeyword(key) == KeywordClass::kRefused)
      return SchemaError(path, absl::StrCat("keyword '", Clip(key, 48), "' is not supported"));
    if (key == "uniqueItems" && !(value.is_boolean() && !value.get<bool>()))
      return SchemaError(path, "keyword 'uniqueItems' is not supported (only false)");
  }
  return absl::OkStatus();
}

bool HasAssertions(const Json& schema, const std::vector<absl::string_view>& besides) {
  for (const auto& [key, value] : schema.items()) {
    if (ClassifyKeyword(key) == KeywordClass::kAnnotation || key == "$defs" || key == "definitions") continue;
    if (std::find(besides.begin(), besides.end(), key) == besides.end()) return true;
  }
  return false;
}

absl::StatusOr<const Json*> ResolveRef(const Json& root, absl::string_view ref, absl::string_view path) {
  const std::string shown = absl::StrCat("$ref '", Clip(ref), "'");
  if (ref.empty() || ref[0] != '#')
    return SchemaError(path, absl::StrCat(shown, " is not supported: only local references ('#...') are"));
  std::string fragment;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] != '%') {
      fragment += ref[i];
      continue;
    }
    const int hi = i + 2 < ref.size() ? HexValue(ref[i + 1]) : -1;
    const int lo = i + 2 < ref.size() ? HexValue(ref[i + 2]) : -1;
    if (hi < 0 || lo < 0) return SchemaError(path, absl::StrCat(shown, " has a bad percent escape"));
    fragment += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  if (fragment.empty()) return &root;
  if (fragment[0] != '/')
    return SchemaError(path, absl::StrCat(shown, " is not supported: anchors are not, JSON pointers are"));
  const Json* at = &root;
  size_t pos = 1;
  while (true) {
    const size_t slash = fragment.find('/', pos);
    std::string token = fragment.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    std::string unescaped;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
        unescaped += token[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        unescaped += token[i];
      }
    }
    const Json* next = nullptr;
    if (at->is_object()) {
      if (auto it = at->find(unescaped); it != at->end()) next = &*it;
    } else if (at->is_array() && !unescaped.empty() && unescaped.size() < 10 &&
               std::all_of(unescaped.begin(), unescaped.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t index = std::stoul(unescaped);
      if (index < at->size()) next = &(*at)[index];
    }
    if (!next) return SchemaError(path, absl::StrCat(shown, " does not resolve"));
    at = next;
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return at;
}

absl::Status Budget::Charge(int64_t units, absl::string_view path) {
  left_ -= units;
  if (left_ < 0)
    return SchemaError(path, absl::StrCat("the schema needs more compile work than the limit max_work = ", max_,
                                          " (schema nodes visited and copied by merges)"));
  return absl::OkStatus();
}

absl::StatusOr<uint8_t> StatedTypes(const Json& schema, absl::string_view path) {
  auto t = schema.find("type");
  if (t == schema.end()) return kAllTypes;
  std::vector<const Json*> names;
  if (t->is_array()) {
    for (const Json& n : *t) names.push_back(&n);
    if (names.empty()) return SchemaError(PathJoin(path, "type"), "must not be an empty array");
  } else {
    names.push_back(&*t);
  }
  uint8_t bits = 0;
  for (const Json* n : names) {
    if (!n->is_string()) return SchemaError(PathJoin(path, "type"), "must be a type name or an array of them");
    const std::string& name = n->get_ref<const std::string&>();
    const auto* it = std::find(std::begin(kTypeNames), std::end(kTypeNames), name);
    if (it == std::end(kTypeNames))
      return SchemaError(PathJoin(path, "type"), absl::StrCat("unknown type '", Clip(name), "'"));
    const uint8_t bit = static_cast<uint8_t>(1u << (it - std::begin(kTypeNames)));
    bits |= bit == kNumber ? (kNumber | kInteger) : bit;
  }
  if (auto n = schema.find("nullable"); n != schema.end()) {
    if (!n->is_boolean()) return SchemaError(PathJoin(path, "nullable"), "must be a boolean");
    if (n->get<bool>()) bits |= kNull;
  }
  return bits;
}

absl::StatusOr<Json> MergeSchemas(const Json& root, const std::vector<const Json*>& parts, absl::string_view path,
                                  Budget* budget) {
  Merger merger(root, budget);
  for (const Json* part : parts) FLOE_RETURN_IF_ERROR(merger.Add(*part, std::string(path), 0));
  return merger.Take();
}

}  // namespace floe::grammar::json_schema_internal
