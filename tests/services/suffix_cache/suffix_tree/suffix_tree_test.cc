#include "services/suffix_cache/suffix_tree/suffix_tree.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

using Str = std::vector<int32_t>;

// Brute force: every substring of length <= max_depth of every live
// sequence, with its number of occurrences.
std::map<Str, int64_t> Oracle(const std::map<int32_t, Str>& seqs, int max_depth) {
  std::map<Str, int64_t> counts;
  for (const auto& [id, s] : seqs) {
    for (size_t start = 0; start < s.size(); ++start) {
      Str w;
      for (size_t i = start; i < s.size() && static_cast<int>(w.size()) < max_depth; ++i) {
        w.push_back(s[i]);
        ++counts[w];
      }
    }
  }
  return counts;
}

void ExpectMatchesOracle(const SuffixTree& tree, const std::map<int32_t, Str>& seqs) {
  ASSERT_TRUE(tree.CheckIntegrity().ok()) << tree.CheckIntegrity();
  const std::map<Str, int64_t> want = Oracle(seqs, tree.max_depth());
  std::map<Str, int64_t> got;
  for (auto& [path, count] : tree.AllPaths()) {
    ASSERT_TRUE(got.emplace(path, count).second) << "path listed twice";
  }
  ASSERT_EQ(got, want);
}

int64_t OracleCount(const std::map<Str, int64_t>& counts, const Str& w) {
  auto it = counts.find(w);
  return it == counts.end() ? 0 : it->second;
}

// Checks a path draft against the raw counts: a valid match, each token a
// most frequent continuation, probabilities as the reference computes them,
// and a stop for the right reason.
void ExpectValidPathDraft(const Draft& d, const Str& context, const DraftParams& p,
                          const std::map<Str, int64_t>& counts, int max_depth) {
  if (d.token_ids.empty()) return;
  ASSERT_GE(d.match_len, 1);
  ASSERT_LT(d.match_len, static_cast<int>(context.size()));
  Str w(context.end() - d.match_len, context.end());
  ASSERT_GT(OracleCount(counts, w), 0);
  const int budget = std::min(p.max_spec_tokens,
                              static_cast<int>(d.match_len * p.max_spec_factor +
                                               p.max_spec_offset + 1e-6));
  ASSERT_LE(static_cast<int>(d.token_ids.size()), budget);
  float prob = 1.0f;
  float score = 0.0f;
  for (size_t i = 0; i < d.token_ids.size(); ++i) {
    int64_t best = 0;
    for (int32_t t = 0; t < 16; ++t) {
      Str x = w;
      x.push_back(t);
      if (static_cast<int>(x.size()) <= max_depth) best = std::max(best, OracleCount(counts, x));
    }
    Str next = w;
    next.push_back(d.token_ids[i]);
    const int64_t c = OracleCount(counts, next);
    ASSERT_EQ(c, best) << "token " << i << " is not a most frequent continuation";
    prob *= static_cast<float>(c) / static_cast<float>(OracleCount(counts, w));
    ASSERT_EQ(prob, d.probs[i]) << "token " << i;
    ASSERT_EQ(d.parents[i], static_cast<int32_t>(i) - 1);
    score += prob;
    w = next;
  }
  EXPECT_EQ(score, d.score);
}

TEST(SuffixTreeTest, CountsSmallExample) {
  SuffixTree tree(4);
  tree.Extend(7, {1, 2, 1, 2, 3});
  EXPECT_EQ(tree.CountOccurrences({1, 2}), 2);
  EXPECT_EQ(tree.CountOccurrences({2}), 2);
  EXPECT_EQ(tree.CountOccurrences({1, 2, 3}), 1);
  EXPECT_EQ(tree.CountOccurrences({1, 2, 1, 2, 3}), 0);  // longer than max_depth
  EXPECT_EQ(tree.CountOccurrences({3, 1}), 0);
  EXPECT_TRUE(tree.CheckIntegrity().ok());
  EXPECT_TRUE(tree.Remove(7).ok());
  EXPECT_EQ(tree.num_tokens(), 0);
  EXPECT_EQ(tree.num_nodes(), 1);
  EXPECT_TRUE(tree.CheckIntegrity().ok());
  EXPECT_EQ(tree.Remove(7).code(), absl::StatusCode::kNotFound);
}

