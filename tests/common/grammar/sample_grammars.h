// Hand-built grammars (through the IR builder only, no front end) for the
// matcher and token-mask tests and bench/grammar: small ones whose features
// each stress one part of the matcher, and JSON ones shaped like what a
// JSON-Schema front end emits. Header-only; each function returns a fresh,
// CheckIntegrity-clean Grammar.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/grammar/grammar.h"

namespace floe::grammar::testing {

// s ::= "(" s ")" s | "[" s "]" s | ""   (nested, nullable, recursive)
inline Grammar NestedBrackets() {
  Grammar g;
  const uint32_t s = g.AddRule("s");
  g.AddAlternative(s, {g.Byte('('), Grammar::Ref(s), g.Byte(')'), Grammar::Ref(s)});
  g.AddAlternative(s, {g.Byte('['), Grammar::Ref(s), g.Byte(']'), Grammar::Ref(s)});
  g.AddAlternative(s, {});
  g.set_root(s);
  return g;
}

// root ::= "abc" | "abd" | "ab" | "abcde" | "b" tail ; tail ::= "x" | "xy" | "xyz"
inline Grammar SharedPrefixes() {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  for (const char* lit : {"abc", "abd", "ab", "abcde"}) g.AddAlternative(root, g.Literal(lit));
  Element tail = g.Choice({g.Literal("x"), g.Literal("xy"), g.Literal("xyz")}, "tail");
  g.AddAlternative(root, {g.Byte('b'), tail});
  g.set_root(root);
  return g;
}

// root ::= a bs c "!"? ; a ::= "a"? ; bs ::= "b" bs | "" ; c ::= a "c" | a
// (nullable rules in a row, and a rule that is nullable through another)
inline Grammar NullableChain() {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  Element a = g.Optional(g.Byte('a'), "a");
  Element bs = g.Star(g.Byte('b'), "bs");
  Element c = g.Choice({{a, g.Byte('c')}, {a}}, "c");
  g.AddAlternative(root, {a, bs, c, g.Optional(g.Byte('!'), "bang")});
  g.set_root(root);
  return g;
}

// root ::= [a-c]{2,4} "-" [0-9]{0,3} "x"?
inline Grammar RepetitionBounds() {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  g.AddAlternative(root, {g.Repeat(g.Bytes(ByteSet::Range('a', 'c')), 2, 4, "letters"), g.Byte('-'),
                          g.Repeat(g.Bytes(ByteSet::Range('0', '9')), 0, 3, "digits"),
                          g.Optional(g.Byte('x'), "x")});
  g.set_root(root);
  return g;
}

// root ::= "\"" char{2,6} "\"" ; char ::= [a-c] | "\\" [nt] | [\xC3] [\x80-\xBF]
// (a bounded repetition calling one short rule from each step, as a
// JSON-Schema maxLength does)
inline Grammar BoundedString() {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  ByteSet escaped = ByteSet::Of('n');
  escaped.Add('t');
  const Element ch = g.Choice({{g.Bytes(ByteSet::Range('a', 'c'))},
                               {g.Byte('\\'), g.Bytes(escaped)},
                               {g.Byte(0xc3), g.Bytes(ByteSet::Range(0x80, 0xbf))}},
                              "char");
  g.AddAlternative(root, {g.Byte('"'), g.Repeat(ch, 2, 6, "chars"), g.Byte('"')});
  g.set_root(root);
  return g;
}

// root ::= "a" dead | "b" [] | "c" ; dead ::= "d" dead   (pruned: only "c" remains)
inline Grammar WithDeadBranches() {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  const uint32_t dead = g.AddRule("dead");
  g.AddAlternative(dead, {g.Byte('d'), Grammar::Ref(dead)});
  g.AddAlternative(root, {g.Byte('a'), Grammar::Ref(dead)});
  g.AddAlternative(root, {g.Byte('b'), g.Bytes(ByteSet())});
  g.AddAlternative(root, {g.Byte('c')});
  g.set_root(root);
  return g;
}

// JSON pieces shared by the JSON grammars below, added to one Grammar.
struct JsonRules {
  Element ws;       // 0..max_ws bytes of [ \t\n\r]
  Element string;   // RFC 8259 string, UTF-8 checked, escapes
  Element number;   // RFC 8259 number
  Element integer;  // -?(0|[1-9][0-9]*)
  Element boolean;  // true | false
};

inline JsonRules AddJsonRules(Grammar& g, int max_ws, bool ascii_only = false) {
  JsonRules r;
  ByteSet ws_bytes;
  for (char c : {' ', '\t', '\n', '\r'}) ws_bytes.Add(static_cast<uint8_t>(c));
  r.ws = g.Repeat(g.Bytes(ws_bytes), 0, max_ws, "ws");
  ByteSet plain = ByteSet::Range(0x20, 0x21);  // printable ASCII but '"' and '\\'
  plain.AddRange(0x23, 0x5b);
  plain.AddRange(0x5d, 0x7f);
  const Element cont = g.Bytes(ByteSet::Range(0x80, 0xbf));
  std::vector<Sequence> chars = {{g.Bytes(plain)}};
  if (!ascii_only) {
    ByteSet e1 = ByteSet::Range(0xe1, 0xec);
    e1.AddRange(0xee, 0xef);
    chars.push_back({g.Bytes(ByteSet::Range(0xc2, 0xdf)), cont});
    chars.push_back({g.Byte(0xe0), g.Bytes(ByteSet::Range(0xa0, 0xbf)), cont});
    chars.push_back({g.Bytes(e1), cont, cont});
    chars.push_back({g.Byte(0xed), g.Bytes(ByteSet::Range(0x80, 0x9f)), cont});
    chars.push_back({g.Byte(0xf0), g.Bytes(ByteSet::Range(0x90, 0xbf)), cont, cont});
    chars.push_back({g.Bytes(ByteSet::Range(0xf1, 0xf3)), cont, cont, cont});
    chars.push_back({g.Byte(0xf4), g.Bytes(ByteSet::Range(0x80, 0x8f)), cont, cont});
  }
  ByteSet escaped;
  for (char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) escaped.Add(static_cast<uint8_t>(c));
  ByteSet hex = ByteSet::Range('0', '9');
  hex.AddRange('a', 'f');
  hex.AddRange('A', 'F');
  const Element h = g.Bytes(hex);
  const Element escape = g.Choice({{g.Bytes(escaped)}, {g.Byte('u'), h, h, h, h}}, "escape");
  chars.push_back({g.Byte('\\'), escape});
  const Element ch = g.Choice(std::move(chars), "char");
  r.string = g.Group({g.Byte('"'), g.Star(ch, "chars"), g.Byte('"')}, "string");

  const Element digit = g.Bytes(ByteSet::Range('0', '9'));
  const Element natural = g.Choice({{g.Byte('0')}, {g.Bytes(ByteSet::Range('1', '9')), g.Star(digit, "digits")}}, "natural");
  const Element minus = g.Optional(g.Byte('-'), "minus");
  r.integer = g.Group({minus, natural}, "integer");
  ByteSet e_bytes = ByteSet::Of('e');
  e_bytes.Add('E');
  ByteSet sign = ByteSet::Of('+');
  sign.Add('-');
  const Element frac = g.Optional(g.Group({g.Byte('.'), g.Plus(digit, "frac-digits")}, "frac"), "frac");
  const Element exp = g.Optional(
      g.Group({g.Bytes(e_bytes), g.Optional(g.Bytes(sign), "sign"), g.Plus(digit, "exp-digits")}, "exp"), "exp");
  r.number = g.Group({minus, natural, frac, exp}, "number");
  r.boolean = g.Choice({g.Literal("true"), g.Literal("false")}, "boolean");
  return r;
}

// Any JSON value (recursive objects and arrays), whitespace bounded by max_ws.
inline Grammar AnyJson(int max_ws = 16, bool ascii_only = false) {
  Grammar g;
  const JsonRules j = AddJsonRules(g, max_ws, ascii_only);
  const uint32_t value = g.AddRule("value");
  const Element v = Grammar::Ref(value);
  const Element member = g.Group({j.string, j.ws, g.Byte(':'), j.ws, v}, "member");
  const Element members = g.Group({member, j.ws, g.Star(g.Group({g.Byte(','), j.ws, member, j.ws}, "more-member"),
                                                        "more-members")},
                                  "members");
  const Element object = g.Group({g.Byte('{'), j.ws, g.Optional(members, "members"), g.Byte('}')}, "object");
  const Element items = g.Group(
      {v, j.ws, g.Star(g.Group({g.Byte(','), j.ws, v, j.ws}, "more-item"), "more-items")}, "items");
  const Element array = g.Group({g.Byte('['), j.ws, g.Optional(items, "items"), g.Byte(']')}, "array");
  for (Sequence alt : std::vector<Sequence>{{object}, {array}, {j.string}, {j.number}, {j.boolean}, g.Literal("null")})
    g.AddAlternative(value, std::move(alt));
  g.set_root(value);
  return g;
}

// A tool call as a JSON-Schema front end would compile it: fixed keys in
// order, typed values, an enum, an array of strings; whitespace bounded.
//   {"name": string, "arguments": {"location": string, "unit": "celsius" |
//    "fahrenheit", "days": integer, "tags": [string, ...]}}
inline Grammar ToolCallJson(int max_ws = 16) {
  Grammar g;
  const JsonRules j = AddJsonRules(g, max_ws);
  const auto key = [&](const char* name) {
    Sequence s = g.Literal(std::string("\"") + name + "\"");
    s.push_back(j.ws);
    s.push_back(g.Byte(':'));
    s.push_back(j.ws);
    return s;
  };
  const auto append = [](Sequence* to, const Sequence& more) { to->insert(to->end(), more.begin(), more.end()); };
  const Element unit = g.Choice({g.Literal("\"celsius\""), g.Literal("\"fahrenheit\"")}, "unit");
  const Element tags = g.Group(
      {g.Byte('['), j.ws,
       g.Optional(g.Group({j.string, j.ws, g.Star(g.Group({g.Byte(','), j.ws, j.string, j.ws}, "more-tag"), "more-tags")},
                          "tag-list"),
                  "tag-list"),
       g.Byte(']')},
      "tags");
  Sequence args = {g.Byte('{'), j.ws};
  append(&args, key("location"));
  append(&args, {j.string, j.ws, g.Byte(','), j.ws});
  append(&args, key("unit"));
  append(&args, {unit, j.ws, g.Byte(','), j.ws});
  append(&args, key("days"));
  append(&args, {j.integer, j.ws, g.Byte(','), j.ws});
  append(&args, key("tags"));
  append(&args, {tags, j.ws, g.Byte('}')});
  const Element arguments = g.Group(std::move(args), "arguments");
  const uint32_t root = g.AddRule("root");
  Sequence top = {g.Byte('{'), j.ws};
  append(&top, key("name"));
  append(&top, {j.string, j.ws, g.Byte(','), j.ws});
  append(&top, key("arguments"));
  append(&top, {arguments, j.ws, g.Byte('}')});
  g.AddAlternative(root, std::move(top));
  g.set_root(root);
  return g;
}

// {"name":string,"age":integer} with no whitespace: mostly forced bytes.
inline Grammar FixedKeys() {
  Grammar g;
  const JsonRules j = AddJsonRules(g, 0, /*ascii_only=*/true);
  const uint32_t root = g.AddRule("root");
  Sequence s = g.Literal("{\"name\":");
  s.push_back(j.string);
  const Sequence mid = g.Literal(",\"age\":");
  s.insert(s.end(), mid.begin(), mid.end());
  s.push_back(j.integer);
  s.push_back(g.Byte('}'));
  g.AddAlternative(root, std::move(s));
  g.set_root(root);
  return g;
}

// Valid documents of AnyJson(16): nesting, escapes, UTF-8, number forms,
// pretty-printed and compact.
inline std::vector<std::string> AnyJsonDocuments() {
  return {
      R"({"id": 1042, "name": "Grace Hopper", "tags": ["compiler", "navy"], "active": true, "score": -3.25e+2})",
      "{\n  \"model\": \"llama-3.1-8b\",\n  \"messages\": [\n    {\"role\": \"system\", \"content\": "
      "\"You are terse.\"},\n    {\"role\": \"user\", \"content\": \"Caf\u00e9 \\\"quoted\\\" \\u00e9t\u00e9 "
      "\xe2\x9c\x93\"}\n  ],\n  \"temperature\": 0.7,\n  \"stop\": null\n}",
      R"([[1, 2, [3, [4, [5, []]]]], {"a": {"b": {"c": {"d": [false, null, 0.5, 1E9]}}}}, "\n\t/"])",
      R"({"results":[{"url":"https://example.com/a?b=c&d=e","title":"Example \u2014 A","rank":1},{"url":"http://x.io","title":"","rank":2}],"total":2})",
  };
}

// Valid documents of ToolCallJson(16).
inline std::vector<std::string> ToolCallDocuments() {
  return {
      R"({"name": "get_weather", "arguments": {"location": "San Francisco, CA", "unit": "celsius", "days": 3, "tags": ["outdoor", "weekend"]}})",
      "{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"location\": \"M\xc3\xbcnchen\",\n    "
      "\"unit\": \"fahrenheit\",\n    \"days\": -1,\n    \"tags\": []\n  }\n}",
      R"({"name":"forecast","arguments":{"location":"Tokyo \"Shibuya\"","unit":"celsius","days":14,"tags":["a","b","c"]}})",
  };
}

}  // namespace floe::grammar::testing
