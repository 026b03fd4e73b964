// Greedy outputs with their top-2 logprob margins, and the comparison the
// parallel tests make against one rank: ranks that sum in another order may
// pick another token only where one rank's top-2 margin was within a
// tolerance (past such a flip the contexts differ, so the rest is not
// compared); without a tolerance the tokens and margins must be identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "floe/v1/router.grpc.pb.h"

namespace floe::testing {

// |logprob| margin below which TP ranks (their sums in another order) and
// one rank may pick differently.
constexpr double kTensorParallelMarginTolerance = 1e-3;

struct GreedyOutput {
  std::vector<int32_t> ids;
  std::vector<double> margins;  // top-2 logprob margin at each position
};

// `max_tokens` greedy tokens past EOS, with the top-2 logprobs.
floe::v1::GenerateRequest GreedyRequest(const std::string& text, int max_tokens);

// Streams `request` (a 120 s deadline); the call's failure fails the test.
GreedyOutput StreamGreedy(floe::v1::Floe::Stub& stub, const floe::v1::GenerateRequest& request);

// `got` served `want`'s tokens, a flip allowed only where `want`'s margin is
// below `margin_tolerance`; 0: bit for bit, margins included. `what` names
// the output in failures.
void ExpectSameGreedyTokens(const GreedyOutput& got, const GreedyOutput& want, double margin_tolerance,
                            const std::string& what);

}  // namespace floe::testing
