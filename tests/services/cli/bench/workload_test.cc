#include "services/cli/bench/workload.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace floe::bench {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))).string();
  std::ofstream(path) << text;
  return path;
}

RandomSpec Spec() {
  RandomSpec spec;
  spec.num_requests = 20;
  spec.input_len = 32;
  spec.output_len = 16;
  spec.vocab_size = 50;
  spec.excluded_ids = {0, 1};
  spec.seed = 7;
  return spec;
}

TEST(RandomWorkloadTest, FixedLengthsIdsBelowVocabAndSeeded) {
  auto jobs = RandomWorkload(Spec());
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 20u);
  for (const Job& job : *jobs) {
    ASSERT_EQ(job.turns.size(), 1u);
    EXPECT_EQ(job.turns[0].prompt.size(), 32u);
    EXPECT_EQ(job.turns[0].output_len, 16);
    for (int32_t id : job.turns[0].prompt) {
      EXPECT_GE(id, 2);
      EXPECT_LT(id, 50);
    }
  }
  auto again = RandomWorkload(Spec());
  EXPECT_EQ((*again)[5].turns[0].prompt, (*jobs)[5].turns[0].prompt);
  RandomSpec other = Spec();
  other.seed = 8;
  EXPECT_NE((*RandomWorkload(other))[5].turns[0].prompt, (*jobs)[5].turns[0].prompt);
}

TEST(RandomWorkloadTest, RangeRatioAndSharedPrefix) {
  RandomSpec spec = Spec();
  spec.range_ratio = 0.5;
  spec.prefix_len = 8;
  auto jobs = RandomWorkload(spec);
  ASSERT_TRUE(jobs.ok());
  for (const Job& job : *jobs) {
    const auto& p = job.turns[0].prompt;
    EXPECT_GE(p.size(), 8u + 16);
    EXPECT_LE(p.size(), 8u + 48);
    EXPECT_GE(job.turns[0].output_len, 8);
    EXPECT_LE(job.turns[0].output_len, 24);
    EXPECT_TRUE(std::equal(p.begin(), p.begin() + 8, (*jobs)[0].turns[0].prompt.begin()));
  }
}

TEST(RandomWorkloadTest, RejectsBadSpecs) {
  RandomSpec spec = Spec();
  spec.vocab_size = 0;
  EXPECT_FALSE(RandomWorkload(spec).ok());
  spec = Spec();
  spec.input_len = 0;
  EXPECT_FALSE(RandomWorkload(spec).ok());
  spec = Spec();
  spec.range_ratio = 1;
  EXPECT_FALSE(RandomWorkload(spec).ok());
}

constexpr char kTrace[] =
    "{\"id\":0,\"session\":\"a\",\"prompt\":[1,2,3],\"output\":[4,5]}\n"
    "{\"id\":1,\"session\":\"b\",\"prompt\":[6],\"output\":[7,8,9]}\n"
    "{\"id\":2,\"session\":\"a\",\"prompt\":[10,11],\"output\":[12]}\n";

TEST(TraceWorkloadTest, OutputLengthIsLenOutputAndLinesWrap) {
  const std::string path = WriteTemp("trace", kTrace);
  auto jobs = TraceWorkload(path, 4, 0);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 4u);
  EXPECT_THAT((*jobs)[0].turns[0].prompt, ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ((*jobs)[0].turns[0].output_len, 2);
  EXPECT_EQ((*jobs)[1].turns[0].output_len, 3);
  EXPECT_EQ((*jobs)[3].turns[0].prompt, (*jobs)[0].turns[0].prompt);
  EXPECT_EQ((*TraceWorkload(path, 1, 9))[0].turns[0].output_len, 9);
  std::remove(path.c_str());
}

TEST(TraceWorkloadTest, ErrorsNameTheLine) {
  const std::string path = WriteTemp("badtrace", "{\"prompt\":[1],\"output\":[2]}\nnot json\n");
  auto jobs = TraceWorkload(path, 1, 0);
  ASSERT_FALSE(jobs.ok());
  EXPECT_THAT(std::string(jobs.status().message()), ::testing::HasSubstr(":2:"));
  EXPECT_FALSE(TraceWorkload("/nonexistent/trace.jsonl", 1, 0).ok());
  std::remove(path.c_str());
}

TEST(SessionWorkloadTest, GroupsTurnsBySessionAndCapsTheCount) {
  const std::string path = WriteTemp("sessions", kTrace);
  auto jobs = SessionWorkload(path, 3, 0);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].session_id, "a");
  EXPECT_TRUE((*jobs)[0].grow_history);
  ASSERT_EQ((*jobs)[0].turns.size(), 2u);
  EXPECT_THAT((*jobs)[0].turns[1].prompt, ::testing::ElementsAre(10, 11));
  EXPECT_EQ(CountRequests(*jobs), 3);
  auto two = SessionWorkload(path, 2, 0);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 1u);  // session a's two turns
  EXPECT_FALSE(SessionWorkload(path, 4, 0).ok());
  std::remove(path.c_str());
}

TEST(ArrivalTraceWorkloadTest, CsvAndJsonl) {
  const std::string csv = WriteTemp("arrivals.csv", "timestamp,input_len,output_len\n10.5,4,2\n10.0,3,1\n12,5,6\n");
  RandomSpec ids = Spec();
  ids.num_requests = 0;
  auto jobs = ArrivalTraceWorkload(csv, ids);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_DOUBLE_EQ((*jobs)[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ((*jobs)[1].arrival_s, 0.5);
  EXPECT_DOUBLE_EQ((*jobs)[2].arrival_s, 2);
  EXPECT_EQ((*jobs)[0].turns[0].prompt.size(), 3u);
  EXPECT_EQ((*jobs)[2].turns[0].output_len, 6);
  const std::string jsonl =
      WriteTemp("arrivals.jsonl", "{\"timestamp\":1,\"input_length\":2,\"output_length\":3}\n{\"timestamp\":0}\n");
  EXPECT_FALSE(ArrivalTraceWorkload(jsonl, ids).ok());  // second row lacks lengths
  std::remove(csv.c_str());
  std::remove(jsonl.c_str());
}

}  // namespace
}  // namespace floe::bench
