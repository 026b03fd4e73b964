// DraftSource: where a replay's drafts come from (replay.cc): the in-process
// speculator, the n-gram baseline, or a floe-suffix-cache service.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/suffix_cache/replay/replay.h"

namespace floe::suffix_cache {

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual absl::Status Start(const TraceRequest& r) = 0;
  // The draft for `context` (prompt + output so far), after every Append.
  virtual absl::StatusOr<Draft> Propose(const TraceRequest& r, absl::Span<const int32_t> context) = 0;
  // Tokens the step emitted.
  virtual absl::Status Append(const TraceRequest& r, absl::Span<const int32_t> tokens) = 0;
  virtual absl::Status Stop(const TraceRequest& r) = 0;
  // After a failure between Start and Stop: let go of the request (best
  // effort; a service would otherwise keep it active).
  virtual void Abandon(const TraceRequest&) {}
  // After the last request: the cache's figures into `res`.
  virtual absl::Status Finish(ReplayResult* res) = 0;
};

// A source backed by the service at options.server (remote_source.cc):
// FailedPrecondition when its configuration differs from options.speculator
// (and from Finish when the service evicted responses over its byte budget
// meanwhile, which the in-process speculator never does); the call's own
// status when GetStats fails.
absl::StatusOr<std::unique_ptr<DraftSource>> ConnectRemoteSource(const ReplayOptions& options);

}  // namespace floe::suffix_cache
