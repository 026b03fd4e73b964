// Fuzzes the JSON Schema front end (common/grammar/json_schema_compiler.h):
// the input is parsed as JSON the way the router parses a request
// (ParseUntrustedJson: nesting bounded) and compiled under options drawn
// from a hash of the input. Invariants: compiling ends (the limits bound the
// work) without a sanitizer report; a refusal is InvalidArgument with a
// message of bounded size; an accepted schema's grammar passes
// CheckIntegrity, stays within max_rules, and every document sampled from
// it is RFC 8259 JSON (checked by the recognizer below, which shares no code
// with the compiler) with no whitespace beyond the options' policy.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "common/grammar/json_schema_compiler.h"
#include "common/json/bounded_json.h"
#include "tests/common/grammar/grammar_sampler.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe {
namespace {

// RFC 8259, strictly (well-formed UTF-8, escapes, number syntax), with no
// limit on a number's range (nlohmann refuses 1e999; JSON does not).
// Counts the longest whitespace run between tokens.
class JsonRecognizer {
 public:
  explicit JsonRecognizer(std::string_view s) : s_(s) {}

  bool Document() { return Value(0) && i_ == s_.size(); }
  size_t longest_ws() const { return longest_ws_; }
  bool saw_ws() const { return saw_ws_; }

 private:
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void Ws() {
    const size_t start = i_;
    while (i_ < s_.size() && std::strchr(" \t\n\r", s_[i_]) != nullptr && s_[i_] != '\0') ++i_;
    longest_ws_ = std::max(longest_ws_, i_ - start);
    saw_ws_ |= i_ > start;
  }
  bool Digits() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  bool Value(int depth) {
    if (depth > 1000 || i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{' || c == '[') return Container(c == '{' ? '}' : ']', c == '{', depth);
    if (c == '"') return String();
    for (const char* lit : {"true", "false", "null"})
      if (s_.substr(i_, std::strlen(lit)) == lit) {
        i_ += std::strlen(lit);
        return true;
      }
    Eat('-');
    if (!Eat('0') && !(i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9' && Digits())) return false;
    if (Eat('.') && !Digits()) return false;
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      if (!Digits()) return false;
    }
    return true;
  }
  bool Container(char close, bool object, int depth) {
    ++i_;
    Ws();
    if (Eat(close)) return true;
    while (true) {
      if (object) {
        if (!String()) return false;
        Ws();
        if (!Eat(':')) return false;
        Ws();
      }
      if (!Value(depth + 1)) return false;
      Ws();
      if (Eat(close)) return true;
      if (!Eat(',')) return false;
      Ws();
    }
  }
  bool String() {
    if (!Eat('"')) return false;
    while (i_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (++i_ >= s_.size()) return false;
        const char e = s_[i_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k, ++i_)
            if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return false;
        } else if (std::strchr("\"\\/bfnrt", e) == nullptr || e == '\0') {
          return false;
        }
        continue;
      }
      if (!Utf8Char()) return false;
    }
    return false;
  }
  // One well-formed UTF-8 character (RFC 3629 table 3-7).
  bool Utf8Char() {
    const unsigned char b0 = static_cast<unsigned char>(s_[i_]);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 < 0x80) {
      n = 0;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 2;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 3;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    ++i_;
    for (int k = 0; k < n; ++k, ++i_) {
      if (i_ >= s_.size()) return false;
      const unsigned char b = static_cast<unsigned char>(s_[i_]);
      if (b < (k == 0 ? lo : 0x80) || b > (k == 0 ? hi : 0xBF)) return false;
    }
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  size_t longest_ws_ = 0;
  bool saw_ws_ = false;
};

}  // namespace
}  // namespace floe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe::grammar;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::ordered_json> schema = floe::ParseUntrustedJson(text);
  if (!schema.ok()) return 0;
  const size_t h = std::hash<std::string_view>()(text);
  JsonSchemaOptions options;
  options.whitespace = static_cast<JsonWhitespace>(h % 3);
  options.max_whitespace = static_cast<int>((h >> 2) % 5);
  options.strict = (h >> 5) & 1;
  options.additional_properties_default = (h >> 6) & 1;
  absl::StatusOr<Grammar> g = CompileJsonSchema(*schema, options);
  if (!g.ok()) {
    FUZZ_CHECK(g.status().code() == absl::StatusCode::kInvalidArgument, "%s", g.status().ToString().c_str());
    FUZZ_CHECK(g.status().message().size() <= 640, "%zu-byte message", g.status().message().size());
    return 0;
  }
  const absl::Status integrity = g->CheckIntegrity();
  FUZZ_CHECK(integrity.ok(), "%s", integrity.ToString().c_str());
  FUZZ_CHECK(g->rules().size() <= static_cast<size_t>(options.limits.max_rules), "%zu rules", g->rules().size());
  const floe::grammar::testing::GrammarSampler sampler(*g);
  std::mt19937_64 rng(h);
  for (int i = 0; i < 3; ++i) {
    const std::optional<std::string> doc = sampler.Sample(rng, 24, 1024, 1 << 16);
    if (!doc) continue;  // only huge documents exist (minItems of minItems)
    floe::JsonRecognizer json(*doc);
    FUZZ_CHECK(json.Document(), "sampled a non-JSON document: %s", doc->substr(0, 2000).c_str());
    if (options.whitespace == JsonWhitespace::kFlexible) {
      FUZZ_CHECK(json.longest_ws() <= static_cast<size_t>(options.max_whitespace), "whitespace run %zu",
                 json.longest_ws());
    } else if (options.whitespace == JsonWhitespace::kMinified) {
      FUZZ_CHECK(!json.saw_ws(), "whitespace in a minified document: %s", doc->substr(0, 2000).c_str());
    }
  }
  return 0;
}
