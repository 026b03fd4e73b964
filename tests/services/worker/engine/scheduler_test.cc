// The scheduler's step plans, table-driven: each case runs a few steps over
// named sequences and states every plan (who runs how many tokens), the
// preemptions, and who waits. Between steps each planned sequence advances
// as the engine would: a prefill chunk is computed, a finished prompt or a
// decode emits one token, a draft is rejected whole (its slots trimmed).
// The block manager's integrity is checked after every step.
#include "services/worker/engine/scheduler.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace floe {
namespace {

using Plan = std::vector<std::pair<std::string, int>>;

struct Step {
  std::map<std::string, int> drafts;  // draft lengths set before the step
  Plan plan;                          // expected, in order
  int64_t preemptions = 0;            // expected total so far
  std::vector<std::string> waiting;   // expected after the step, in order
};

struct Case {
  const char* name;
  int block_size, num_blocks, budget, max_seqs;
  std::vector<std::pair<std::string, int>> prompts;  // added in order before step 1
  std::vector<Step> steps;
};

const Case kCases[] = {
    {"a long prompt is chunked under the token budget, then decodes",
     4, 64, 8, 8, {{"A", 20}},
     {{{}, {{"A", 8}}, 0, {}}, {{}, {{"A", 8}}, 0, {}}, {{}, {{"A", 4}}, 0, {}}, {{}, {{"A", 1}}, 0, {}}}},
    {"running sequences first, then the waiting ones FIFO in what the budget leaves",
     4, 64, 8, 8, {{"A", 3}, {"B", 10}, {"C", 2}},
     {{{}, {{"A", 3}, {"B", 5}}, 0, {"C"}},
      {{}, {{"A", 1}, {"B", 5}, {"C", 2}}, 0, {}},
      {{}, {{"A", 1}, {"B", 1}, {"C", 1}}, 0, {}}}},
    {"max_num_seqs caps the batch; the rest wait",
     4, 64, 64, 2, {{"A", 2}, {"B", 2}, {"C", 2}},
     {{{}, {{"A", 2}, {"B", 2}}, 0, {"C"}}, {{}, {{"A", 1}, {"B", 1}}, 0, {"C"}}}},
    {"out of blocks: the newest running sequence is preempted, nobody is admitted that step",
     4, 4, 64, 8, {{"A", 7}, {"B", 7}},
     {{{}, {{"A", 7}, {"B", 7}}, 0, {}},
      {{}, {{"A", 1}, {"B", 1}}, 0, {}},
      // A's 9th token needs a 3rd block: B (admitted last) goes back to the front of the queue.
      {{}, {{"A", 1}}, 1, {"B"}}}},
    {"eviction takes the most recently admitted, and the preempted wait at the front",
     4, 5, 64, 8, {{"A", 4}, {"B", 4}, {"C", 4}, {"D", 4}},
     {{{}, {{"A", 4}, {"B", 4}, {"C", 4}, {"D", 4}}, 0, {}},
      // Each decode needs a 2nd block; one is free. A takes it, B evicts D
      // (the newest), C has no one left to evict and goes itself.
      {{}, {{"A", 1}, {"B", 1}}, 2, {"C", "D"}}}},
    {"a sequence with no one left to evict preempts itself",
     4, 2, 64, 8, {{"A", 8}},
     {{{}, {{"A", 8}}, 0, {}},
      // 9 tokens need 3 blocks of 4; the pool has 2.
      {{}, {}, 1, {"A"}}}},
    {"a draft is dropped before anyone is preempted",
     4, 3, 64, 8, {{"A", 3}, {"B", 4}},
     {{{}, {{"A", 3}, {"B", 4}}, 0, {}},
      // A: 3 computed + 1 + 5 drafts = 9 slots = 3 blocks; 1 block is free: the
      // draft goes, A decodes in its own block and B takes the free one.
      {{{"A", 5}}, {{"A", 1}, {"B", 1}}, 0, {}}}},
    {"drafts ride on a decode only as far as the budget goes",
     4, 64, 4, 8, {{"A", 2}},
     {{{}, {{"A", 2}}, 0, {}}, {{{"A", 6}}, {{"A", 4}}, 0, {}}, {{{"A", 2}}, {{"A", 3}}, 0, {}}}},
    {"a prefill chunk never carries a draft",
     4, 64, 4, 8, {{"A", 10}},
     {{{{"A", 3}}, {{"A", 4}}, 0, {}}}},
};

TEST(SchedulerTest, StepPlans) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    BlockManager blocks(c.num_blocks, c.block_size);
    PrefixChain chain(blocks, /*enable_prefix_caching=*/true);
    Scheduler scheduler({c.budget, c.max_seqs}, chain);
    std::map<std::string, std::unique_ptr<Sequence>> seqs;
    std::map<const Sequence*, std::string> names;
    int token = 1;
    for (const auto& [name, len] : c.prompts) {
      auto seq = std::make_unique<Sequence>();
      for (int i = 0; i < len; ++i) seq->tokens.push_back(token++);  // distinct: no prefix hits
      seq->prompt_len = len;
      seq->request.id = name;
      names[seq.get()] = name;
      scheduler.Add(seq.get());
      seqs[name] = std::move(seq);
    }
    for (size_t s = 0; s < c.steps.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s + 1));
      const Step& step = c.steps[s];
      for (const auto& [name, n] : step.drafts) seqs[name]->draft.assign(n, 7);
      const std::vector<Planned> plan = scheduler.Schedule();
      Plan got;
      for (const Planned& p : plan) got.emplace_back(names[p.seq], p.num_tokens);
      EXPECT_EQ(got, step.plan);
      EXPECT_EQ(scheduler.preemptions(), step.preemptions);
      std::vector<std::string> waiting;
      for (const Sequence* w : scheduler.waiting()) waiting.push_back(names[w]);
      EXPECT_EQ(waiting, step.waiting);
      for (const Planned& p : plan) {
        Sequence& seq = *p.seq;
        EXPECT_GE(static_cast<int>(seq.block_table.size()) * c.block_size, seq.num_computed + p.num_tokens);
        if (!seq.draft.empty()) {  // every draft token rejected: the decode token only
          seq.num_computed += 1;
          seq.draft.clear();
          chain.Trim(seq);
        } else {
          seq.num_computed += p.num_tokens;
        }
        if (seq.num_computed == seq.total_len()) seq.tokens.push_back(token++);
        chain.RegisterFullBlocks(seq);
      }
      ASSERT_TRUE(blocks.CheckIntegrity().ok()) << blocks.CheckIntegrity();
    }
  }
}

}  // namespace
}  // namespace floe
