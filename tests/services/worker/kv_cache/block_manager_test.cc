#include "services/worker/kv_cache/block_manager.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace floe {
namespace {

std::vector<int32_t> Tokens(std::initializer_list<int32_t> t) { return t; }

TEST(BlockManagerTest, AllocateAndReleaseRespectCapacity) {
  BlockManager manager(4, 2);
  auto a = manager.Allocate(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(manager.Allocate(2).has_value());  // all-or-nothing
  EXPECT_EQ(manager.num_free_blocks(), 1);
  EXPECT_FLOAT_EQ(manager.Usage(), 0.75f);
  manager.Release(*a);
  EXPECT_EQ(manager.num_free_blocks(), 4);
  EXPECT_TRUE(manager.CheckIntegrity().ok());
}

TEST(BlockManagerTest, SharesCachedPrefixUntilReused) {
  BlockManager manager(3, 2);
  std::vector<int32_t> prompt = Tokens({1, 2, 3, 4, 5});
  auto blocks = *manager.Allocate(3);
  uint64_t h0 = BlockManager::HashBlock(0, std::span(prompt).subspan(0, 2));
  uint64_t h1 = BlockManager::HashBlock(h0, std::span(prompt).subspan(2, 2));
  manager.RegisterFullBlock(blocks[0], h0);
  manager.RegisterFullBlock(blocks[1], h1);
  manager.Release(blocks);

  // Same two-block prefix, different tail: both blocks match while cached.
  std::vector<int32_t> next = Tokens({1, 2, 3, 4, 9, 9});
  auto shared = manager.AcquireCachedPrefix(next);
  EXPECT_EQ(shared, (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(manager.ref_count(blocks[0]), 1);
  // A different first block matches nothing, even if the second is equal.
  EXPECT_TRUE(manager.AcquireCachedPrefix(Tokens({7, 7, 3, 4})).empty());
  manager.Release(shared);

  // Reusing all blocks evicts their hashes.
  auto all = *manager.Allocate(3);
  EXPECT_TRUE(manager.AcquireCachedPrefix(next).empty());
  manager.Release(all);
  EXPECT_TRUE(manager.CheckIntegrity().ok());
}

TEST(BlockManagerTest, LeastRecentlyFreedIsReusedFirst) {
  BlockManager manager(2, 1);
  auto first = *manager.Allocate(1);
  auto second = *manager.Allocate(1);
  manager.RegisterFullBlock(first[0], 11);
  manager.RegisterFullBlock(second[0], 22);
  manager.Release(second);
  manager.Release(first);
  auto reused = *manager.Allocate(1);
  EXPECT_EQ(reused[0], second[0]);
}

// Random sequences share and extend prefixes; after every operation the block
// contents recorded by an oracle must equal what the prefix cache claims.
TEST(BlockManagerTest, RandomisedAgainstOracle) {
  constexpr int kBlockSize = 3;
  BlockManager manager(24, kBlockSize);
  std::mt19937 rng(7);
  std::map<int32_t, std::vector<int32_t>> content;  // oracle: block -> tokens of its prefix
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
  };
  std::vector<Seq> live;
  for (int step = 0; step < 3000; ++step) {
    if (live.size() < 5 && rng() % 2) {
      Seq seq;
      int len = 1 + rng() % 12;
      for (int i = 0; i < len; ++i) seq.tokens.push_back(rng() % 3);  // small alphabet: many shared prefixes
      seq.blocks = manager.AcquireCachedPrefix(seq.tokens);
      for (size_t i = 0; i < seq.blocks.size(); ++i) {
        std::vector<int32_t> expect(seq.tokens.begin(), seq.tokens.begin() + (i + 1) * kBlockSize);
        ASSERT_EQ(content[seq.blocks[i]], expect) << "step " << step;
      }
      int needed = (len + kBlockSize - 1) / kBlockSize - static_cast<int>(seq.blocks.size());
      auto fresh = manager.Allocate(needed);
      if (!fresh) {
        manager.Release(seq.blocks);
        continue;
      }
      uint64_t hash = 0;
      for (int b = 0; b < len / kBlockSize; ++b) {
        hash = BlockManager::HashBlock(hash, std::span(seq.tokens).subspan(b * kBlockSize, kBlockSize));
        if (b >= static_cast<int>(seq.blocks.size())) {
          int32_t block = (*fresh)[b - seq.blocks.size()];
          content[block].assign(seq.tokens.begin(), seq.tokens.begin() + (b + 1) * kBlockSize);
          manager.RegisterFullBlock(block, hash);
        }
      }
      for (int32_t b : *fresh) {
        if (!content.count(b) || content[b].size() > seq.tokens.size()) content.erase(b);
      }
      seq.blocks.insert(seq.blocks.end(), fresh->begin(), fresh->end());
      live.push_back(std::move(seq));
    } else if (!live.empty()) {
      size_t victim = rng() % live.size();
      manager.Release(live[victim].blocks);
      live.erase(live.begin() + victim);
    }
    ASSERT_TRUE(manager.CheckIntegrity().ok()) << manager.CheckIntegrity() << " at step " << step;
  }
}

}  // namespace
}  // namespace floe
