// SuffixCacheClient: the worker's side of floe.v1.SuffixCache.
//
// Namespaces are partitioned over replicas by consistent hashing (each
// replica owns `virtual_nodes` points of a 64-bit ring), so adding or losing
// one replica moves only that replica's share of namespaces. Step sends one
// call per replica in the batch, in parallel, each with step_deadline; an
// answer that is not back by then is dropped (its entries come back with
// DEADLINE_EXCEEDED and the engine drafts nothing for them). A replica that
// is down fails fast with UNAVAILABLE while gRPC reconnects in the background
// with exponential backoff; no call blocks its caller past its deadline.
//
// Thread-safety: all methods may be called concurrently (the engine step
// thread for Step; request threads for the lifecycle calls).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/auth/internal_trust.h"
#include "floe/v1/suffix_cache.grpc.pb.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"

namespace floe::suffix_cache {

// The wire form of `params`, every option included (the service checks the
// ranges); the service's SuffixCacheService::ToDraftParams reads it back.
floe::v1::SpeculateParams ToSpeculateParams(const DraftParams& params);

struct ClientOptions {
  std::vector<std::string> addresses;  // "host:port" per replica
  std::chrono::microseconds step_deadline{5000};
  std::chrono::milliseconds call_deadline{200};  // lifecycle and admin calls
  int initial_backoff_ms = 50;
  int max_backoff_ms = 2000;
  int virtual_nodes = 64;
  // TLS towards the replicas (common/rpc/tls.h); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The internal key every call carries, Step and the lifecycle calls alike
  // (common/auth/internal_trust.h); null: none.
  std::shared_ptr<const InternalTrust> internal_trust;
};

// Consistent-hash ring over replica indices (separate for tests and tools).
class NamespaceRing {
 public:
  NamespaceRing(const std::vector<std::string>& replicas, int virtual_nodes);
  // Replica index for a namespace ("" is "default").
  int ReplicaFor(absl::string_view ns) const;

 private:
  std::vector<std::pair<uint64_t, int>> points_;  // sorted by hash
};

class SuffixCacheClient {
 public:
  // InvalidArgument without addresses. Connects lazily.
  static absl::StatusOr<std::unique_ptr<SuffixCacheClient>> Create(const ClientOptions& options);

  int ReplicaFor(absl::string_view ns) const { return ring_.ReplicaFor(ns); }
  const std::vector<std::string>& addresses() const { return options_.addresses; }

  absl::Status StartRequest(const std::string& ns, const std::string& request_id,
                            absl::Span<const int32_t> prompt);
  // Returns whether the response was cached.
  absl::StatusOr<bool> EndRequest(const std::string& ns, const std::string& request_id);
  absl::Status AbortRequest(const std::string& ns, const std::string& request_id);
  absl::StatusOr<floe::v1::SuffixStats> GetStats(int replica);

  // One engine step: results[i] answers request.entries(i); a failed or late
  // replica call sets `code`/`error` on its entries. Returns within about
  // step_deadline.
  floe::v1::SuffixStepResponse Step(const floe::v1::SuffixStepRequest& request);

 private:
  SuffixCacheClient(const ClientOptions& options, NamespaceRing ring);
  floe::v1::SuffixCache::Stub* StubFor(const std::string& ns) { return stubs_[ring_.ReplicaFor(ns)].get(); }
  // The lifecycle calls' deadline and the internal key.
  void PrepareContext(grpc::ClientContext* ctx) const;

  ClientOptions options_;
  NamespaceRing ring_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<floe::v1::SuffixCache::Stub>> stubs_;
};

}  // namespace floe::suffix_cache
