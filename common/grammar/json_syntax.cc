#include "common/grammar/json_syntax.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grammar/json_number_grammar.h"
#include "common/grammar/utf8_ranges.h"
#include "common/status/status_macros.h"

namespace floe::grammar {
namespace {

ByteSet Bytes(std::string_view chars) {
  ByteSet s;
  for (char c : chars) s.Add(static_cast<uint8_t>(c));
  return s;
}

// The JSON spelling of each character of `text`, as nlohmann's dump()
// writes it: short escapes where JSON has them, \u00xx for other control
// bytes, everything else raw. A byte that is not well-formed UTF-8 stands
// alone (callers validate names first).
std::vector<std::string> EncodedChars(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text[0]);
    std::string enc;
    size_t len = 1;
    switch (c) {
      case '"': enc = "\\\""; break;
      case '\\': enc = "\\\\"; break;
      case '\b': enc = "\\b"; break;
      case '\f': enc = "\\f"; break;
      case '\n': enc = "\\n"; break;
      case '\r': enc = "\\r"; break;
      case '\t': enc = "\\t"; break;
      default:
        if (c < 0x20) {
          enc = absl::StrFormat("\\u%04x", c);
        } else {
          const Utf8Decoded d = DecodeUtf8(text);
          len = d.length > 0 ? static_cast<size_t>(d.length) : 1;
          enc = std::string(text.substr(0, len));
        }
    }
    out.push_back(std::move(enc));
    text.remove_prefix(len);
  }
  return out;
}

ByteSet Without(const ByteSet& set, uint8_t b) {
  ByteSet out;
  for (int x = 0; x < 256; ++x)
    if (set.Has(static_cast<uint8_t>(x)) && x != b) out.Add(static_cast<uint8_t>(x));
  return out;
}

}  // namespace

JsonSyntax::JsonSyntax(Grammar* g, const JsonSchemaOptions& options)
    : g_(g), whitespace_(options.whitespace), max_whitespace_(std::clamp(options.max_whitespace, 0, 64)) {}

Element JsonSyntax::Ws() {
  if (!ws_) ws_ = g_->Repeat(g_->Bytes(Bytes(" \t\n\r")), 0, max_whitespace_, "ws");
  return *ws_;
}

void JsonSyntax::AppendWs(Sequence* seq) {
  if (whitespace_ == JsonWhitespace::kFlexible && max_whitespace_ > 0) seq->push_back(Ws());
}

void JsonSyntax::AppendItemSep(Sequence* seq) {
  AppendWs(seq);
  seq->push_back(g_->Byte(','));
  if (whitespace_ == JsonWhitespace::kCompact) seq->push_back(g_->Byte(' '));
  AppendWs(seq);
}

void JsonSyntax::AppendKeySep(Sequence* seq) {
  AppendWs(seq);
  seq->push_back(g_->Byte(':'));
  if (whitespace_ == JsonWhitespace::kCompact) seq->push_back(g_->Byte(' '));
  AppendWs(seq);
}

ByteSet JsonSyntax::RawAscii() const {
  ByteSet s;
  for (int b = 0x20; b <= 0x7f; ++b)
    if (b != '"' && b != '\\') s.Add(static_cast<uint8_t>(b));
  return s;
}

Element JsonSyntax::RawMultibyte() {
  if (!raw_multibyte_) raw_multibyte_ = AddCodePoints(g_, CodePointSet::Range(0x80, kMaxCodePoint), "utf8");
  return *raw_multibyte_;
}

Element JsonSyntax::EscapeTail() {
  if (!escape_tail_) {
    const Element hex = g_->Bytes(Bytes("0123456789abcdefABCDEF"));
    // \uD800..\uDFFF are surrogates: alone they are not text, and a pair
    // is one character, which would break minLength/maxLength counting.
    escape_tail_ = g_->Choice({{g_->Bytes(Bytes("\"\\/bfnrt"))},
                               {g_->Byte('u'), g_->Bytes(Bytes("0123456789abcABCeEfF")), hex, hex, hex},
                               {g_->Byte('u'), g_->Bytes(Bytes("dD")), g_->Bytes(Bytes("01234567")), hex, hex}},
                              "escape");
  }
  return *escape_tail_;
}

Element JsonSyntax::Char() {
  if (!char_) {
    char_ = g_->Choice({{g_->Bytes(RawAscii())}, {RawMultibyte()}, {g_->Byte('\\'), EscapeTail()}}, "char");
  }
  return *char_;
}

Element JsonSyntax::String(int min, int max) {
  Sequence seq{g_->Byte('"')};
  if (min == 0 && max < 0) {
    if (!chars_) chars_ = g_->Star(Char(), "chars");
    seq.push_back(*chars_);
  } else if (max != 0) {
    seq.push_back(g_->Repeat(Char(), min, max, "chars"));
  }
  seq.push_back(g_->Byte('"'));
  return g_->Group(std::move(seq), "string");
}

