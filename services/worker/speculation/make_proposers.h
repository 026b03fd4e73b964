// The worker's speculation settings (floe-worker flags) turned into proposers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "services/worker/speculation/proposer.h"
#include "services/worker/speculation/remote_suffix_stats.h"

namespace floe {

struct SpeculationConfig {
  std::string method = "off";  // off | ngram | suffix
  int num_tokens = 4;          // k
  // suffix only: floe-suffix-cache replicas ("host:port") serving the
  // cluster-wide tree; empty: this worker's own global tree only.
  std::vector<std::string> suffix_cache_addresses;
  int suffix_cache_deadline_ms = 5;  // per step; later drafts are dropped
  // Optional: what the worker sees of the replicas (for /metrics), one
  // replica per address in order.
  std::shared_ptr<RemoteSuffixStats> suffix_cache_stats;
  bool tree = false;  // suffix only: tree drafts (k = tree nodes) instead of paths
  // suffix only: Arctic Inference's drafts exactly, instead of Floe's
  // default mode (suffix_tree.h ApplyDefaultMode: more accepted tokens per
  // step on the dev traces at every budget, as sure or surer).
  bool reference_compatible = false;
  // TLS towards the suffix-cache (common/rpc/tls.h); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// INVALID_ARGUMENT naming the method when unknown, and naming --suffix-cache
// when addresses are given to a method other than suffix. "off" gives no
// proposers.
absl::StatusOr<std::vector<std::unique_ptr<Proposer>>> MakeProposers(const SpeculationConfig& config);

}  // namespace floe
