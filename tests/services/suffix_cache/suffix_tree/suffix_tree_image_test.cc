#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"

namespace floe::suffix_cache {
namespace {

using Str = std::vector<int32_t>;

// Random appends (copied spans make repeats), finishes and removals, as a
// live global tree sees them; the same seed gives the same operations.
class RandomOps {
 public:
  RandomOps(uint32_t seed, int vocab, int max_copy = 12) : rng_(seed), vocab_(vocab), max_copy_(max_copy) {}
  // Appends one token per Extend call (no slide is ever deferred).
  void set_token_by_token(bool on) { token_by_token_ = on; }
  void Apply(SuffixTree* tree, int ops) {
    for (int op = 0; op < ops; ++op) {
      const int kind = rng_() % 10;
      if (kind < 7 || seqs_.empty()) {
        std::vector<int32_t> live;
        for (auto& [id, s] : seqs_) {
          if (!finished_[id]) live.push_back(id);
        }
        const int32_t id = live.empty() || rng_() % 4 == 0 ? next_id_++ : live[rng_() % live.size()];
        Str add;
        if (!seqs_.empty() && rng_() % 2 == 0) {
          const Str& src = std::next(seqs_.begin(), rng_() % seqs_.size())->second;
          for (size_t i = src.empty() ? 0 : rng_() % src.size(), n = 1 + rng_() % max_copy_; i < src.size() && n > 0;
               ++i, --n) {
            add.push_back(src[i]);
          }
        }
        for (int i = rng_() % 3; i >= 0; --i) add.push_back(static_cast<int32_t>(rng_() % vocab_));
        if (token_by_token_) {
          for (int32_t t : add) tree->Extend(id, {t});
        } else {
          tree->Extend(id, add);
        }
        seqs_[id].insert(seqs_[id].end(), add.begin(), add.end());
      } else if (kind < 9) {
        auto it = std::next(seqs_.begin(), rng_() % seqs_.size());
        tree->Finish(it->first);
        finished_[it->first] = true;
      } else {
        auto it = std::next(seqs_.begin(), rng_() % seqs_.size());
        ASSERT_TRUE(tree->Remove(it->first).ok());
        finished_.erase(it->first);
        seqs_.erase(it);
      }
    }
  }
  const std::map<int32_t, Str>& seqs() const { return seqs_; }

