#include <vector>

#include "gtest/gtest.h"
#include "services/suffix_cache/replay/ngram.h"
#include "services/suffix_cache/replay/replay.h"
#include "services/suffix_cache/replay/trace.h"

namespace floe::suffix_cache {
namespace {

TEST(TraceTest, ParsesFieldsAndSkipsOthers) {
  auto t = ParseTrace(
      "{\"id\":3,\"session\":\"a/b.c\",\"meta\":{\"x\":[1,{\"y\":\"]\"}]},\"prompt\":[1,2,3],"
      "\"output\":[4, 5]}\n\n{\"prompt\":[],\"output\":[-1],\"kind\":\"chat\"}\n");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].id, "3");
  EXPECT_EQ((*t)[0].session, "a/b.c");
  EXPECT_EQ((*t)[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ((*t)[0].output, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ((*t)[1].id, "line-3");
}

TEST(TraceTest, ErrorsNameLineAndField) {
  auto t = ParseTrace("{\"prompt\":[1],\"output\":[2]}\n{\"prompt\":[1,x],\"output\":[]}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 2"), absl::string_view::npos);
  EXPECT_NE(t.status().message().find("prompt"), absl::string_view::npos);
  EXPECT_FALSE(ParseTrace("{\"prompt\":[1]}").ok());  // no output
  EXPECT_FALSE(ParseTrace("{\"prompt\":[99999999999],\"output\":[]}").ok());
  EXPECT_EQ(LoadTrace("/nonexistent/trace.jsonl").status().code(), absl::StatusCode::kNotFound);
}

TEST(NgramTest, EarliestOccurrence) {
  NgramProposer p(3, 4);
  p.Append({1, 2, 3, 9, 1, 2, 3, 8, 7, 1, 2, 3});
  EXPECT_EQ(p.Propose(), (std::vector<int32_t>{9, 1, 2, 3}));
  NgramProposer q(3, 10);
  q.Append({5, 6, 7, 5, 6, 7});
  EXPECT_EQ(q.Propose(), (std::vector<int32_t>{5, 6, 7}));  // context ends first
  NgramProposer none(3, 10);
  none.Append({1, 2, 3});
  EXPECT_TRUE(none.Propose().empty());
}

// A response that repeats its prompt is drafted from the prompt, so it
// takes far fewer steps than tokens; the counters add up.
TEST(ReplayTest, CopyingResponseTakesFewSteps) {
  TraceRequest r;
  r.id = "0";
  for (int i = 0; i < 200; ++i) r.prompt.push_back(1000 + i);
  r.output.assign(r.prompt.begin() + 50, r.prompt.end());
  ReplayOptions o;
  o.speculator = {.max_depth = 64, .max_cached_requests = 100};
  o.draft.max_spec_tokens = 16;
  auto res = RunReplay({r}, o);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->output_tokens, 150);
  EXPECT_LT(res->steps, 20);
  EXPECT_EQ(res->speculate_us.size(), static_cast<size_t>(res->steps));
  EXPECT_LE(res->accepted_tokens, res->drafted_tokens);
  EXPECT_EQ(res->cached_tokens, 150);
}

}  // namespace
}  // namespace floe::suffix_cache