TEST(SuffixTreeTest, PathDraftFollowsMostFrequent) {
  SuffixTree tree(16);
  tree.Extend(0, {5, 6, 7, 5, 6, 7, 5, 6, 8});
  DraftParams p;
  p.max_spec_tokens = 4;
  const Str context = {9, 5, 6};
  Draft d = tree.Speculate(context, p);
  // "5 6" is followed by 7 twice and by 8 once.
  ASSERT_FALSE(d.token_ids.empty());
  EXPECT_EQ(d.token_ids[0], 7);
  EXPECT_EQ(d.match_len, 2);
  EXPECT_FLOAT_EQ(d.probs[0], 2.0f / 3.0f);
}

TEST(SuffixTreeTest, ExtendPastDepthKeepsCopying) {
  SuffixTree tree(4);
  Str s;
  for (int i = 0; i < 20; ++i) s.push_back(100 + i);
  tree.Extend(0, s);
  DraftParams p;
  p.max_spec_tokens = 8;
  const Str context = {0, 103, 104, 105};
  Draft capped = tree.Speculate(context, p);
  // Match 3 leaves room for 1 token; match 2 for 2, which scores higher.
  EXPECT_EQ(capped.token_ids, (Str{106, 107}));
  p.extend_past_depth = true;
  Draft lifted = tree.Speculate(context, p);
  ASSERT_EQ(lifted.token_ids.size(), 3u);  // budget = match length 3
  EXPECT_EQ(lifted.token_ids, (Str{106, 107, 108}));
}

// score_exponent 1.5: a draft of surer tokens beats a longer match whose
// continuation was seen once each way.
TEST(SuffixTreeTest, ScoreExponentPrefersSurerTokens) {
  constexpr int32_t a = 1, b = 2, c = 3, x = 4, d = 5, g = 6, y = 7, e = 8, h = 9, q = 10,
                    r = 11, z = 12;
  SuffixTree tree(64);
  tree.Extend(0, {a, b, c, x, d, g});
  tree.Extend(1, {a, b, c, y, e, h});
  for (int s = 2; s < 8; ++s) tree.Extend(s, {q, b, c, x, d});
  for (int s = 8; s < 10; ++s) tree.Extend(s, {r, b, c, y, e});
  DraftParams p;
  p.max_spec_tokens = 8;
  const Str context = {z, a, b, c};
  // "a b c" (budget 3): x or y at 1/2, three tokens, score 1.5. "b c"
  // (budget 2): x at 7/10 then d, score 1.4.
  Draft plain = tree.Speculate(context, p);
  EXPECT_EQ(plain.match_len, 3);
  EXPECT_EQ(plain.token_ids.size(), 3u);
  EXPECT_FLOAT_EQ(plain.score, 1.5f);
  // Exponent 1.5: 3 * 0.5^1.5 = 1.06 against 2 * 0.7^1.5 = 1.17.
  p.score_exponent = 1.5f;
  Draft sure = tree.Speculate(context, p);
  EXPECT_EQ(sure.match_len, 2);
  EXPECT_EQ(sure.token_ids, (Str{x, d}));
  EXPECT_NEAR(sure.score, 2.0 * std::pow(0.7, 1.5), 1e-5);
  EXPECT_FLOAT_EQ(sure.probs[0], 0.7f);  // probabilities stay path probabilities
}

