// SuffixCacheService: floe.v1.SuffixCache over a SuffixCacheStore
// (docs/suffix-cache.md). Validates input (limits named in the message),
// bounds concurrent calls (beyond max_concurrent_calls: RESOURCE_EXHAUSTED at
// once, never queued) and the store's memory (a StartRequest over --max-bytes:
// RESOURCE_EXHAUSTED from the store), answers UNAVAILABLE while restoring or
// draining, and writes/restores snapshots.
//
// Internal trust (common/auth/internal_trust.h), when on: StartRequest,
// Step, EndRequest and AbortRequest need the internal key the workers send
// (UNAUTHENTICATED without it; checked before anything else, so a caller
// without it learns nothing of the store). GetStats takes the internal key
// (everything), an admin key from --admin-key-file (everything) or a
// tenant's key from that file: then only the namespaces the router gives
// that tenant (TENANT, TENANT/...), with totals over them; the service-wide
// counters (steps, drafts, evictions, refusals) sum every tenant's traffic
// and read 0. Snapshot and ClearNamespace: an admin key, else (no
// --admin-key-file) the internal key. With internal trust off every call but
// the admin ones is open, as before.
//
// Thread-safety: every method may be called from any thread; gRPC calls run
// concurrently (the store does the locking, see suffix_cache_store.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/auth/api_keys.h"
#include "common/auth/internal_trust.h"
#include "floe/v1/suffix_cache.grpc.pb.h"
#include "services/suffix_cache/suffix_cache_store.h"

namespace floe::suffix_cache {

struct ServiceLimits {
  int max_batch = 256;              // entries per Step
  int32_t vocab_size = 0;           // > 0: token ids must be < vocab_size
  int max_namespace_bytes = 128;
  int max_request_id_bytes = 256;
  int max_spec_tokens = 64;         // upper bound of SpeculateParams.max_spec_tokens
  int max_concurrent_calls = 256;
  std::string snapshot_path;        // "" : no snapshots
};

struct SnapshotInfo {
  std::string path;
  int64_t bytes = 0;
  int64_t responses = 0;
};

class SuffixCacheService final : public floe::v1::SuffixCache::Service {
 public:
  // `store` must outlive the service. Starts not accepting calls.
  // `internal_trust` null or disabled: the engine calls are open.
  SuffixCacheService(SuffixCacheStore* store, ServiceLimits limits,
                     std::shared_ptr<const InternalTrust> internal_trust = nullptr);

  // Restores limits().snapshot_path when it exists; a corrupt or truncated
  // file is logged (event snapshot_corrupt), moved aside to PATH.corrupt and
  // skipped. Returns the number of responses restored.
  int64_t RestoreSnapshot();
  // Writes the snapshot now (serialized with other writers).
  absl::StatusOr<SnapshotInfo> WriteSnapshot();
  // false: every call answers UNAVAILABLE (restoring, draining).
  void SetAccepting(bool accepting) { accepting_.store(accepting); }
  // Called after every call with its method name and latency in seconds, on
  // the gRPC thread. Set before serving.
  void SetRpcObserver(std::function<void(const char* method, double seconds)> observer) {
    observer_ = std::move(observer);
  }
  // Called after every Step with the store's append and speculate time.
  void SetStepObserver(std::function<void(const StepTimings&)> observer) { step_observer_ = std::move(observer); }
  int64_t steps_total() const { return steps_total_.load(); }
  int64_t drafts_total() const { return drafts_total_.load(); }
  // Entries that asked for a draft (drafts_total / this = hit rate).
  int64_t speculate_queries_total() const { return speculate_queries_total_.load(); }
  // Calls answered RESOURCE_EXHAUSTED: over max_concurrent_calls, or a
  // StartRequest over the store's --max-bytes.
  int64_t rejected_total() const { return rejected_total_.load(); }
  int in_flight() const { return in_flight_.load(); }
  const ServiceLimits& limits() const { return limits_; }
  // Optional (--admin-key-file); set before serving, must outlive the
  // service. With keys, Snapshot and ClearNamespace need an admin key, and
  // a tenant's key reads its own namespaces' GetStats.
  void SetAdminKeys(const ApiKeys* keys) { admin_keys_ = keys; }

  grpc::Status StartRequest(grpc::ServerContext*, const floe::v1::SuffixStartRequest*,
                            floe::v1::SuffixStartResponse*) override;
  grpc::Status Step(grpc::ServerContext*, const floe::v1::SuffixStepRequest*,
                    floe::v1::SuffixStepResponse*) override;
  grpc::Status EndRequest(grpc::ServerContext*, const floe::v1::SuffixEndRequest*,
                          floe::v1::SuffixEndResponse*) override;
  grpc::Status AbortRequest(grpc::ServerContext*, const floe::v1::SuffixAbortRequest*,
                            floe::v1::SuffixAbortResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const floe::v1::SuffixStatsRequest*,
                        floe::v1::SuffixStats*) override;
  grpc::Status Snapshot(grpc::ServerContext*, const floe::v1::SuffixSnapshotRequest*,
                        floe::v1::SuffixSnapshotResponse*) override;
  grpc::Status ClearNamespace(grpc::ServerContext*, const floe::v1::SuffixClearNamespaceRequest*,
                              floe::v1::SuffixClearNamespaceResponse*) override;

 private:
  class CallSlot;
  grpc::Status AuthorizeInternal(const grpc::ServerContext& context, std::string_view call) const;
  // Whose stats a GetStats caller may read: nullopt for everything, else a
  // tenant's name; UNAUTHENTICATED when internal trust is on and the caller
  // has neither key.
  absl::StatusOr<std::optional<std::string>> StatsScope(const grpc::ServerContext& context) const;
  absl::Status CheckIds(absl::string_view field, const std::string& ns, const std::string& request_id) const;
  absl::Status CheckNamespace(absl::string_view field, const std::string& ns) const;
  absl::Status CheckTokens(absl::string_view field, const google::protobuf::RepeatedField<int32_t>& tokens) const;
  absl::StatusOr<DraftParams> ToDraftParams(absl::string_view field, const floe::v1::SpeculateParams& p) const;

  SuffixCacheStore* store_;
  const ServiceLimits limits_;
  const std::shared_ptr<const InternalTrust> internal_trust_;  // null: none
  const ApiKeys* admin_keys_ = nullptr;
  std::atomic<bool> accepting_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> steps_total_{0};
  std::atomic<int64_t> drafts_total_{0};
  std::atomic<int64_t> speculate_queries_total_{0};
  std::atomic<int64_t> rejected_total_{0};
  std::atomic<int64_t> last_snapshot_ms_{0};
  std::function<void(const char*, double)> observer_;
  std::function<void(const StepTimings&)> step_observer_;
  absl::Mutex snapshot_mu_;  // one snapshot writer at a time
};

// "" -> "default".
std::string NamespaceOrDefault(const std::string& ns);

}  // namespace floe::suffix_cache
