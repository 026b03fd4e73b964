// The UTF-8 range splitter and code point sets, against brute force: every
// code point's encoding, computed independently here.
#include "common/grammar/utf8_ranges.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/grammar/grammar_oracle.h"

namespace floe::grammar {
namespace {

using testing::OracleAccepts;

// v clamped into 0..kMaxCodePoint.
uint32_t Clamp(int64_t v) { return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, kMaxCodePoint)); }

bool IsScalar(uint32_t cp) { return cp <= kMaxCodePoint && (cp < kSurrogateFirst || cp > kSurrogateLast); }

// The textbook encoding, written out per length (independent of AppendUtf8).
std::string Encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s = {static_cast<char>(cp)};
  } else if (cp < 0x800) {
    s = {static_cast<char>(0xC0 + cp / 64), static_cast<char>(0x80 + cp % 64)};
  } else if (cp < 0x10000) {
    s = {static_cast<char>(0xE0 + cp / 4096), static_cast<char>(0x80 + cp / 64 % 64),
         static_cast<char>(0x80 + cp % 64)};
  } else {
    s = {static_cast<char>(0xF0 + cp / 262144), static_cast<char>(0x80 + cp / 4096 % 64),
         static_cast<char>(0x80 + cp / 64 % 64), static_cast<char>(0x80 + cp % 64)};
  }
  return s;
}

bool SequenceMatches(const Utf8Sequence& seq, const std::string& bytes) {
  if (seq.size() != bytes.size()) return false;
  for (size_t i = 0; i < seq.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b < seq[i].lo || b > seq[i].hi) return false;
  }
  return true;
}

// The sequences for [lo, hi] match exactly the encodings of its scalar
// values, each by exactly one sequence: every code point in `probe` is
// checked, and the sequences' total size (the product of their byte-range
// widths) equals the number of scalar values in the range, so they cannot
// match any other byte string either.
void ExpectExact(uint32_t lo, uint32_t hi, const std::vector<uint32_t>& probe) {
  SCOPED_TRACE(::testing::Message() << std::hex << "range " << lo << ".." << hi);
  const std::vector<Utf8Sequence> seqs = Utf8Sequences(lo, hi);
  uint64_t total = 0, scalars = 0;
  for (const Utf8Sequence& seq : seqs) {
    uint64_t n = 1;
    for (const Utf8ByteRange& r : seq) {
      ASSERT_LE(r.lo, r.hi);
      n *= r.hi - r.lo + 1u;
    }
    total += n;
  }
  scalars = hi - lo + 1u;
  const uint32_t s_lo = std::max(lo, kSurrogateFirst), s_hi = std::min(hi, kSurrogateLast);
  if (s_lo <= s_hi) scalars -= s_hi - s_lo + 1u;
  EXPECT_EQ(total, scalars);
  for (uint32_t cp : probe) {
    if (!IsScalar(cp)) continue;
    const std::string bytes = Encode(cp);
    int matches = 0;
    for (const Utf8Sequence& seq : seqs) matches += SequenceMatches(seq, bytes);
    ASSERT_EQ(matches, cp >= lo && cp <= hi ? 1 : 0) << "code point " << cp;
  }
}

TEST(Utf8RangesTest, EncodeAndDecodeEveryCodePoint) {
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (!IsScalar(cp)) continue;
    std::string out;
    AppendUtf8(cp, &out);
    ASSERT_EQ(out, Encode(cp)) << cp;
    const Utf8Decoded d = DecodeUtf8(out);
    ASSERT_EQ(d.code_point, cp);
    ASSERT_EQ(d.length, static_cast<int>(out.size()));
  }
}

TEST(Utf8RangesTest, DecodeRefusesMalformedSequences) {
  for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xF5\x80\x80\x80", "\xFF", "\xC3", "\xE4\xB8", "\xC3\x28"})
    EXPECT_EQ(DecodeUtf8(bad).length, 0) << ::testing::PrintToString(std::string(bad));
}

TEST(Utf8RangesTest, SplitsEveryBoundaryRangeExactly) {
  // Every code point is probed for these, so they are exhaustive.
  std::vector<uint32_t> all;
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) all.push_back(cp);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0, kMaxCodePoint}, {0, 0x7F},        {0x80, 0x7FF},     {0x7F, 0x80},     {0x7FF, 0x800},
      {0x800, 0xFFFF},    {0xFFFF, 0x10000}, {0xD7FF, 0xE000}, {0xD800, 0xDFFF}, {0x10000, kMaxCodePoint},
      {0x41, 0x10FFFE},   {0x3FF, 0x1001},   {0x1F600, 0x1F64F}, {0x4E00, 0x9FFF}, {0xE9, 0xE9}};
  for (const auto& [lo, hi] : ranges) ExpectExact(lo, hi, all);
}

