// Internal to the JSON Schema front end: the JSON syntax pieces every
// schema grammar is assembled from (strings, keys, separators, objects and
// arrays in the layout json_schema_compiler.h describes, any value), in one
// whitespace policy. Shared helper rules (a string character, whitespace,
// any value) are added on first use and reused.
//
// Every grammar built here is unambiguous: whitespace only ever sits
// between two tokens, never next to another whitespace run, and the
// alternatives of an object's member list differ in their keys.
//
// Not thread-safe: writes one grammar.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema_compiler.h"

namespace floe::grammar {

class JsonSyntax {
 public:
  // options.whitespace and options.max_whitespace (clamped to 0..64) apply.
  JsonSyntax(Grammar* g, const JsonSchemaOptions& options);

  Grammar* g() const { return g_; }

  // Appends what goes between two tokens of a value: whitespace (kFlexible),
  // the item separator (`,` with its whitespace), the key separator (`:`).
  void AppendWs(Sequence* seq);
  void AppendItemSep(Sequence* seq);
  void AppendKeySep(Sequence* seq);

  // One character of a string's content: raw UTF-8 other than `"`, `\` and
  // control bytes, or an escape (no surrogate \u escapes).
  Element Char();
  // A whole string (quotes included) of min..max characters (max < 0:
  // unbounded); the caller bounds max and min.
  Element String(int min = 0, int max = -1);
  // A quoted key spelled as `name` serializes (nlohmann's escapes).
  Element Key(std::string_view name);
  // A quoted key whose decoded text differs from every name in `names`
  // (keys of undeclared properties: no duplicate of a declared one).
  // Escapes that could spell a declared name's next character are left
  // out until the key has diverged from every name, so the set is a
  // (near-complete) subset of "all other keys".
  Element KeyNotIn(const std::vector<std::string>& names);
  // key `:` value
  Element Member(Element key, Element value, std::string_view name);

  // The layout of an object: members in the given order, required ones
  // always, optional ones at will, then (if `extra` is given) any number of
  // `extra` members (whose keys must differ from the members': KeyNotIn).
  // Two alternatives of a member list never start with the same key, so
  // the object's grammar stays unambiguous.
  struct ObjectMember {
    Element member;
    bool required = false;
  };
  Element Object(const std::vector<ObjectMember>& members, std::optional<Element> extra,
                 std::string_view name);
  // An array whose item i is prefix[i] for i < prefix.size(), else `rest`
  // (nullopt: no item past the prefix), with min..max items (max < 0:
  // unbounded). nullopt when no length fits.
  std::optional<Element> Array(const std::vector<Element>& prefix, std::optional<Element> rest, int min,
                               int max, std::string_view name);

  // Exactly `value` in this syntax's layout (objects keep their key order).
  // Fails only for strings that are not valid UTF-8.
  absl::StatusOr<Element> Value(const nlohmann::ordered_json& value, std::string_view name);
  // The canonical text of a scalar (dump() with UTF-8 kept raw).
  static absl::StatusOr<std::string> ScalarText(const nlohmann::ordered_json& value);

  Element AnyValue();
  Element AnyObject();
  Element AnyNumber();
  Element AnyInteger();

 private:
  Element Ws();
  Element EscapeTail();
  Element RawMultibyte();
  ByteSet RawAscii() const;

  Grammar* g_;
  JsonWhitespace whitespace_;
  int max_whitespace_;
  std::optional<Element> ws_, char_, escape_tail_, raw_multibyte_, chars_, any_value_, any_object_, any_number_,
      any_integer_;
};

}  // namespace floe::grammar
