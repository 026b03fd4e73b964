#include "common/grammar/utf8_ranges.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace floe::grammar {

CodePointSet CodePointSet::Range(uint32_t lo, uint32_t hi) {
  CodePointSet s;
  s.Add(lo, hi);
  return s;
}

CodePointSet CodePointSet::FromRanges(std::vector<CodePointRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodePointRange& a, const CodePointRange& b) { return a.lo < b.lo; });
  // Merged ranges come out in order, so each Add appends (or grows the last).
  CodePointSet s;
  for (const CodePointRange& r : ranges) s.Add(r.lo, r.hi);
  return s;
}

void CodePointSet::Add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  // Surrogates are not characters: split around them.
  if (lo <= kSurrogateLast && hi >= kSurrogateFirst) {
    if (lo < kSurrogateFirst) Add(lo, kSurrogateFirst - 1);
    if (hi > kSurrogateLast) Add(kSurrogateLast + 1, hi);
    return;
  }
  // Insert, then merge overlapping or adjacent neighbours. Sets stay small
  // (a class has at most a few dozen ranges), so linear is fine.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                             [](const CodePointRange& r, uint32_t v) { return r.hi + 1 < v; });
  auto last = it;
  while (last != ranges_.end() && last->lo <= hi + 1) {
    lo = std::min(lo, last->lo);
    hi = std::max(hi, last->hi);
    ++last;
  }
  it = ranges_.erase(it, last);
  ranges_.insert(it, CodePointRange{lo, hi});
}

void CodePointSet::AddAll(const CodePointSet& other) {
  std::vector<CodePointRange> both = ranges_;
  both.insert(both.end(), other.ranges_.begin(), other.ranges_.end());
  *this = FromRanges(std::move(both));
}

CodePointSet CodePointSet::Complement() const {
  CodePointSet out;
  uint32_t next = 0;
  for (const CodePointRange& r : ranges_) {
    if (r.lo > next) out.Add(next, r.lo - 1);
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.Add(next, kMaxCodePoint);
  return out;
}

void CodePointSet::RemoveAscii(const ByteSet& bytes) {
  CodePointSet removed;
  for (uint32_t b = 0; b < 0x80; ++b)
    if (bytes.Has(static_cast<uint8_t>(b))) removed.Add(b);
  if (removed.Empty()) return;
  // A \ B == complement(complement(A) u B).
  CodePointSet c = Complement();
  c.AddAll(removed);
  *this = c.Complement();
}

bool CodePointSet::Has(uint32_t cp) const {
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), cp,
                             [](const CodePointRange& r, uint32_t v) { return r.hi < v; });
  return it != ranges_.end() && it->lo <= cp;
}

namespace {

int EncodedLength(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// The largest code point encoded in `n` bytes.
uint32_t MaxOfLength(int n) { return n == 1 ? 0x7F : n == 2 ? 0x7FF : n == 3 ? 0xFFFF : kMaxCodePoint; }

void SplitInto(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>* out) {
  if (lo > hi) return;
  if (lo <= kSurrogateLast && hi >= kSurrogateFirst) {
    if (lo < kSurrogateFirst) SplitInto(lo, kSurrogateFirst - 1, out);
    if (hi > kSurrogateLast) SplitInto(kSurrogateLast + 1, hi, out);
    return;
  }
  const int n = EncodedLength(lo);
  if (EncodedLength(hi) != n) {
    SplitInto(lo, MaxOfLength(n), out);
    SplitInto(MaxOfLength(n) + 1, hi, out);
    return;
  }
  // Within one length: for each continuation position i (the low 6*i
  // bits), if lo and hi differ above those bits, the bits must span their
  // full range at both ends, else split off the partial ends.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitInto(lo, lo | m, out);
        SplitInto((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitInto(lo, (hi & ~m) - 1, out);
        SplitInto(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  Utf8Sequence seq(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    seq[i] = {static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])};
  out->push_back(std::move(seq));
}

}  // namespace

std::vector<Utf8Sequence> Utf8Sequences(uint32_t lo, uint32_t hi) {
  std::vector<Utf8Sequence> out;
  SplitInto(lo, std::min(hi, kMaxCodePoint), &out);
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  auto put = [out](uint32_t b) { out->push_back(static_cast<char>(b)); };
  if (cp < 0x80) {
    put(cp);
  } else if (cp < 0x800) {
    put(0xC0 | (cp >> 6));
    put(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    put(0xE0 | (cp >> 12));
    put(0x80 | ((cp >> 6) & 0x3F));
    put(0x80 | (cp & 0x3F));
  } else {
    put(0xF0 | (cp >> 18));
    put(0x80 | ((cp >> 12) & 0x3F));
    put(0x80 | ((cp >> 6) & 0x3F));
    put(0x80 | (cp & 0x3F));
  }
}

Utf8Decoded DecodeUtf8(std::string_view text) {
  if (text.empty()) return {};
  const auto b0 = static_cast<uint8_t>(text[0]);
  if (b0 < 0x80) return {b0, 1};
  int n;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return {};
  }
  if (text.size() < static_cast<size_t>(n)) return {};
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    if ((b & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past the Unicode range.
  if (EncodedLength(cp) != n || (cp >= kSurrogateFirst && cp <= kSurrogateLast) || cp > kMaxCodePoint) return {};
  return {cp, n};
}

Element AddCodePoints(Grammar* g, const CodePointSet& set, std::string_view name) {
  // Sequences with the same continuation ranges differ only in their first
  // byte: merge those into one alternative whose first element is the
  // union, which keeps classes like `.` to a dozen alternatives.
  std::vector<std::pair<Utf8Sequence, ByteSet>> merged;  // (tail, first bytes), in first-seen order
  absl::flat_hash_map<std::string, size_t> by_tail;      // tail's bytes (lo, hi pairs) -> index
  for (const CodePointRange& r : set.ranges())
    for (const Utf8Sequence& seq : Utf8Sequences(r.lo, r.hi)) {
      std::string key;
      for (size_t i = 1; i < seq.size(); ++i) key += {static_cast<char>(seq[i].lo), static_cast<char>(seq[i].hi)};
      auto [it, added] = by_tail.try_emplace(std::move(key), merged.size());
      if (added) merged.push_back({Utf8Sequence(seq.begin() + 1, seq.end()), ByteSet()});
      merged[it->second].second.AddRange(seq[0].lo, seq[0].hi);
    }
  if (merged.empty()) return g->Bytes(ByteSet());
  if (merged.size() == 1 && merged[0].first.empty()) return g->Bytes(merged[0].second);
  std::vector<Sequence> alternatives;
  for (const auto& [tail, first] : merged) {
    Sequence alt{g->Bytes(first)};
    for (const Utf8ByteRange& r : tail) alt.push_back(g->Bytes(ByteSet::Range(r.lo, r.hi)));
    alternatives.push_back(std::move(alt));
  }
  return g->Choice(std::move(alternatives), name);
}

}  // namespace floe::grammar
