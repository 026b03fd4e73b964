#include "tests/integration/greedy_tokens.h"

#include <chrono>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"

namespace floe::testing {

floe::v1::GenerateRequest GreedyRequest(const std::string& text, int max_tokens) {
  floe::v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_logprobs()->set_enabled(true);
  r.mutable_logprobs()->set_top_n(2);
  return r;
}

GreedyOutput StreamGreedy(floe::v1::Floe::Stub& stub, const floe::v1::GenerateRequest& request) {
  GreedyOutput out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub.Generate(&context, request);
  floe::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (!response.has_chunk()) continue;
    for (const auto& lp : response.chunk().logprobs()) {
      out.ids.push_back(lp.token_id());
      out.margins.push_back(lp.top_logprobs_size() >= 2 ? lp.top_logprobs(0) - lp.top_logprobs(1) : 1e9);
    }
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return out;
}

void ExpectSameGreedyTokens(const GreedyOutput& got, const GreedyOutput& want, double margin_tolerance,
                            const std::string& what) {
  if (margin_tolerance <= 0) {
    EXPECT_EQ(got.ids, want.ids) << what;
    EXPECT_EQ(got.margins, want.margins) << what;
    return;
  }
  ASSERT_EQ(got.ids.size(), want.ids.size()) << what;
  for (size_t t = 0; t < want.ids.size(); ++t) {
    if (got.ids[t] == want.ids[t]) continue;
    EXPECT_LT(want.margins[t], margin_tolerance) << what << " token " << t << ": a flip above the margin";
    break;  // past a flip the contexts differ
  }
}

}  // namespace floe::testing