// confident_min_support: past the match-length budget only while every
// continuation seen agrees and enough occurrences back the next token.
TEST(SuffixTreeTest, SupportedExtensionNeedsAgreeingOccurrences) {
  // `copies` times "1 2 3 4 5 6 7 8 9"; with `diverge`, the last copy has
  // 60 in place of 6.
  auto tree_of = [](int copies, bool diverge) {
    Str s;
    for (int c = 0; c < copies; ++c) {
      for (int32_t t = 1; t <= 9; ++t) s.push_back(diverge && c == copies - 1 && t == 6 ? 60 : t);
    }
    auto tree = std::make_unique<SuffixTree>(64);
    tree->Extend(0, s);
    return tree;
  };
  DraftParams p;
  p.max_spec_tokens = 6;
  const Str context = {0, 1, 2};  // match "1 2": budget 2
  p.confident_min_support = 3;
  // Three agreeing occurrences: must extend to max_spec_tokens.
  EXPECT_EQ(tree_of(3, false)->Speculate(context, p).token_ids, (Str{3, 4, 5, 6, 7, 8}));
  // Two: must not.
  EXPECT_EQ(tree_of(2, false)->Speculate(context, p).token_ids, (Str{3, 4}));
  // Three, but only two agree on the token after 5: up to 5.
  EXPECT_EQ(tree_of(3, true)->Speculate(context, p).token_ids, (Str{3, 4, 5}));
  // Support 2 lets 6 through on count, but its probability (2/3) is not
  // unanimous.
  p.confident_min_support = 2;
  EXPECT_EQ(tree_of(3, true)->Speculate(context, p).token_ids, (Str{3, 4, 5}));
  p.confident_min_support = 0;  // off: the budget
  EXPECT_EQ(tree_of(3, false)->Speculate(context, p).token_ids, (Str{3, 4}));
}

// Random appends (with copied spans, to make repeats), removals and
// finishes over a tiny vocabulary; after every operation the tree must pass
// its own check and agree with the brute-force recount.
TEST(SuffixTreeTest, RandomOperationsMatchOracle) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 120; ++round) {
    const int max_depth = std::vector<int>{1, 2, 3, 4, 6, 9}[round % 6];
    // Mostly tiny vocabularies (many repeats); some wide ones so that nodes
    // outgrow the scanned sibling list and move to the edge table.
    const int vocab = round % 5 == 4 ? 14 : 2 + round % 4;
    SuffixTree tree(max_depth);
    std::map<int32_t, Str> seqs;
    std::map<int32_t, bool> finished;
    int32_t next_id = 0;
    for (int op = 0; op < 160; ++op) {
      const int kind = rng() % 10;
      if (kind < 7 || seqs.empty()) {
        int32_t id;
        std::vector<int32_t> live;
        for (auto& [i, s] : seqs) {
          if (!finished[i]) live.push_back(i);
        }
        if (live.empty() || rng() % 5 == 0) {
          id = next_id++;
        } else {
          id = live[rng() % live.size()];
        }
        Str add;
        if (!seqs.empty() && rng() % 2 == 0) {  // copy a span of some sequence
          const Str& src = std::next(seqs.begin(), rng() % seqs.size())->second;
          if (!src.empty()) {
            const size_t a = rng() % src.size();
            const size_t n = 1 + rng() % 6;
            for (size_t i = a; i < src.size() && i < a + n; ++i) add.push_back(src[i]);
          }
        }
        if (add.empty()) add.push_back(static_cast<int32_t>(rng() % vocab));
        tree.Extend(id, add);
        Str& s = seqs[id];
        s.insert(s.end(), add.begin(), add.end());
      } else if (kind < 9) {
        auto it = std::next(seqs.begin(), rng() % seqs.size());
        ASSERT_TRUE(tree.Remove(it->first).ok());
        finished.erase(it->first);
        seqs.erase(it);
      } else {
        auto it = std::next(seqs.begin(), rng() % seqs.size());
        tree.Finish(it->first);
        finished[it->first] = true;
      }
      ASSERT_NO_FATAL_FAILURE(ExpectMatchesOracle(tree, seqs))
          << "round " << round << " op " << op;
      if (seqs.empty()) continue;
      // Drafts: valid against the counts, and the same with and without
      // the active-suffix shortcut.
      const auto counts = Oracle(seqs, max_depth);
      for (const auto& [id, s] : seqs) {
        if (s.size() < 2) continue;
        DraftParams p;
        p.max_spec_tokens = 1 + rng() % 6;
        p.max_spec_factor = (rng() % 2) ? 1.0f : 0.5f;
        p.max_spec_offset = static_cast<float>(rng() % 3);
        p.min_token_prob = (rng() % 2) ? 0.1f : 0.4f;
        const size_t take = std::min<size_t>(s.size(), max_depth);
        const Str context(s.end() - take, s.end());
        const Draft plain = tree.Speculate(context, p);
        const Draft hinted = tree.Speculate(context, p, id);
        ASSERT_EQ(plain.token_ids, hinted.token_ids);
        ASSERT_EQ(plain.probs, hinted.probs);
        ASSERT_EQ(plain.match_len, hinted.match_len);
        ASSERT_NO_FATAL_FAILURE(ExpectValidPathDraft(plain, context, p, counts, max_depth));
      }
    }
  }
}

