// The grammar IR every front end (GBNF, regex, JSON Schema) compiles to and
// the byte-level matcher runs: a context-free grammar over bytes.
//
// A rule is a list of alternatives; an alternative is a sequence of
// elements, each either a set of bytes (one byte from the set) or a
// reference to a rule. An empty alternative matches the empty string.
// Repetition is desugared into helper rules by the builder (right
// recursion), so the matcher sees only sequences and references. Unicode
// never appears here: front ends lower code points to UTF-8 byte sequences,
// which is what lets one matcher walk a byte-level BPE vocabulary.
//
// Restrictions the matcher relies on, enforced by CheckIntegrity(): every
// reference names a rule, the root exists, every rule has an alternative,
// and no rule is left-recursive (directly or through nullable prefixes),
// so expanding the leftmost reference always terminates.
//
// Value type; not thread-safe while being built, immutable and freely
// shared (const) once built.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace floe::grammar {

// A set of byte values: 256 bits.
class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet Of(uint8_t b);
  static ByteSet Range(uint8_t lo, uint8_t hi);  // inclusive
  static ByteSet All();

  bool Has(uint8_t b) const { return (bits_[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits_[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi);
  void AddAll(const ByteSet& other);
  ByteSet Complement() const;
  bool Empty() const;
  int Count() const;
  bool operator==(const ByteSet& o) const { return bits_ == o.bits_; }
  const std::array<uint64_t, 4>& bits() const { return bits_; }

 private:
  std::array<uint64_t, 4> bits_{};
};

struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  uint32_t index = 0;  // kBytes: into Grammar::byte_sets(); kRule: into Grammar::rules()
  bool operator==(const Element& o) const { return kind == o.kind && index == o.index; }
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;                   // unique within the grammar; for errors and ToGbnf()
  std::vector<Sequence> alternatives;  // at least one once built; {} (empty) matches ""
};

class Grammar {
 public:
  // Adds a rule with no alternatives yet and returns its id. A name already
  // taken gets a numeric suffix ("item" -> "item-2"), so front ends can
  // name helper rules after what they came from without clashes.
  uint32_t AddRule(std::string_view name);
  void AddAlternative(uint32_t rule, Sequence alternative);
  // Replaces alternative `index` of `rule`: for front ends that patch a
  // helper rule once the rest of the grammar is known (front_end.h).
  void SetAlternative(uint32_t rule, size_t index, Sequence alternative) {
    rules_[rule].alternatives[index] = std::move(alternative);
  }
  // The id of a byte set equal to `set`, added on first use (deduplicated).
  uint32_t InternBytes(const ByteSet& set);
  void set_root(uint32_t rule) { root_ = rule; }

  // Element constructors.
  Element Bytes(const ByteSet& set) { return {Element::Kind::kBytes, InternBytes(set)}; }
  Element Byte(uint8_t b) { return Bytes(ByteSet::Of(b)); }
  static Element Ref(uint32_t rule) { return {Element::Kind::kRule, rule}; }
  // The bytes of `text`, one element each.
  Sequence Literal(std::string_view text);

  // Repetition of `item` (an element: a byte set or a rule reference),
  // desugared into new right-recursive helper rules named after `name`;
  // each returns an element that refers to the helper (or `item` itself
  // for {1,1}). `max` < 0 means unbounded. Bounded repeats of n > 0 cost
  // O(n) rules; front ends refuse bounds past their own limit first.
  Element Star(Element item, std::string_view name);
  Element Plus(Element item, std::string_view name);
  Element Optional(Element item, std::string_view name);
  Element Repeat(Element item, int min, int max, std::string_view name);
  // A rule whose single alternative is `seq`, as an element (for grouping).
  Element Group(Sequence seq, std::string_view name);
  // A rule with one alternative per sequence, as an element.
  Element Choice(std::vector<Sequence> alternatives, std::string_view name);

  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  uint32_t root() const { return root_; }

  // OK, or FailedPrecondition naming the first violated restriction (see
  // the banner): a dangling reference, a missing root, a rule without
  // alternatives, a left-recursive rule (with the cycle's rule names).
  absl::Status CheckIntegrity() const;
  // Which rules can match the empty string (indexed by rule id).
  std::vector<bool> NullableRules() const;
  // GBNF text (llama.cpp syntax) of the grammar, root first: for logs,
  // errors and round-trip tests. Byte sets print as [..] classes with \xNN
  // escapes for bytes outside printable ASCII.
  std::string ToGbnf() const;

 private:
  std::vector<Rule> rules_;
  std::vector<ByteSet> byte_sets_;
  uint32_t root_ = UINT32_MAX;
  // Every rule name -> the next numeric suffix to try when it is asked for
  // again, so AddRule stays O(1) when a front end adds thousands of helpers
  // under one name (a maxLength of 4096 is 4096 "-upto" rules).
  absl::flat_hash_map<std::string, int> names_;
};

}  // namespace floe::grammar
