// Tree-masked verification (ForwardSequence::parents) against a brute-force
// oracle: every node's logits (two trees in one batch) must equal, bit for
// bit, those of the last row when its root-to-node path runs as a plain causal
// chain on its own copy of the context; and after CopyKvSlots compacts a path
// into its chain slots, the next decode must match the chain's next decode bit
// for bit (the copied KV is exactly the chain's KV).
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/backend/cpu_backend.h"
#include "tests/services/worker/backend/test_model.h"

namespace floe {
namespace {

using testing_model::Flavor;
using testing_model::TestModel;

constexpr int kBlockSize = 4;

std::vector<int32_t> Tokens(int n, int seed, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (seed * 977 + i * 131 + i * i * 7) % vocab;
  return t;
}

// Runs one Forward and returns its logits rows.
std::vector<std::vector<float>> Forward(Backend& b, std::vector<ForwardSequence> batch) {
  const int vocab = b.config().vocab_size;
  int rows = 0;
  for (const ForwardSequence& s : batch) rows += s.num_logits;
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  absl::Status st = b.Forward(batch, logits.data());
  EXPECT_TRUE(st.ok()) << st;
  std::vector<std::vector<float>> out;
  for (int r = 0; r < rows; ++r) out.emplace_back(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
  return out;
}

std::vector<int32_t> PathTo(const std::vector<int32_t>& parents, int node) {
  std::vector<int32_t> path;
  for (int a = node; a >= 0; a = parents[a]) path.insert(path.begin(), a);
  return path;
}

struct TreeCase {
  Flavor flavor;
  DType dtype;
};

class TreeAttentionTest : public ::testing::TestWithParam<TreeCase> {};

TEST_P(TreeAttentionTest, EveryNodeMatchesItsRootPathRunAsAChain) {
  TestModel model(GetParam().flavor, GetParam().dtype, 7);
  const int vocab = model.config().vocab_size;
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& b = **backend;
  ASSERT_TRUE(b.AllocateKvCache(96, kBlockSize).ok());

  // Context of 11 tokens (the tree starts mid-block), then a tree of 13 nodes:
  // index 0 is the last committed token; branches at 0, 1, 4 and 6.
  const std::vector<int32_t> prompt = Tokens(11, 1, vocab);
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3, 6, 6, 4, 9, 0, 7};
  const std::vector<int32_t> tree = Tokens(static_cast<int>(parents.size()), 2, vocab);
  const int32_t start = static_cast<int32_t>(prompt.size());
  const std::vector<int32_t> tree_table = {30, 12, 5, 40, 7, 22, 9};  // physical order differs

  // A second tree of another shape over the same context, last in the batch,
  // so each tree's mask is its own.
  const std::vector<int32_t> parents2 = {-1, 0, 1, 1, 0, 4, 3};
  const std::vector<int32_t> tree2 = Tokens(static_cast<int>(parents2.size()), 6, vocab);
  const std::vector<int32_t> tree2_table = {50, 54, 51, 53, 52};

  // Prefill the contexts, then the tree in a batch between two other sequences
  // (a prefill and a chain verify) and before the second tree.
  ASSERT_EQ(Forward(b, {{prompt, 0, tree_table, 0}, {prompt, 0, tree2_table, 0}}).size(), 0u);
  const std::vector<int32_t> other_prompt = Tokens(6, 3, vocab), other_table = {60, 61};
  const std::vector<int32_t> chain_ctx = Tokens(5, 4, vocab), chain_table = {70, 71, 72};
  ASSERT_EQ(Forward(b, {{chain_ctx, 0, chain_table, 0}}).size(), 0u);
  const std::vector<int32_t> chain_verify = Tokens(4, 5, vocab);
  ForwardSequence tree_seq{tree, start, tree_table, static_cast<int32_t>(tree.size()), parents};
  ForwardSequence tree2_seq{tree2, start, tree2_table, static_cast<int32_t>(tree2.size()), parents2};
  auto rows = Forward(b, {{other_prompt, 0, other_table, 1}, tree_seq, {chain_verify, 5, chain_table, 4}, tree2_seq});
  ASSERT_EQ(rows.size(), 1 + tree.size() + 4 + tree2.size());

  // Oracle: each node's path as a chain over a fresh copy of the context.
  const std::vector<int32_t> table = {90, 85, 88, 80, 93, 82, 95};
  auto expect_chains = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& tree_parents,
                           size_t first_row) {
    for (size_t node = 0; node < tokens.size(); ++node) {
      const std::vector<int32_t> path = PathTo(tree_parents, static_cast<int>(node));
      std::vector<int32_t> chain;
      for (int32_t a : path) chain.push_back(tokens[a]);
      ASSERT_EQ(Forward(b, {{prompt, 0, table, 0}}).size(), 0u);
      auto chain_rows = Forward(b, {{chain, start, table, static_cast<int32_t>(chain.size())}});
      ASSERT_EQ(chain_rows.back(), rows[first_row + node]) << "node " << node << " depth " << path.size() - 1;
    }
  };
  expect_chains(tree, parents, 1);
  expect_chains(tree2, parents2, 1 + tree.size() + 4);
}

TEST_P(TreeAttentionTest, CompactedPathContinuesExactlyLikeTheChain) {
  TestModel model(GetParam().flavor, GetParam().dtype, 8);
  const int vocab = model.config().vocab_size;
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& b = **backend;
  ASSERT_TRUE(b.AllocateKvCache(32, kBlockSize).ok());
  const std::vector<int32_t> prompt = Tokens(6, 9, vocab);
  const std::vector<int32_t> parents = {-1, 0, 0, 2, 1, 3, 3, 5};
  const std::vector<int32_t> tree = Tokens(static_cast<int>(parents.size()), 10, vocab);
  const int32_t start = static_cast<int32_t>(prompt.size());
  const std::vector<int32_t> tree_table = {3, 9, 1, 14};
  const std::vector<int32_t> chain_table = {20, 21, 22, 23};
  ASSERT_EQ(Forward(b, {{prompt, 0, tree_table, 0}, {prompt, 0, chain_table, 0}}).size(), 0u);
  Forward(b, {{tree, start, tree_table, static_cast<int32_t>(tree.size()), parents}});

  // Accept the path 0 -> 2 -> 3 -> 5 -> 7: slots start+{2,3,5,7} move to start+{1,2,3,4}.
  const std::vector<int32_t> path = PathTo(parents, 7);
  std::vector<KvSlotCopy> copies;
  std::vector<int32_t> chain;
  for (size_t d = 0; d < path.size(); ++d) {
    chain.push_back(tree[path[d]]);
    if (path[d] == static_cast<int32_t>(d)) continue;
    const int32_t from = start + path[d], to = start + static_cast<int32_t>(d);
    copies.push_back({tree_table[from / kBlockSize], from % kBlockSize, tree_table[to / kBlockSize],
                      to % kBlockSize});
  }
  ASSERT_TRUE(b.CopyKvSlots(copies).ok());
  Forward(b, {{chain, start, chain_table, 1}});
  // The next two decodes over the compacted cache and the chain's cache.
  const int32_t pos = start + static_cast<int32_t>(chain.size());
  for (int32_t step = 0; step < 2; ++step) {
    const int32_t token = (step * 37 + 5) % vocab;
    auto got = Forward(b, {{{&token, 1}, pos + step, tree_table, 1}, {{&token, 1}, pos + step, chain_table, 1}});
    ASSERT_EQ(got[0], got[1]) << "decode " << step;
  }
  // Out-of-range copies are refused.
  const KvSlotCopy bad_block[] = {{0, 0, 32, 0}}, bad_slot[] = {{0, 4, 1, 0}};
  EXPECT_EQ(b.CopyKvSlots(bad_block).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.CopyKvSlots(bad_slot).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TreeAttentionValidation, RejectsMalformedParents) {
  TestModel model(Flavor::kLlama3, DType::kF32, 5);
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
  ASSERT_TRUE(backend.ok());
  Backend& b = **backend;
  ASSERT_TRUE(b.AllocateKvCache(4, 4).ok());
  const int32_t tokens[] = {1, 2, 3};
  const int32_t table[] = {0};
  std::vector<float> logits(3 * model.config().vocab_size);
  for (std::vector<int32_t> parents : std::vector<std::vector<int32_t>>{
           {-1, 0}, {0, 0, 1}, {-1, -1, 0}, {-1, 1, 0}, {-1, 0, 2}}) {
    ForwardSequence seq{tokens, 0, table, 3, parents};
    absl::Status st = b.Forward({&seq, 1}, logits.data());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << testing::PrintToString(parents);
    EXPECT_NE(st.message().find("parents"), std::string::npos) << st;
  }
  const std::vector<int32_t> good = {-1, 0, 0};
  ForwardSequence seq{tokens, 0, table, 3, good};
  EXPECT_TRUE(b.Forward({&seq, 1}, logits.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(Flavors, TreeAttentionTest,
                         ::testing::Values(TreeCase{Flavor::kLlama3, DType::kF32},
                                           TreeCase{Flavor::kQwen2, DType::kBF16},
                                           TreeCase{Flavor::kQwen3, DType::kF32}));

}  // namespace
}  // namespace floe