Element JsonSyntax::Key(std::string_view name) {
  std::string text = "\"";
  for (const std::string& c : EncodedChars(name)) text += c;
  text += '"';
  return g_->Group(g_->Literal(text), absl::StrCat("key-", std::string(name.substr(0, 32))));
}

Element JsonSyntax::KeyNotIn(const std::vector<std::string>& names) {
  struct Node {
    std::map<std::string, uint32_t> children;  // encoded character -> node
    bool terminal = false;
  };
  std::vector<Node> nodes(1);
  for (const std::string& name : names) {
    uint32_t at = 0;
    for (std::string& c : EncodedChars(name)) {
      auto it = nodes[at].children.find(c);
      if (it == nodes[at].children.end()) {
        nodes.push_back({});
        it = nodes[at].children.emplace(std::move(c), static_cast<uint32_t>(nodes.size() - 1)).first;
      }
      at = it->second;
    }
    nodes[at].terminal = true;
  }
  if (!chars_) chars_ = g_->Star(Char(), "chars");
  const Element rest = *chars_;
  // Children have larger ids than their parents: build bottom-up, no
  // recursion (a name may be thousands of characters long).
  std::vector<Element> rule(nodes.size());
  for (size_t n = nodes.size(); n-- > 0;) {
    const Node& node = nodes[n];
    std::vector<Sequence> alts;
    ByteSet ascii = RawAscii();
    bool multibyte_child = false, escaped_child = false, slash_child = false;
    for (const auto& [enc, child] : node.children) {
      Sequence s = g_->Literal(enc);
      s.push_back(rule[child]);
      alts.push_back(std::move(s));
      const uint8_t first = static_cast<uint8_t>(enc[0]);
      if (first >= 0x80) multibyte_child = true;
      if (first == '\\') escaped_child = true;
      if (enc == "/") slash_child = true;
      if (enc.size() == 1) ascii = Without(ascii, first);
    }
    if (!node.terminal) alts.push_back({});
    // Diverging here: a character no name continues with, then anything.
    if (!ascii.Empty()) alts.push_back({g_->Bytes(ascii), rest});
    if (!multibyte_child) alts.push_back({RawMultibyte(), rest});
    if (node.children.empty()) {
      alts.push_back({g_->Byte('\\'), EscapeTail(), rest});
    } else if (!escaped_child) {
      alts.push_back({g_->Byte('\\'), g_->Bytes(Bytes(slash_child ? "\"\\bfnrt" : "\"\\/bfnrt")), rest});
    }
    rule[n] = g_->Choice(std::move(alts), "other-key");
  }
  return g_->Group({g_->Byte('"'), rule[0], g_->Byte('"')}, "other-key");
}

Element JsonSyntax::Member(Element key, Element value, std::string_view name) {
  Sequence seq{key};
  AppendKeySep(&seq);
  seq.push_back(value);
  return g_->Group(std::move(seq), name);
}

Element JsonSyntax::Object(const std::vector<ObjectMember>& members, std::optional<Element> extra,
                           std::string_view name) {
  // Built from the end. more: what may follow once a member was written
  // (each item preceded by a separator; may be empty). first: a nonempty
  // member list from here on (nullopt: none exists).
  std::optional<Element> more, first;
  auto then_more = [&](Sequence s) {
    if (more) s.push_back(*more);
    return s;
  };
  if (extra) {
    Sequence sep_extra;
    AppendItemSep(&sep_extra);
    sep_extra.push_back(*extra);
    more = g_->Star(g_->Group(std::move(sep_extra), absl::StrCat(std::string(name), "-extra")), absl::StrCat(std::string(name), "-extra"));
    first = g_->Group(then_more({*extra}), absl::StrCat(std::string(name), "-extra"));
  }
  bool any_required = false;
  for (size_t i = members.size(); i-- > 0;) {
    const ObjectMember& m = members[i];
    any_required |= m.required;
    Sequence with_sep;
    AppendItemSep(&with_sep);
    with_sep.push_back(m.member);
    with_sep = then_more(std::move(with_sep));
    Sequence as_first = then_more({m.member});
    if (m.required) {
      more = g_->Group(std::move(with_sep), absl::StrCat(std::string(name), "-more"));
      first = g_->Group(std::move(as_first), absl::StrCat(std::string(name), "-first"));
    } else {
      std::vector<Sequence> more_alts{std::move(with_sep), more ? Sequence{*more} : Sequence{}};
      std::vector<Sequence> first_alts{std::move(as_first)};
      if (first) first_alts.push_back({*first});
      more = g_->Choice(std::move(more_alts), absl::StrCat(std::string(name), "-more"));
      first = g_->Choice(std::move(first_alts), absl::StrCat(std::string(name), "-first"));
    }
  }
  std::vector<Sequence> alts;
  Sequence open{g_->Byte('{')};
  AppendWs(&open);
  if (first) {
    Sequence s = open;
    s.push_back(*first);
    AppendWs(&s);
    s.push_back(g_->Byte('}'));
    alts.push_back(std::move(s));
  }
  if (!any_required) {
    open.push_back(g_->Byte('}'));
    alts.push_back(std::move(open));
  }
  return g_->Choice(std::move(alts), name);
}

