// Routing policies: which worker serves the next request.
//
// Pick() is called on gRPC threads, concurrently; it returns a healthy worker
// not in `exclude` (workers that already failed this request). When every
// worker not in `exclude` is ejected it returns one of those anyway (panic
// routing: ejection follows slow polls, and a busy worker is slow, not
// dead); null only when every worker is in `exclude`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "services/router/worker_pool.h"

namespace floe {

struct PickRequest {
  std::string session_id;                // empty: no affinity
  std::vector<const WorkerState*> exclude;
};

class WorkerPicker {
 public:
  virtual ~WorkerPicker() = default;
  virtual WorkerState* Pick(const PickRequest& request) = 0;
};

// Fewest of the router's outstanding requests; ties go to the lower reported KV usage.
std::unique_ptr<WorkerPicker> MakeLeastOutstandingPicker(const WorkerPool* pool);

// Consistent hash of session_id over a ring (virtual nodes per worker), so an
// agent's turns land where its KV prefix is cached and a worker's loss moves
// only its own sessions. Falls back to least-outstanding without a session,
// and when the chosen worker has `overload_outstanding` requests or more.
std::unique_ptr<WorkerPicker> MakeSessionAffinityPicker(const WorkerPool* pool, int overload_outstanding);

}  // namespace floe
