// The key-value store a worker's ranks meet through (Gloo's rendezvous:
// each rank publishes its address, then reads the others'), when they do
// not share a folder: rank 0 serves one over gRPC (rank_store.h).
//
// Thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace floe {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The key's value once it is set; DEADLINE_EXCEEDED after `wait`.
  virtual absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds wait) = 0;
};

}  // namespace floe