// A score to beat only prunes: when the best draft beats it, the same draft
// comes back (tokens, probabilities, match, score); when not, an empty one.
TEST(SuffixTreeTest, MustBeatKeepsTheBestDraftOrReturnsNone) {
  std::mt19937 rng(99);
  int beaten = 0, kept = 0;
  for (int round = 0; round < 120; ++round) {
    const int max_depth = std::vector<int>{4, 8, 16, 64}[round % 4];
    // 4 tokens: ties everywhere; 50: long unanimous copies (extensions).
    const int vocab = round % 2 ? 4 : 50;
    SuffixTree tree(max_depth);
    std::vector<Str> seqs;
    for (int id = 0; id < 12; ++id) {
      Str s;
      while (s.size() < 40) {
        if (!seqs.empty() && rng() % 2 == 0) {  // copy a span: repeats and ties
          const Str& src = seqs[rng() % seqs.size()];
          const size_t a = rng() % src.size();
          for (size_t i = a; i < src.size() && i < a + 1 + rng() % 12; ++i) s.push_back(src[i]);
        } else {
          s.push_back(static_cast<int32_t>(rng() % vocab));
        }
      }
      tree.Extend(id, s);
      if (id % 3 != 0) tree.Finish(id);
      seqs.push_back(s);
    }
    for (int q = 0; q < 30; ++q) {
      DraftParams p;
      p.max_spec_tokens = 1 + rng() % 16;
      p.use_tree_spec = rng() % 4 == 0;
      p.extend_past_depth = rng() % 2 == 0;
      // The extensions past the budget (local-tree options) too: a floor
      // must never cut a match whose extension could beat it.
      if (rng() % 2 == 0) p.confident_min_support = 2;
      if (rng() % 2 == 0) p.confident_prob = 0.5f;
      if (rng() % 3 == 0) p.score_exponent = 1.5f;
      if (rng() % 2 == 0) p.max_spec_factor = 0.5f;
      const Str& s = seqs[rng() % seqs.size()];
      const size_t end = 2 + rng() % (s.size() - 1);
      const Str context(s.begin() + (end > static_cast<size_t>(max_depth) ? end - max_depth : 0), s.begin() + end);
      const int32_t hint = rng() % 2 ? static_cast<int32_t>(&s - seqs.data()) : -1;
      const Draft full = tree.Speculate(context, p, end == s.size() ? hint : -1);
      for (float must_beat : {0.0f, 0.5f, full.score - 0.25f, full.score, full.score + 1.0f}) {
        if (must_beat < 0) continue;
        const Draft d = tree.Speculate(context, p, end == s.size() ? hint : -1, must_beat);
        if (full.score > must_beat) {
          ++kept;
          ASSERT_EQ(d.token_ids, full.token_ids);
          ASSERT_EQ(d.parents, full.parents);
          ASSERT_EQ(d.probs, full.probs);
          ASSERT_EQ(d.match_len, full.match_len);
          ASSERT_EQ(d.score, full.score);
        } else {
          ++beaten;
          ASSERT_TRUE(d.token_ids.empty());
          ASSERT_EQ(d.score, 0.0f);
        }
      }
    }
  }
  EXPECT_GT(kept, 500);
  EXPECT_GT(beaten, 500);
}

