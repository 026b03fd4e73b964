// The Backend that talks to a Floe router: one streaming Generate call per
// request, greedy sampling, with a per-request deadline.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <grpcpp/grpcpp.h>
#include "floe/v1/router.grpc.pb.h"
#include "services/cli/bench/load_generator.h"

namespace floe::bench {

struct GrpcBackendOptions {
  std::string addr;
  bool ignore_eos = false;
  double timeout_s = 600;  // per-request deadline
  std::string model;
  int channels = 4;        // requests spread over this many HTTP/2 connections
  // Null: plaintext. Otherwise TLS (MakeChannelCredentials of --tls-*).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string api_key;     // sent as "authorization: Bearer KEY" when set
};

class GrpcBackend : public Backend {
 public:
  explicit GrpcBackend(GrpcBackendOptions options);
  void Send(const TurnRequest& request, RequestRecord* record, std::vector<int32_t>* output) override;

  absl::StatusOr<floe::v1::ModelInfo> GetModelInfo(double timeout_s) override;

 private:
  GrpcBackendOptions options_;
  std::vector<std::unique_ptr<floe::v1::Floe::Stub>> stubs_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace floe::bench