 private:
  std::mt19937 rng_;
  int vocab_;
  int max_copy_;
  bool token_by_token_ = false;
  std::map<int32_t, Str> seqs_;
  std::map<int32_t, bool> finished_;
  int32_t next_id_ = 0;
};

std::string ImageOf(const SuffixTree& tree) {
  std::string image;
  tree.AppendImage(&image);
  return image;
}

void ExpectSameDrafts(const SuffixTree& a, const SuffixTree& b, const std::map<int32_t, Str>& seqs) {
  DraftParams p;
  p.max_spec_tokens = 8;
  for (const auto& [id, s] : seqs) {
    const Str context(s.end() - std::min<size_t>(s.size(), a.max_depth()), s.end());
    const Draft x = a.Speculate(context, p, id), y = b.Speculate(context, p, id);
    ASSERT_EQ(x.token_ids, y.token_ids) << "seq " << id;
    ASSERT_EQ(x.probs, y.probs) << "seq " << id;
  }
}

// A loaded tree is the same tree: it passes its check, re-serialises to the
// same bytes (sibling order, runs, free lists, live sequences' rings), and
// keeps behaving identically under the same later operations, live
// sequences included.
TEST(SuffixTreeImageTest, LoadedTreeContinuesIdentically) {
  for (int round = 0; round < 24; ++round) {
    const int max_depth = std::vector<int>{2, 4, 8, 64}[round % 4];
    const int vocab = round % 3 == 2 ? 40 : 3;  // 40: nodes move to the edge table
    SuffixTree original(max_depth);
    RandomOps ops(1000 + round, vocab);
    ops.Apply(&original, 150);
    const std::string image = ImageOf(original);
    SuffixTree loaded(max_depth);
    ASSERT_TRUE(loaded.LoadImage(image).ok()) << loaded.LoadImage(image);
    ASSERT_TRUE(loaded.CheckIntegrity().ok()) << loaded.CheckIntegrity();
    ASSERT_EQ(ImageOf(loaded), image) << "round " << round;
    ASSERT_EQ(loaded.AllPaths(), original.AllPaths());
    ASSERT_EQ(loaded.num_seqs(), original.num_seqs());
    for (const auto& [id, s] : ops.seqs()) {
      ASSERT_EQ(loaded.Tokens(id), absl::MakeConstSpan(s));
      ASSERT_EQ(loaded.IsFinished(id), original.IsFinished(id));
    }
    ASSERT_NO_FATAL_FAILURE(ExpectSameDrafts(original, loaded, ops.seqs()));
    RandomOps more_a = ops, more_b = ops;  // the same later operations on both
    more_a.Apply(&original, 80);
    more_b.Apply(&loaded, 80);
    ASSERT_TRUE(loaded.CheckIntegrity().ok()) << loaded.CheckIntegrity();
    ASSERT_EQ(ImageOf(loaded), ImageOf(original)) << "round " << round;
  }
}

// Extend defers the slides of a copied span and applies them at once; the
// tree must be exactly (byte for byte: counts, sibling order, references,
// rings) the one that token-by-token appends build, periodic text included.
TEST(SuffixTreeImageTest, ExtendInBatchesBuildsTheSameTreeAsTokenByToken) {
  for (int round = 0; round < 60; ++round) {
    const int max_depth = std::vector<int>{2, 3, 5, 8, 16, 64}[round % 6];
    const int vocab = std::vector<int>{2, 3, 6, 40}[round % 4];
    SuffixTree batched(max_depth), single(max_depth);
    RandomOps a(500 + round, vocab, 60), b(500 + round, vocab, 60);
    b.set_token_by_token(true);
    for (int chunk = 0; chunk < 12; ++chunk) {
      a.Apply(&batched, 15);
      b.Apply(&single, 15);
      ASSERT_TRUE(batched.CheckIntegrity().ok()) << batched.CheckIntegrity() << " round " << round;
      ASSERT_EQ(ImageOf(batched), ImageOf(single)) << "round " << round << " chunk " << chunk;
    }
  }
}

TEST(SuffixTreeImageTest, RefusesDamagedImagesAndStaysUsable) {
  // Small vocabulary: scanned sibling lists; 40 tokens: hashed children too.
  for (const auto& [depth, vocab] : std::vector<std::pair<int, int>>{{8, 5}, {16, 40}}) {
    SuffixTree original(depth);
    RandomOps ops(7, vocab);
    ops.Apply(&original, 200);
    const std::string image = ImageOf(original);
    SuffixTree tree(depth);
    for (size_t n = 0; n < image.size(); n += 1 + n / 16) {  // every short prefix, then sampled
      const absl::Status st = tree.LoadImage(image.substr(0, n));
      ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << n;
      ASSERT_EQ(tree.num_seqs(), 0);
      ASSERT_EQ(tree.num_tokens(), 0);
    }
    EXPECT_FALSE(tree.LoadImage(image + "x").ok());
    SuffixTree deeper(depth + 1);
    EXPECT_NE(deeper.LoadImage(image).message().find("max_depth"), std::string::npos);
    // Any byte flipped: refused, or (a count, a token) loaded without ever
    // reading out of bounds; the tree stays usable either way.
    std::mt19937 rng(3);
    int refused = 0;
    for (int trial = 0; trial < 10000; ++trial) {
      std::string bad = image;
      bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
      if (!tree.LoadImage(bad).ok()) {
        ++refused;
        ASSERT_EQ(tree.num_seqs(), 0);
      }
      (void)tree.CheckIntegrity();
      for (const auto& [id, s] : ops.seqs()) (void)tree.Speculate(s, DraftParams{});
    }
    EXPECT_GT(refused, 1000);
    ASSERT_TRUE(tree.LoadImage(image).ok());
    EXPECT_EQ(ImageOf(tree), image);
  }
}

}  // namespace
}  // namespace floe::suffix_cache
