// The worker's speculation settings (floe-worker flags) turned into proposers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "common/auth/internal_trust.h"
#include "services/worker/speculation/proposer.h"
#include "services/worker/speculation/remote_suffix_stats.h"

namespace floe {

struct SpeculationConfig {
  std::string method = "off";  // off | ngram | suffix | lstm | suffix+lstm
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
  // The internal key the suffix-cache calls carry (common/auth/
  // internal_trust.h); null: none.
  std::shared_ptr<const InternalTrust> internal_trust;
  // lstm, suffix+lstm: the Arctic speculator's folder (lstm_speculator.h),
  // its matmul threads, and the served model it must fit (hidden size and
  // vocabulary; 0: not checked).
  std::string speculator_dir;
  int speculator_threads = 1;
  int64_t target_hidden_size = 0;
  int64_t target_vocab_size = 0;
  std::string target_name;
};

// INVALID_ARGUMENT naming the method when unknown, naming --suffix-cache
// when addresses are given to a method without suffix drafts, and naming
// --speculator when it is missing for (or given to a method without) lstm;
// the speculator's own load errors, and FAILED_PRECONDITION when it does not
// fit the target. "off" gives no proposers; suffix+lstm gives the suffix
// proposer, then the lstm one.
absl::StatusOr<std::vector<std::unique_ptr<Proposer>>> MakeProposers(const SpeculationConfig& config);

}  // namespace floe