// The search by its definition, on single-match drafts: every match length
// from the longest occurring tail down, each drafted in full; the best score
// wins, the longer match on ties; a shorter match is not tried once the best
// reaches its budget (the confident extension's tokens included, the
// supported extension's not). With `must_beat`, a best scoring no more
// gives an empty draft.
Draft SearchByDefinition(const SuffixTree& tree, const Str& context, const DraftParams& p, const Str* hinted,
                         float must_beat) {
  const int32_t len = static_cast<int32_t>(context.size());
  // The hinted sequence's own tail: the matches it covers are "own".
  int32_t own_upto = 0;
  if (hinted != nullptr) {
    const int32_t active = std::min<int32_t>(static_cast<int32_t>(hinted->size()), tree.max_depth());
    while (own_upto < std::min(active, len) && context[len - 1 - own_upto] == (*hinted)[hinted->size() - 1 - own_upto]) {
      ++own_upto;
    }
  }
  int32_t m_max = 0;
  while (m_max + 1 < len && tree.CountOccurrences(Str(context.end() - (m_max + 1), context.end())) > 0) ++m_max;
  const int confident_min = p.confident_min_match >= 0 ? p.confident_min_match : p.max_spec_tokens / 3;
  Draft best;
  bool found = false;
  for (int32_t m = m_max; m >= 1; --m) {
    const int budget = std::max(0, std::min(p.max_spec_tokens, static_cast<int>(m * p.max_spec_factor +
                                                                                 p.max_spec_offset + 1e-6)));
    const bool confident = p.confident_prob > 0.0f && m >= confident_min;
    const int bound = confident ? std::max(budget, p.max_spec_tokens) : budget;
    if (found && p.max_spec_factor >= 0 && best.score >= static_cast<float>(bound)) break;
    const Draft d = tree.DraftForMatch(context, m, p, p.discount_own_suffix && m <= own_upto);
    if (!found || d.score > best.score) {
      best = d;
      found = true;
    }
  }
  if (must_beat >= 0 && !(found && best.score > must_beat)) return Draft();
  return best;
}

// Speculate's shortcuts (hinted matches, skipped match lengths, walks
// stopped once they cannot win, the longest matches searched last and
// derived from shorter ones) against the plain search: the same draft, token
// for token, for every option, at depths where the tree's end cuts drafts.
std::string Describe(const DraftParams& p, float must_beat, const Draft& got, const Draft& want) {
  std::ostringstream out;
  out << "max_spec_tokens " << p.max_spec_tokens << " factor " << p.max_spec_factor << " offset " << p.max_spec_offset
      << " min_token_prob " << p.min_token_prob << " extend " << p.extend_past_depth << " own "
      << p.discount_own_suffix << " confident " << p.confident_prob << "/" << p.confident_min_match << " support "
      << p.confident_min_support << " exponent " << p.score_exponent << " must_beat " << must_beat
      << "; got match " << got.match_len << " score " << got.score << ", want match " << want.match_len
      << " score " << want.score;
  return out.str();
}

