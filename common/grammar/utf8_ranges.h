// Unicode for the byte-level grammar IR: sets of code points, and their
// lowering to UTF-8 byte sequences. Shared by the GBNF and regex front ends
// (and usable by any front end that speaks in characters).
//
// Only Unicode scalar values exist here: 0..0x10FFFF without the surrogates
// 0xD800..0xDFFF, which have no UTF-8 encoding. Every set is normalized to
// sorted, disjoint, non-adjacent ranges of scalar values.
//
// Value types and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/grammar/grammar.h"

namespace floe::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr uint32_t kSurrogateFirst = 0xD800;
inline constexpr uint32_t kSurrogateLast = 0xDFFF;

struct CodePointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;  // inclusive
  bool operator==(const CodePointRange& o) const { return lo == o.lo && hi == o.hi; }
};

class CodePointSet {
 public:
  CodePointSet() = default;
  static CodePointSet Of(uint32_t cp) { return Range(cp, cp); }
  static CodePointSet Range(uint32_t lo, uint32_t hi);
  static CodePointSet All() { return Range(0, kMaxCodePoint); }
  // The union of `ranges` (any order, overlapping or not; surrogates
  // dropped) in O(n log n): for classes with many members, where Add one
  // by one would be quadratic.
  static CodePointSet FromRanges(std::vector<CodePointRange> ranges);

  // Adds [lo, hi] (inclusive; clamped to kMaxCodePoint; surrogates dropped).
  void Add(uint32_t lo, uint32_t hi);
  void Add(uint32_t cp) { Add(cp, cp); }
  void AddAll(const CodePointSet& other);
  // Every scalar value not in this set.
  CodePointSet Complement() const;
  // Removes the ASCII bytes of `bytes` (bytes >= 0x80 are not characters
  // and are ignored).
  void RemoveAscii(const ByteSet& bytes);

  bool Empty() const { return ranges_.empty(); }
  bool Has(uint32_t cp) const;
  // The single code point, if the set has exactly one.
  bool IsSingle() const { return ranges_.size() == 1 && ranges_[0].lo == ranges_[0].hi; }
  const std::vector<CodePointRange>& ranges() const { return ranges_; }

 private:
  std::vector<CodePointRange> ranges_;
};

// One UTF-8 byte-range sequence: the strings b0 b1 .. bn-1 with each byte
// in its range. n is 1..4.
struct Utf8ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;
  bool operator==(const Utf8ByteRange& o) const { return lo == o.lo && hi == o.hi; }
};
using Utf8Sequence = std::vector<Utf8ByteRange>;

// Sequences whose union is exactly the UTF-8 encodings of the scalar values
// in [lo, hi] (surrogates skipped), disjoint, in increasing order of the
// code points they cover. The classic splitting (RE2, Rust's utf8-ranges):
// cut the range where the encoded length changes, then where a
// continuation byte would not span its full 0x80..0xBF, so each piece is a
// product of byte ranges.
std::vector<Utf8Sequence> Utf8Sequences(uint32_t lo, uint32_t hi);

// Appends the UTF-8 encoding of the scalar value `cp`.
void AppendUtf8(uint32_t cp, std::string* out);

// Decodes one UTF-8 scalar value from the front of `text`: its code point
// and length, or length 0 when the bytes are not well-formed UTF-8
// (overlong, surrogate, past 0x10FFFF, truncated).
struct Utf8Decoded {
  uint32_t code_point = 0;
  int length = 0;
};
Utf8Decoded DecodeUtf8(std::string_view text);

// An element matching exactly one character of `set` (its UTF-8 bytes):
// a byte set when every character is one byte, else a rule named `name`
// with one alternative for the single-byte part and one per multi-byte
// sequence. An empty set gives the empty byte set (matches nothing).
Element AddCodePoints(Grammar* g, const CodePointSet& set, std::string_view name);

}  // namespace floe::grammar