std::optional<Element> JsonSyntax::Array(const std::vector<Element>& prefix, std::optional<Element> rest,
                                         int min, int max, std::string_view name) {
  const int k = static_cast<int>(prefix.size());
  if (!rest) max = max < 0 ? k : std::min(max, k);
  if (max >= 0 && min > max) return std::nullopt;
  auto item = [&](int i) { return i < k ? prefix[static_cast<size_t>(i)] : *rest; };
  // tail: the items from position `from` on, given `from` were written.
  const int from = std::max({k, min, 1});
  std::optional<Element> tail;
  if (rest && (max < 0 || max > from)) {
    Sequence sep_item;
    AppendItemSep(&sep_item);
    sep_item.push_back(*rest);
    tail = g_->Repeat(g_->Group(std::move(sep_item), absl::StrCat(std::string(name), "-item")), 0, max < 0 ? -1 : max - from,
                      absl::StrCat(std::string(name), "-items"));
  }
  for (int i = from - 1; i >= 1; --i) {
    std::vector<Sequence> alts;
    if (max < 0 || i < max) {
      Sequence s;
      AppendItemSep(&s);
      s.push_back(item(i));
      if (tail) s.push_back(*tail);
      alts.push_back(std::move(s));
    }
    if (i >= min) alts.push_back({});
    tail = g_->Choice(std::move(alts), absl::StrCat(std::string(name), "-at-", i));
  }
  std::vector<Sequence> alts;
  Sequence open{g_->Byte('[')};
  AppendWs(&open);
  if (max != 0) {
    Sequence s = open;
    s.push_back(item(0));
    if (tail) s.push_back(*tail);
    AppendWs(&s);
    s.push_back(g_->Byte(']'));
    alts.push_back(std::move(s));
  }
  if (min == 0) {
    open.push_back(g_->Byte(']'));
    alts.push_back(std::move(open));
  }
  return g_->Choice(std::move(alts), name);
}

absl::StatusOr<std::string> JsonSyntax::ScalarText(const nlohmann::ordered_json& value) {
  try {
    return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::ordered_json::exception&) {
    return absl::InvalidArgumentError("a string is not valid UTF-8");
  }
}

absl::StatusOr<Element> JsonSyntax::Value(const nlohmann::ordered_json& value, std::string_view name) {
  if (!value.is_object() && !value.is_array()) {
    FLOE_ASSIGN_OR_RETURN(const std::string text, ScalarText(value));
    return g_->Group(g_->Literal(text), name);
  }
  const bool object = value.is_object();
  Sequence seq{g_->Byte(object ? '{' : '[')};
  AppendWs(&seq);
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!first) AppendItemSep(&seq);
    first = false;
    if (object) {
      FLOE_ASSIGN_OR_RETURN(const std::string key, ScalarText(nlohmann::ordered_json(it.key())));
      for (const Element& e : g_->Literal(key)) seq.push_back(e);
      AppendKeySep(&seq);
    }
    FLOE_ASSIGN_OR_RETURN(const Element item, Value(it.value(), name));
    seq.push_back(item);
  }
  if (!first) AppendWs(&seq);
  seq.push_back(g_->Byte(object ? '}' : ']'));
  return g_->Group(std::move(seq), name);
}

Element JsonSyntax::AnyNumber() {
  if (!any_number_) any_number_ = AnyJsonNumber(g_);
  return *any_number_;
}

Element JsonSyntax::AnyInteger() {
  if (!any_integer_) any_integer_ = AnyJsonInteger(g_);
  return *any_integer_;
}

Element JsonSyntax::AnyValue() {
  if (any_value_) return *any_value_;
  const uint32_t value = g_->AddRule("value");
  any_value_ = Grammar::Ref(value);
  any_object_ = Object({}, Member(String(), *any_value_, "any-member"), "any-object");
  const std::optional<Element> array = Array({}, *any_value_, 0, -1, "any-array");
  for (Sequence alt : std::vector<Sequence>{{*any_object_}, {*array}, {String()}, {AnyNumber()},
                                            g_->Literal("true"), g_->Literal("false"), g_->Literal("null")})
    g_->AddAlternative(value, std::move(alt));
  return *any_value_;
}

Element JsonSyntax::AnyObject() {
  AnyValue();
  return *any_object_;
}

}  // namespace floe::grammar