TEST(SuffixTreeTest, SpeculateEqualsTheSearchByDefinition) {
  std::mt19937 rng(2026);
  int planned = 0, compared = 0, cut_matches_won = 0, floored = 0;
  // 600 rounds: a tie broken differently under a shorter match first
  // shows at round 333. Every tenth round is deep (300) with budgets up to
  // 256, where float sums of long copies drift most.
  for (int round = 0; round < 600; ++round) {
    const bool deep = round % 10 == 9;
    const int max_depth = deep ? 300 : std::vector<int>{5, 12, 24, 64}[round % 4];
    // Few tokens: ties and branching; many: long unanimous copies.
    const int vocab = std::vector<int>{3, 8, 60}[round % 3];
    SuffixTree tree(max_depth);
    std::vector<Str> seqs;
    auto make = [&] {
      Str s;
      const size_t length = 20 + rng() % (deep ? 700 : 200);
      while (s.size() < length) {
        if (!seqs.empty() && rng() % 3 != 0) {  // copies: equal counts across match lengths
          const Str& src = seqs[rng() % seqs.size()];
          const size_t a = rng() % src.size();
          const size_t n = 1 + rng() % 80;
          for (size_t i = a; i < src.size() && i < a + n; ++i) s.push_back(src[i]);
        } else {
          s.push_back(static_cast<int32_t>(rng() % vocab));
        }
      }
      return s;
    };
    // Sequences 100.. are added between the others and removed at the end:
    // removals re-order equal-count siblings, so that a longer and a shorter
    // match with the same occurrences can break a tie differently.
    for (int id = 0; id < 10; ++id) {
      const Str s = make();
      tree.Extend(id, s);
      if (id % 3 == 0) tree.Finish(id);
      seqs.push_back(s);
      if (id % 2 == 1) tree.Extend(100 + id, make());
    }
    for (int id = 1; id < 10; id += 2) ASSERT_TRUE(tree.Remove(100 + id).ok());
    ASSERT_TRUE(tree.CheckIntegrity().ok());
    const int queries = deep ? 20 : 60;
    planned += queries;
    for (int q = 0; q < queries; ++q) {
      DraftParams p;
      p.max_spec_tokens = 1 + rng() % (deep ? 256 : 32);
      p.max_spec_factor = std::vector<float>{1.0f, 0.5f, 2.0f, -0.5f}[rng() % 4];
      p.max_spec_offset = static_cast<float>(rng() % 3);
      p.min_token_prob = std::vector<float>{0.0f, 0.1f, 0.4f}[rng() % 3];
      p.extend_past_depth = rng() % 4 == 0;
      p.discount_own_suffix = rng() % 3 == 0;
      if (rng() % 4 == 0) p.confident_prob = 0.5f;
      if (rng() % 4 == 0) p.confident_min_match = static_cast<int>(rng() % 20);
      if (rng() % 4 == 0) p.confident_min_support = 2;
      if (rng() % 4 == 0) p.score_exponent = std::vector<float>{1.5f, 0.7f, 2.0f}[rng() % 3];
      const size_t which = rng() % seqs.size();
      const Str& s = seqs[which];
      // Mostly the live tail (hinted); else anywhere, unhinted.
      const bool at_end = rng() % 3 != 0;
      const size_t end = at_end ? s.size() : 2 + rng() % (s.size() - 1);
      const size_t take = std::min<size_t>(end, max_depth);
      const Str context(s.begin() + (end - take), s.begin() + end);
      const bool hint = at_end && which % 3 != 0;  // finished sequences have no active suffixes
      const float must_beat = rng() % 3 == 0 ? static_cast<float>(rng() % 8) * 0.75f : -1.0f;
      const Draft want = SearchByDefinition(tree, context, p, hint ? &s : nullptr, must_beat);
      const Draft got = tree.Speculate(context, p, hint ? static_cast<int32_t>(which) : -1, must_beat);
      const std::string where = absl::StrCat("round ", round, " query ", q, " depth ", max_depth, " hint ", hint,
                                             " context ", context.size(), ": ", Describe(p, must_beat, got, want));
      ASSERT_EQ(got.token_ids, want.token_ids) << where;
      ASSERT_EQ(got.probs, want.probs) << where;
      ASSERT_EQ(got.parents, want.parents) << where;
      ASSERT_EQ(got.score, want.score) << where;
      ASSERT_EQ(got.match_len, want.match_len) << where;
      ++compared;
      floored += must_beat >= 0;
      if (!want.token_ids.empty() && want.match_len > max_depth - p.max_spec_tokens) ++cut_matches_won;
    }
  }
  EXPECT_EQ(compared, planned);
  EXPECT_GT(floored, planned / 4);
  // The depth-cut matches searched last do win often enough to be tested.
  EXPECT_GT(cut_matches_won, planned / 20);
}

TEST(SuffixTreeTest, TreeDraftBestFirst) {
  SuffixTree tree(8);
  tree.Extend(0, {1, 2, 3, 1, 2, 4, 1, 2, 3});
  DraftParams p;
  p.use_tree_spec = true;
  p.max_spec_tokens = 4;
  p.min_token_prob = 0.2f;
  Draft d = tree.Speculate(Str{9, 1, 2}, p);
  ASSERT_GE(d.token_ids.size(), 2u);
  // After "1 2": 3 (2/3) and 4 (1/3) are both drafted as children of root.
  EXPECT_EQ(d.parents[0], -1);
  float sum = 0;
  for (float x : d.probs) sum += x;
  EXPECT_FLOAT_EQ(sum, d.score);
}

}  // namespace
}  // namespace floe::suffix_cache
