// SuffixSpeculator: Suffix Decoding's request-level cache. Each active
// request has a local tree over its prompt and its own response; one global
// tree holds the responses of recent requests (beyond max_cached_requests
// one is evicted: FIFO, or usage-aware, see eviction_policy.h). A draft comes from whichever tree scores higher; the
// local tree wins ties.
//
// Lifecycle per request: StartRequest(prompt) -> {Speculate, AppendTokens}*
// -> StopRequest. The response stays in the global tree after StopRequest
// until evicted. Semantics follow Arctic Inference's SuffixDecodingCache
// (sequence ids, FIFO order that never evicts the newest, re-starting a
// request id replaces its cached response).
//
// Thread-safety: none. One thread owns the speculator (the worker's spec
// decode step, or the replay tool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "services/suffix_cache/suffix_tree/draft_feedback.h"
#include "services/suffix_cache/suffix_tree/eviction_policy.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"

namespace floe::suffix_cache {

struct SpeculatorConfig {
  int max_depth = 64;
  // -1: unlimited; 0: no global tree.
  int64_t max_cached_requests = 100000;
  // Which cached response goes first. kUsage credits a response with the
  // accepted tokens of global drafts read from it (Draft::source_seq).
  EvictionKind eviction = EvictionKind::kFifo;
};

class SuffixSpeculator {
 public:
  explicit SuffixSpeculator(const SpeculatorConfig& config);

  // InvalidArgument if `request_id` is already active.
  absl::Status StartRequest(absl::string_view request_id, absl::Span<const int32_t> prompt);
  // Appends emitted tokens to the request's response (local and, while
  // cached, global tree). NotFound if the request is not active.
  absl::Status AppendTokens(absl::string_view request_id, absl::Span<const int32_t> tokens);
  // Drops the local tree; the response stays cached. NotFound if not active.
  absl::Status StopRequest(absl::string_view request_id);
  // Removes a cached response. NotFound if not cached.
  absl::Status EvictCachedResponse(absl::string_view request_id);

  // Draft for `context` (normally prompt + response so far; only its last
  // max_depth tokens are used). NotFound if the request is not active.
  // The request's DraftFeedback adjusts `params` per tree: confident_prob
  // applies only to the local tree and only while the request's previous
  // draft was accepted in full (as seen by the next AppendTokens), see
  // draft_feedback.h.
  absl::StatusOr<Draft> Speculate(absl::string_view request_id,
                                  absl::Span<const int32_t> context,
                                  const DraftParams& params);

  const SpeculatorConfig& config() const { return config_; }
  const SuffixTree& global_tree() const { return global_; }
  int num_active() const { return static_cast<int>(active_.size()); }
  int num_cached() const { return static_cast<int>(cached_.size()); }
  int64_t num_evictions() const { return num_evictions_; }
  // Bytes in all local trees.
  size_t LocalMemoryUsage() const;

 private:
  struct Cached {
    int32_t seq_id;
  };
  int32_t AllocateSeqId(const std::string& request_id);
  void EvictBeyondLimit(int32_t newest_seq_id);
  absl::Status Evict(const std::string& request_id);

  SpeculatorConfig config_;
  SuffixTree global_;
  struct Active {
    std::unique_ptr<SuffixTree> local;
    DraftFeedback feedback;
    int32_t last_source = -1;  // global sequence the last draft came from
  };
  absl::flat_hash_map<std::string, Active> active_;
  absl::flat_hash_map<std::string, Cached> cached_;
  absl::flat_hash_map<int32_t, std::string> request_of_seq_;
  EvictionPolicy eviction_;
  int64_t num_evictions_ = 0;
  int32_t next_seq_id_ = 0;
};

}  // namespace floe::suffix_cache
