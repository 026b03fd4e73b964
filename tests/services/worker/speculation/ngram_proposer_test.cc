#include "services/worker/speculation/ngram_proposer.h"

#include "gtest/gtest.h"

namespace floe {
namespace {

using V = std::vector<int32_t>;

TEST(NgramProposerTest, LongestNgramFirstThenEarliestOccurrence) {
  NgramOptions o{1, 3, 3};
  // Tail "2 3": the 3-gram "9 2 3" never recurs; "2 3" first occurs at 1.
  EXPECT_EQ(NgramProposer::Lookup(V{1, 2, 3, 4, 5, 2, 3, 6, 7, 9, 2, 3}, o, 8), (V{4, 5, 2}));
  // A longer match beats an earlier shorter one.
  EXPECT_EQ(NgramProposer::Lookup(V{3, 8, 8, 1, 2, 3, 7, 7, 1, 2, 3}, o, 8), (V{7, 7, 1}));
}

TEST(NgramProposerTest, CapsAtKAndBudgetAndTheEnd) {
  NgramOptions o{1, 2, 5};
  EXPECT_EQ(NgramProposer::Lookup(V{5, 6, 7, 5}, o, 8), (V{6, 7, 5}));  // runs to the end
  EXPECT_EQ(NgramProposer::Lookup(V{5, 6, 7, 5}, o, 2), (V{6, 7}));     // budget
  EXPECT_EQ(NgramProposer::Lookup(V{4, 4, 4, 4, 4, 4, 4, 4}, o, 8), (V{4, 4, 4, 4, 4}));  // k
}

TEST(NgramProposerTest, NoMatchOrTooShortGivesNothing) {
  NgramOptions o{2, 3, 4};
  EXPECT_TRUE(NgramProposer::Lookup(V{1, 2, 3, 4}, o, 4).empty());
  EXPECT_TRUE(NgramProposer::Lookup(V{1, 2, 1}, o, 4).empty());  // only a 1-gram recurs; min_n = 2
  EXPECT_TRUE(NgramProposer::Lookup(V{7}, o, 4).empty());
  EXPECT_TRUE(NgramProposer::Lookup(V{1, 1, 1}, o, 0).empty());
}

}  // namespace
}  // namespace floe
