// The Backend that talks to the router's OpenAI-compatible HTTP API: one
// streamed POST /v1/completions per request (token-id prompt, greedy,
// return_token_ids), timed from the server-sent events as they arrive, so
// every serving figure can be taken on the HTTP path as on gRPC.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "floe/v1/generate.pb.h"
#include "services/cli/bench/load_generator.h"

namespace floe::bench {

struct OpenAiHttpBackendOptions {
  std::string addr;  // HOST:PORT of the HTTP API
  bool ignore_eos = false;
  double timeout_s = 600;
  std::string model;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
};

class OpenAiHttpBackend : public Backend {
 public:
  explicit OpenAiHttpBackend(OpenAiHttpBackendOptions options);
  void Send(const TurnRequest& request, RequestRecord* record, std::vector<int32_t>* output) override;
  absl::StatusOr<floe::v1::ModelInfo> GetModelInfo(double timeout_s) override;

 private:
  OpenAiHttpBackendOptions options_;
  std::string host_, port_;
};

}  // namespace floe::bench