TEST(Utf8RangesTest, SplitsRandomRangesExactly) {
  std::mt19937 rng(7);
  // Ends drawn near the encoding boundaries as often as anywhere.
  const std::vector<uint32_t> edges = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF,
                                       0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, kMaxCodePoint};
  auto pick = [&]() -> uint32_t {
    if (rng() % 2) {
      return Clamp(int64_t{edges[rng() % edges.size()]} + static_cast<int>(rng() % 129) - 64);
    }
    return rng() % (kMaxCodePoint + 1);
  };
  for (int i = 0; i < 300; ++i) {
    uint32_t lo = pick(), hi = pick();
    if (lo > hi) std::swap(lo, hi);
    // Probe around both ends, the encoding edges and at random.
    std::vector<uint32_t> probe;
    for (uint32_t c : {lo, hi})
      for (int d = -70; d <= 70; ++d) probe.push_back(Clamp(int64_t{c} + d));
    for (uint32_t e : edges)
      for (int d = -2; d <= 2; ++d) probe.push_back(Clamp(int64_t{e} + d));
    for (int k = 0; k < 2000; ++k) probe.push_back(rng() % (kMaxCodePoint + 1));
    ExpectExact(lo, hi, probe);
  }
}

TEST(CodePointSetTest, AddMergesAndComplementInverts) {
  CodePointSet s;
  s.Add('a', 'c');
  s.Add('e', 'g');
  s.Add('d');  // bridges the two
  s.Add(0xD000, 0xE000);  // the surrogates drop out
  ASSERT_EQ(s.ranges().size(), 3u);
  EXPECT_EQ(s.ranges()[0], (CodePointRange{'a', 'g'}));
  EXPECT_EQ(s.ranges()[1], (CodePointRange{0xD000, 0xD7FF}));
  EXPECT_EQ(s.ranges()[2], (CodePointRange{0xE000, 0xE000}));
  const CodePointSet c = s.Complement();
  for (uint32_t cp : {0u, 0x60u, 0x61u, 0x67u, 0x68u, 0xCFFFu, 0xD000u, 0xD800u, 0xE000u, 0xE001u, kMaxCodePoint})
    EXPECT_EQ(c.Has(cp), IsScalar(cp) && !s.Has(cp)) << cp;
  CodePointSet back = c.Complement();
  EXPECT_EQ(back.ranges(), s.ranges());
  EXPECT_TRUE(CodePointSet::All().Complement().Empty());
}

TEST(CodePointSetTest, RemoveAsciiDropsOnlyAsciiBytes) {
  CodePointSet s = CodePointSet::Range(0, 0x100);
  ByteSet drop = ByteSet::Range(0, 0x1F);
  drop.Add('"');
  drop.Add(0xE9);  // not a character: ignored
  s.RemoveAscii(drop);
  EXPECT_FALSE(s.Has(0));
  EXPECT_FALSE(s.Has('"'));
  EXPECT_TRUE(s.Has(' '));
  EXPECT_TRUE(s.Has(0xE9));
  EXPECT_TRUE(s.Has(0x100));
}

// A set lowered to grammar rules matches exactly its characters' bytes.
TEST(CodePointSetTest, AddCodePointsMatchesExactlyTheEncodings) {
  std::mt19937 rng(11);
  for (int i = 0; i < 40; ++i) {
    CodePointSet set;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
      const uint32_t lo = rng() % 2 ? rng() % 0x3000 : rng() % (kMaxCodePoint + 1);
      set.Add(lo, std::min<uint32_t>(kMaxCodePoint, lo + rng() % 0x2000));
    }
    if (i % 3 == 0) set = set.Complement();
    Grammar g;
    const uint32_t root = g.AddRule("root");
    g.AddAlternative(root, {AddCodePoints(&g, set, "chars")});
    g.set_root(root);
    ASSERT_TRUE(g.CheckIntegrity().ok());
    for (int k = 0; k < 300; ++k) {
      uint32_t cp = rng() % (kMaxCodePoint + 1);
      if (k % 2 && !set.ranges().empty()) {
        const CodePointRange& r = set.ranges()[rng() % set.ranges().size()];
        cp = Clamp(int64_t{r.lo} + static_cast<int>(rng() % 5) - 2);
      }
      if (!IsScalar(cp)) continue;
      ASSERT_EQ(OracleAccepts(g, Encode(cp)), set.Has(cp)) << std::hex << cp;
    }
    EXPECT_FALSE(OracleAccepts(g, ""));
    EXPECT_FALSE(OracleAccepts(g, "\xED\xA0\x80"));  // an encoded surrogate
  }
}

}  // namespace
}  // namespace floe::grammar
