#include "services/suffix_cache/suffix_cache_flags.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"

namespace floe {

void AddSuffixCacheFlags(ArgParser& parser, SuffixCacheFlags* f) {
  suffix_cache::StoreOptions& store = f->store;
  suffix_cache::ServiceLimits& limits = f->limits;
  parser.AddString("snapshot-dir", &f->snapshot_dir, "folder of suffix-cache.snap (empty: no snapshots)");
  parser.AddInt("snapshot-interval-s", &f->snapshot_interval_s, "seconds between periodic snapshots (0: only on SIGTERM and Snapshot)");
  parser.AddInt("snapshot-image-max-bytes-per-token", &store.max_image_bytes_per_token,
                "snapshots carry a namespace's tree image (restores at copy speed) when its tree is under 16 MiB "
                "or holds at most this many bytes per cached token; 0: tokens only (rebuilt on restore)");
  parser.AddInt("max-depth", &store.max_depth, "suffix tree depth (longest match + draft)");
  parser.AddInt64("max-prompt-index-tokens", &store.max_prompt_index_tokens,
                  "a request's local tree indexes only its prompt's last this many tokens (the tail is what a "
                  "response continues and copies from; the cap bounds one StartRequest's memory)");
  parser.AddInt64("max-cached-responses", &store.max_cached_responses,
                  "cached responses per namespace, FIFO beyond (-1: unlimited, 0: no global tree)");
  parser.AddInt64("max-bytes", &store.max_bytes,
                  "memory budget of the global trees and the active requests together: oldest ended responses "
                  "evicted beyond; a StartRequest whose request would take the active ones alone beyond it is "
                  "refused (RESOURCE_EXHAUSTED)");
  parser.AddDouble("request-lease-s", &f->request_lease_s,
                   "an active request no call (Step, StartRequest) names for this many seconds is expired: ended as "
                   "by EndRequest, its memory released, later Steps naming it answer NOT_FOUND (0: never)");
  parser.AddInt("max-batch", &limits.max_batch, "most requests in one Step");
  parser.AddInt("vocab-size", &limits.vocab_size, "token ids must be below this (0: unchecked)");
  parser.AddInt("max-namespace-bytes", &limits.max_namespace_bytes, "longest namespace");
  parser.AddInt("max-spec-tokens", &limits.max_spec_tokens, "largest max_spec_tokens a Step may ask for");
  parser.AddInt("max-concurrent-calls", &limits.max_concurrent_calls, "calls served at once (beyond: RESOURCE_EXHAUSTED)");
  parser.AddInt("max-threads", &f->max_threads, "gRPC server threads");
  store.step_threads = std::min(15, std::max(0, static_cast<int>(std::thread::hardware_concurrency()) - 1));
  parser.AddBool("async-global-appends", &store.async_global_appends,
                 "apply a Step's global-tree appends after answering (drafts may lag a step; faster Steps)");
  parser.AddInt("step-threads", &store.step_threads,
                "threads sharing one Step's entries with the calling thread (default: cores - 1, at most 15)");
  parser.AddString("eviction", &f->eviction,
                   "fifo | usage (FIFO with a second chance for responses whose drafts were accepted)");
}

absl::StatusOr<SuffixCachePlan> PlanSuffixCache(const SuffixCacheFlags& f) {
  SuffixCachePlan plan{f.store, f.limits};
  if (plan.store.max_depth < 2 || plan.store.max_depth > 1024 || plan.limits.max_batch < 1 ||
      plan.limits.max_concurrent_calls < 1 || plan.store.max_bytes < 0 || plan.store.max_image_bytes_per_token < 0 ||
      plan.store.max_prompt_index_tokens < 0 || !(f.request_lease_s >= 0 && f.request_lease_s <= 1e6)) {
    return absl::InvalidArgumentError(
        "--max-depth must be in [2, 1024]; --max-batch, --max-concurrent-calls >= 1; --max-bytes, "
        "--snapshot-image-max-bytes-per-token, --max-prompt-index-tokens >= 0; --request-lease-s in [0, 1e6]");
  }
  plan.store.request_lease = std::chrono::milliseconds(
      f.request_lease_s > 0 ? std::max<int64_t>(1, std::llround(f.request_lease_s * 1000)) : 0);
  auto kind = suffix_cache::ParseEvictionKind(f.eviction);
  if (!kind.ok()) return absl::InvalidArgumentError(absl::StrCat("--eviction: ", kind.status().message()));
  plan.store.eviction = *kind;
  if (!f.snapshot_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.snapshot_dir, ec);
    plan.limits.snapshot_path = (std::filesystem::path(f.snapshot_dir) / "suffix-cache.snap").string();
  }
  return plan;
}

}  // namespace floe
