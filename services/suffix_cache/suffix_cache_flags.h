// floe-suffix-cache's own flags (the ones every service shares are
// common/service/service_bootstrap.h's) and the store options and service
// limits main() derives from them, checked before anything starts.
//
// Thread: main's, at start.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "services/suffix_cache/suffix_cache_service.h"
#include "services/suffix_cache/suffix_cache_store.h"

namespace floe {

class ArgParser;

struct SuffixCacheFlags {
  std::string snapshot_dir;
  int snapshot_interval_s = 300;
  int max_threads = 64;
  double request_lease_s = 60;
  std::string eviction = "fifo";
  suffix_cache::StoreOptions store;  // the flags write into it; PlanSuffixCache finishes it
  suffix_cache::ServiceLimits limits;
};

// Registers the flags; the store's step-thread default depends on the cores.
void AddSuffixCacheFlags(ArgParser& parser, SuffixCacheFlags* flags);

struct SuffixCachePlan {
  suffix_cache::StoreOptions store;
  suffix_cache::ServiceLimits limits;  // with the snapshot path, its folder made
};
// INVALID_ARGUMENT naming the flags (exit 2).
absl::StatusOr<SuffixCachePlan> PlanSuffixCache(const SuffixCacheFlags& flags);

}  // namespace floe
