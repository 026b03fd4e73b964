#include "common/grammar/json_schema_compiler.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/json_schema_compiler_impl.h"
#include "common/grammar/json_schema_formats.h"
#include "common/status/status_macros.h"

namespace floe::grammar {
namespace json_schema_internal {
namespace {

// Types a schema without `type` implies through its keywords (kAllTypes
// when none): {"properties": ...} is meant as an object, and compiling it
// as one admits a subset of what JSON Schema allows.
uint8_t ImpliedTypes(const Json& s) {
  constexpr uint8_t kNumeric = kInteger | kNumber;
  static constexpr std::pair<const char*, uint8_t> kImplies[] = {
      {"properties", kObject},    {"additionalProperties", kObject}, {"required", kObject},
      {"minProperties", kObject}, {"maxProperties", kObject},        {"items", kArray},
      {"prefixItems", kArray},    {"additionalItems", kArray},       {"minItems", kArray},
      {"maxItems", kArray},       {"minLength", kString},            {"maxLength", kString},
      {"pattern", kString},       {"minimum", kNumeric},             {"maximum", kNumeric},
      {"exclusiveMinimum", kNumeric}, {"exclusiveMaximum", kNumeric}, {"multipleOf", kNumeric}};
  uint8_t types = 0;
  for (const auto& [key, bits] : kImplies)
    if (s.contains(key)) types |= bits;
  if (auto f = s.find("format"); f != s.end() && f->is_string())
    types |= FindStringFormat(f->get<std::string>()) ? static_cast<uint8_t>(kString) : kNumeric;
  return types ? types : static_cast<uint8_t>(kAllTypes);
}

}  // namespace

SchemaCompiler::SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
    : root_(root), options_(options), syntax_(&g_, options), budget_(options.limits.max_work) {}

absl::StatusOr<Grammar> SchemaCompiler::Run() {
  FLOE_ASSIGN_OR_RETURN(const Compiled top, Compile(root_, "schema", 0));
  if (!top) return SchemaError("schema", "the schema admits no value");
  const uint32_t root = g_.AddRule("root");
  g_.AddAlternative(root, {*top});
  g_.set_root(root);
  FLOE_RETURN_IF_ERROR(CheckRules("schema"));
  return Finish(g_);
}

absl::StatusOr<Grammar> SchemaCompiler::Finish(const Grammar& g) {
  const auto& rules = g.rules();
  auto usable = [&](const Element& e, const std::vector<bool>& productive) {
    return e.kind == Element::Kind::kRule ? productive[e.index] : !g.byte_sets()[e.index].Empty();
  };
  auto alive = [&](const Sequence& alt, const std::vector<bool>& productive) {
    for (const Element& e : alt)
      if (!usable(e, productive)) return false;
    return true;
  };
  std::vector<bool> productive(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (productive[r]) continue;
      for (const Sequence& alt : rules[r].alternatives)
        if (alive(alt, productive)) {
          productive[r] = changed = true;
          break;
        }
    }
  }
  if (g.root() >= rules.size() || !productive[g.root()])
    return SchemaError("schema", "the schema admits no finite document (every branch recurses)");
  // Reachable rules, in their original order, renumbered.
  std::vector<int64_t> renumber(rules.size(), -1);
  std::vector<uint32_t> stack{g.root()};
  renumber[g.root()] = 0;
  while (!stack.empty()) {
    const uint32_t r = stack.back();
    stack.pop_back();
    for (const Sequence& alt : rules[r].alternatives) {
      if (!alive(alt, productive)) continue;
      for (const Element& e : alt)
        if (e.kind == Element::Kind::kRule && renumber[e.index] < 0) {
          renumber[e.index] = 0;
          stack.push_back(e.index);
        }
    }
  }
  Grammar out;
  for (size_t r = 0; r < rules.size(); ++r)
    if (renumber[r] >= 0) renumber[r] = out.AddRule(rules[r].name);
  for (size_t r = 0; r < rules.size(); ++r) {
    if (renumber[r] < 0) continue;
    for (const Sequence& alt : rules[r].alternatives) {
      if (!alive(alt, productive)) continue;
      Sequence mapped;
      for (const Element& e : alt)
        mapped.push_back(e.kind == Element::Kind::kRule ? Grammar::Ref(static_cast<uint32_t>(renumber[e.index]))
                                                        : out.Bytes(g.byte_sets()[e.index]));
      out.AddAlternative(static_cast<uint32_t>(renumber[r]), std::move(mapped));
    }
  }
  out.set_root(static_cast<uint32_t>(renumber[g.root()]));
  if (absl::Status s = out.CheckIntegrity(); !s.ok())
    return SchemaError("schema", absl::StrCat("a $ref cycle recurses before writing anything: ", s.message()));
  return out;
}

absl::Status SchemaCompiler::CheckRules(absl::string_view path) const {
  if (g_.rules().size() > static_cast<size_t>(options_.limits.max_rules))
    return SchemaError(path, absl::StrCat("the grammar needs more than max_rules = ", options_.limits.max_rules,
                                          " rules"));
  return absl::OkStatus();
}

absl::Status SchemaCompiler::CheckCount(absl::string_view path, absl::string_view what, size_t n, int limit,
                                        absl::string_view limit_name) const {
  if (n > static_cast<size_t>(limit))
    return SchemaError(path, absl::StrCat(what, " ", n, " is over the limit ", limit_name, " = ", limit));
  return absl::OkStatus();
}

absl::StatusOr<Compiled> SchemaCompiler::Compile(const Json& s, const std::string& path, int depth) {
  if (depth > options_.limits.max_depth)
    return SchemaError(path, absl::StrCat("subschemas nest deeper than max_depth = ", options_.limits.max_depth));
  FLOE_RETURN_IF_ERROR(budget_.Charge(1, path));
  FLOE_RETURN_IF_ERROR(CheckRules(path));
  if (s.is_boolean()) return s.get<bool>() ? Compiled(syntax_.AnyValue()) : std::nullopt;
  if (!s.is_object()) return SchemaError(path, "a schema must be an object or a boolean");
  FLOE_RETURN_IF_ERROR(CheckKeywords(s, path));
  // A bare $ref is one shared rule (recursion goes through it); with
  // sibling keywords, or under allOf, the schemas merge into one.
  if (s.contains("$ref") && !HasAssertions(s, {"$ref"})) return CompileRef(s["$ref"], path, depth);
  if (s.contains("$ref") || s.contains("allOf")) {
    FLOE_ASSIGN_OR_RETURN(Json merged, MergeSchemas(root_, {&s}, path, &budget_));
    return Compile(Keep(std::move(merged)), path, depth + 1);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) return CompileUnion(s, path, depth);
  if (s.contains("enum") || s.contains("const")) return CompileEnum(s, path);
  FLOE_ASSIGN_OR_RETURN(uint8_t types, StatedTypes(s, path));
  if (!s.contains("type")) types &= ImpliedTypes(s);
  std::vector<Sequence> alts;
  for (const uint8_t type : {kNull, kBoolean, kInteger, kString, kArray, kObject}) {
    if (!(types & type)) continue;
    Compiled c;
    if (type == kNull) {
      c = g_.Group(g_.Literal("null"), "null");
    } else if (type == kBoolean) {
      c = g_.Choice({g_.Literal("true"), g_.Literal("false")}, "boolean");
    } else if (type == kInteger) {
      // kInteger stands for both numeric types; "number" admits fractions.
      FLOE_ASSIGN_OR_RETURN(c, CompileNumber(s, path, /*integer=*/!(types & kNumber)));
    } else if (type == kString) {
      FLOE_ASSIGN_OR_RETURN(c, CompileString(s, path));
    } else if (type == kArray) {
      FLOE_ASSIGN_OR_RETURN(c, CompileArray(s, path, depth));
    } else {
      FLOE_ASSIGN_OR_RETURN(c, CompileObject(s, path, depth));
    }
    if (c) alts.push_back({*c});
  }
  if (alts.empty()) return Compiled();
  if (alts.size() == 1) return Compiled(alts[0][0]);
  return Compiled(g_.Choice(std::move(alts), "types"));
}

absl::StatusOr<Compiled> SchemaCompiler::CompileRef(const Json& ref, const std::string& path, int depth) {
  if (!ref.is_string()) return SchemaError(path, "'$ref' must be a string");
  const std::string& target_name = ref.get_ref<const std::string&>();
  if (auto it = ref_rules_.find(target_name); it != ref_rules_.end()) return Compiled(Grammar::Ref(it->second));
  FLOE_ASSIGN_OR_RETURN(const Json* target, ResolveRef(root_, target_name, path));
  const size_t slash = target_name.rfind('/');
  const std::string name = slash == std::string::npos ? "root" : target_name.substr(slash + 1);
  // The rule exists before its body, so a recursive schema refers to it.
  const uint32_t rule = g_.AddRule(absl::StrCat("ref-", Clip(name, 32)));
  ref_rules_.emplace(target_name, rule);
  FLOE_ASSIGN_OR_RETURN(const Compiled body, Compile(*target, PathJoin(path, "$ref"), depth + 1));
  // A reference to a schema that admits nothing matches nothing; Finish
  // prunes it with every alternative that needs it.
  g_.AddAlternative(rule, {body ? *body : g_.Bytes(ByteSet())});
  return Compiled(Grammar::Ref(rule));
}

absl::StatusOr<Compiled> SchemaCompiler::CompileUnion(const Json& s, const std::string& path, int depth) {
  if (s.contains("anyOf") && s.contains("oneOf"))
    return SchemaError(path, "'anyOf' and 'oneOf' in one schema are not supported");
  const std::string key = s.contains("anyOf") ? "anyOf" : "oneOf";
  const Json& branches = s[key];
  const std::string list_path = PathJoin(path, key);
  if (!branches.is_array() || branches.empty()) return SchemaError(list_path, "must be a non-empty array");
  FLOE_RETURN_IF_ERROR(
      CheckCount(list_path, "the branch count", branches.size(), options_.limits.max_any_of, "max_any_of"));
  // Keywords beside the list apply to every branch: A and (B or C) is
  // (A and B) or (A and C).
  std::optional<Json> siblings;
  if (HasAssertions(s, {key})) {
    siblings = s;
    siblings->erase(key);
  }
  std::vector<Sequence> alts;
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string branch_path = PathIndex(list_path, i);
    Compiled c;
    if (siblings) {
      FLOE_ASSIGN_OR_RETURN(Json merged, MergeSchemas(root_, {&*siblings, &branches[i]}, branch_path, &budget_));
      FLOE_ASSIGN_OR_RETURN(c, Compile(Keep(std::move(merged)), branch_path, depth + 1));
    } else {
      FLOE_ASSIGN_OR_RETURN(c, Compile(branches[i], branch_path, depth + 1));
    }
    if (c) alts.push_back({*c});
  }
  if (alts.empty()) return Compiled();
  return Compiled(g_.Choice(std::move(alts), key));
}

}  // namespace json_schema_internal

absl::StatusOr<Grammar> CompileJsonSchema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  if (options.max_whitespace < 0 || options.max_whitespace > 64)
    return absl::InvalidArgumentError(
        absl::StrCat("max_whitespace ", options.max_whitespace, " is outside 0..64"));
  return json_schema_internal::SchemaCompiler(schema, options).Run();
}

Grammar JsonObjectGrammar(const JsonSchemaOptions& options) {
  Grammar g;
  JsonSyntax syntax(&g, options);
  const uint32_t root = g.AddRule("root");
  g.AddAlternative(root, {syntax.AnyObject()});
  g.set_root(root);
  return g;
}

}  // namespace floe::grammar
