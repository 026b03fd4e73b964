// SuffixCacheStore: the suffix-cache service's state without gRPC. One
// SuffixSpeculator-equivalent cache per namespace (a global tree over cached
// responses + a local tree per active request), safe for many callers at once.
// For the same sequence of calls in one namespace its drafts equal
// SuffixSpeculator's (same tree operations in the same order, same
// local/global choice, same confident-extension rule).
//
// Concurrency (why speculate does not wait behind other work):
//  - Namespaces are independent shards: nothing in one namespace waits for
//    another (the namespace map is read-locked only for a lookup).
//  - Per namespace, `tree_mu` is a reader-writer lock over the global tree.
//    Speculate takes it shared, per entry, so speculates run in parallel.
//    Appends take it exclusively per request (a few tokens: microseconds,
//    O(depth) per token), so a speculate never waits for a whole batch.
//  - Eviction removes one response per exclusive hold and drops the lock in
//    between; the victims are unlinked from the maps first. Byte-budget
//    eviction runs off the Step path (TrimToBudget, from the maintenance
//    thread). So a speculate waits at most for one request's append or one
//    response removal in its own namespace.
//  - Each active request has its own mutex over its local tree; a Step locks
//    the requests of a namespace group in address order (no deadlock between
//    batches that share requests), then spreads the entries' local appends and
//    speculates over a WorkerPool (step_threads) while it holds those locks;
//    the batch's global appends run as one more pool item beside the local
//    appends (disjoint state), and both finish before any speculate.
//  - With async_global_appends, a Step only queues its global appends
//    (pending_mu, a leaf lock) and one applier thread applies them under the
//    exclusive lock; speculates then never wait for a Step's appends.
//  - Leases: a request's last-call time is an atomic that Steps renew while
//    they hold requests_mu shared (at lookup); ExpireIdle re-reads it under
//    the exclusive hold before it removes the request, so a request a Step
//    has just looked up is never expired under it; a later Step does not
//    find it (NOT_FOUND, saying it expired).
//  Lock order: namespaces_mu_ < Namespace::requests_mu < Request::mu <
//  Namespace::apply_mu < Namespace::tree_mu; pending_mu, credit_mu and
//  dirty_mu_ are leaves. Counters are atomics.
//  Data-race freedom: every tree, map and per-request field is touched only
//  under the lock named above (const SuffixTree::Speculate has no mutable
//  state, so shared holders may run it together); a Request outlives lookups
//  through shared_ptr, and End/Abort/Clear mark it `done` under its own lock
//  so a Step that looked it up earlier sees the end. The locks are std::
//  (pthread) locks so that ThreadSanitizer sees them: scripts/tsan.sh builds
//  the store and tree with -fsanitize=thread and runs a stress test
//  (Debian's Abseil and gRPC are not TSan-built, so absl::Mutex would be
//  invisible to it).
//
// Memory: max_bytes bounds everything the store holds that grows with
// traffic, in one budget: the global trees (live nodes and the one copy of
// each cached response's tokens, as measured by TrimToBudget) plus the active
// requests' own memory (their local trees, as allocated, their context tails
// and their queued global appends: active_bytes in Stats). Making room evicts
// ended responses first (TrimToBudget: active responses and requests are
// never evicted by bytes); a StartRequest is refused (RESOURCE_EXHAUSTED,
// naming the budget) when the active requests alone, with its estimated
// local tree, would exceed max_bytes, so the requests already running keep
// being served. A local tree indexes at most max_prompt_index_tokens of its
// prompt, so one StartRequest costs at most that much whatever its length.
// max_cached_responses bounds
// each namespace's cached responses (active ones included, as in
// SuffixSpeculator). Both evict FIFO, oldest first; with eviction = kUsage a
// response whose global drafts were accepted since it was last at the front
// gets a second chance instead (moved to the back, its credit spent: the
// EvictionPolicy rule, suffix_tree/eviction_policy.h).
//
// Leases: every call naming an active request (StartRequest, each Step entry)
// renews its lease; ExpireIdle (run periodically by a LeaseReaper) ends the
// requests idle for longer than request_lease, as EndRequest would (the
// response so far stays cached), so that a worker that died without ending
// its requests does not hold their memory forever. A Step entry naming an
// expired request answers NOT_FOUND saying so.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "services/suffix_cache/snapshot.h"
#include "services/suffix_cache/suffix_tree/eviction_policy.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"
#include "services/suffix_cache/worker_pool.h"

namespace floe::suffix_cache {

struct StoreOptions {
  int max_depth = 64;
  int64_t max_cached_responses = 100000;  // per namespace; -1: unlimited
  int64_t max_bytes = int64_t{4} << 30;   // all namespaces
  // An active request's local tree indexes only its prompt's last this many
  // tokens (0: none): the tail is what the response continues and copies
  // from (the code being edited, the last tool output, the turn being
  // answered), drafts match the context's tail anyway, and the cap bounds
  // what one StartRequest can make the service hold whatever the prompt's
  // length.
  int64_t max_prompt_index_tokens = 65536;
  // An active request no call has named for longer than this is ended by
  // ExpireIdle (see "Leases" above); zero or less: never.
  std::chrono::milliseconds request_lease{60000};
  // The clock of leases; null: std::chrono::steady_clock (tests inject one).
  std::function<std::chrono::steady_clock::time_point()> clock;
  // Pool threads that share the entries of one Step (local appends and
  // speculates) with the calling thread; 0: the caller does them alone.
  int step_threads = 0;
  // false: a Step's global-tree appends are applied before it drafts (drafts
  // equal SuffixSpeculator's). true: they are queued and applied by a
  // background applier right after, so a Step never waits for the exclusive
  // lock; drafts may miss other requests' newest tokens for a step.
  // EndRequest/AbortRequest flush the queue first either way.
  bool async_global_appends = false;
  // Which ended response goes first when a bound is hit (see above). FIFO by
  // default: usage won only at 100 cached responses on the traces
  // (docs/suffix-cache.md).
  EvictionKind eviction = EvictionKind::kFifo;
  // Snapshots carry a namespace's tree image when its tree is under 16 MiB
  // or holds at most this many bytes per token; 0: never. An image restores
  // at ~15-20 ns per byte (read, checksum, copy, validate), a rebuild at
  // ~1 us per token: real text is ~10 bytes per token (shared suffixes),
  // uniform random ids ~70, where the image read slower than a rebuild.
  int max_image_bytes_per_token = 40;
};

// One request's part of a Step. Validated by the caller (ids, token range).
struct StepItem {
  std::string ns;  // already defaulted ("" -> "default")
  std::string request_id;
  int64_t response_offset = 0;
  absl::Span<const int32_t> appended;
  bool speculate = false;
  DraftParams params;
};
struct StepOutcome {
  absl::Status status;
  Draft draft;
};
// Where one Step's time went (seconds, summed over its namespaces): first
// every request's local append and local draft, with the global tree's
// appends (or their queueing) beside them; then the global tree's drafts.
struct StepTimings {
  int entries = 0;
  double appends_local_drafts_seconds = 0;
  double global_drafts_seconds = 0;
};

struct NamespaceStats {
  std::string name;
  int64_t active = 0;
  int64_t cached = 0;
  int64_t cached_tokens = 0;
  int64_t tree_bytes = 0;
  int64_t nodes = 0;  // nodes of the namespace's global tree
};
struct StoreStats {
  int64_t active = 0;
  int64_t cached = 0;
  int64_t cached_tokens = 0;
  int64_t bytes = 0;  // the global trees' estimate (as TrimToBudget measures)
  // The active requests' own memory (local trees, context tails, queued
  // global appends); bytes + active_bytes is what max_bytes bounds.
  int64_t active_bytes = 0;
  int64_t nodes = 0;
  int64_t evictions_total = 0;
  int64_t budget_evictions_total = 0;  // of evictions_total, those over max_bytes
  int64_t expired_total = 0;           // requests ended by ExpireIdle
  int64_t refused_starts_total = 0;    // StartRequests refused over max_bytes
  std::vector<NamespaceStats> namespaces;
};

class SuffixCacheStore {
 public:
  explicit SuffixCacheStore(const StoreOptions& options);
  ~SuffixCacheStore();

  // AlreadyExists if active; an ended id's cached response is replaced.
  // ResourceExhausted, naming max_bytes, when the active requests with this
  // one's estimated memory would exceed it.
  absl::Status StartRequest(const std::string& ns, const std::string& request_id,
                            absl::Span<const int32_t> prompt);
  // Appends and drafts for every item; outcomes[i] answers items[i]. Items
  // must name distinct (ns, request_id) pairs. `timings`, when given, gets
  // the append and speculate time.
  std::vector<StepOutcome> Step(const std::vector<StepItem>& items, StepTimings* timings = nullptr);
  // NotFound if not active. Returns whether the response is still cached.
  absl::StatusOr<bool> EndRequest(const std::string& ns, const std::string& request_id);
  // NotFound if not active.
  absl::Status AbortRequest(const std::string& ns, const std::string& request_id);
  // Returns {dropped cached, dropped active}. Like EndRequest, it flushes
  // the namespace's queued appends: their bytes are back on return.
  std::pair<int64_t, int64_t> ClearNamespace(const std::string& ns);
  // async_global_appends: blocks until every append queued before the call
  // is applied (and its bytes released). A Step on a namespace cleared under
  // it queues appends no EndRequest flushes; only the applier does. Tests
  // call this before they read the accounting.
  void WaitForAppends();

  // Re-measures memory and evicts the oldest ended responses (any namespace)
  // until the global trees and the active requests together are within
  // max_bytes (or nothing ended is left). Returns the number evicted.
  int64_t TrimToBudget();

  // Ends (as EndRequest) every active request whose lease has run out: no
  // call named it for longer than request_lease. Returns what it expired.
  struct Expired {
    std::string ns;
    std::string request_id;
    std::chrono::milliseconds idle{0};  // since the last call naming it
    int64_t bytes = 0;                  // its memory, now released
  };
  std::vector<Expired> ExpireIdle();
  StoreStats Stats() const;
  // Slow, for tests, with no call running: every tree's CheckIntegrity, the
  // cached token counts, and the memory accounting (each active request's
  // counted bytes against a fresh measurement; their sum with the queued
  // appends against active_bytes).
  absl::Status CheckIntegrity() const;

  // Ended cached responses, FIFO order per namespace, with an image of each
  // namespace's global tree (copied under the shared tree lock) where
  // max_image_bytes_per_token allows.
  SnapshotData ExportSnapshot() const;
  // Restores the trees from a snapshot (call before serving): from a
  // namespace's tree image when it loads and holds exactly the responses'
  // tokens (the image's other sequences, requests that were active at export,
  // are removed), else rebuilt from the tokens. Namespaces run in parallel
  // (one thread each, up to the hardware's threads); the tokens move into the
  // cache.
  struct ImportReport {
    int namespaces_from_image = 0;
    int namespaces_rebuilt = 0;
    std::vector<std::string> image_problems;  // why an image was not used
  };
  ImportReport ImportSnapshot(SnapshotData data);

  const StoreOptions& options() const { return options_; }

 private:
  struct Namespace;
  struct Request;
  std::shared_ptr<Namespace> FindNamespace(const std::string& ns) const;
  std::shared_ptr<Namespace> GetOrCreateNamespace(const std::string& ns);
  std::vector<std::shared_ptr<Namespace>> AllNamespaces() const;
  void StepNamespace(const std::shared_ptr<Namespace>& ns, const std::vector<StepItem>& items,
                     const std::vector<size_t>& indices, std::vector<StepOutcome>* out, StepTimings* timings);
  void RemoveFromTree(Namespace& ns, const std::vector<int32_t>& seq_ids);
  bool AdoptTreeImage(Namespace& ns, SnapshotNamespace& in, size_t first, uint64_t first_order, std::string* why);
  void ApplyAppend(Namespace& ns, const std::string& id, absl::Span<const int32_t> tokens);
  void FlushPending(Namespace& ns);
  // Removes an active request (marks it done, flushes its pending appends);
  // null when the namespace or the request is unknown.
  std::shared_ptr<Namespace> RetireActive(const std::string& ns_name, const std::string& request_id);
  // Marks a request removed from its namespace's map as done and releases
  // its bytes (takes its lock). Returns the bytes released.
  int64_t MarkDone(Request& request, bool expired);
  // NotFound for a request that is not active, saying so when it expired;
  // ExpiredResponse: whether `request_id` is a response ExpireIdle ended.
  absl::Status NotActiveError(const std::string& ns_name, const std::string& request_id, bool expired) const;
  bool ExpiredResponse(const std::string& ns_name, const std::string& request_id) const;
  std::chrono::steady_clock::time_point Now() const;
  void ApplierLoop();

  StoreOptions options_;
  mutable std::shared_mutex namespaces_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Namespace>> namespaces_;  // guarded by namespaces_mu_
  std::atomic<uint64_t> next_order_{0};  // FIFO position across namespaces
  std::atomic<int64_t> evictions_total_{0};
  std::atomic<int64_t> budget_evictions_total_{0};
  std::atomic<int64_t> bytes_{0};         // the global trees, as TrimToBudget last measured
  std::atomic<int64_t> active_bytes_{0};  // sum of the active requests' and queued appends' bytes
  std::atomic<int64_t> expired_total_{0};
  std::atomic<int64_t> refused_starts_total_{0};
  std::unique_ptr<WorkerPool> pool_;
  std::mutex dirty_mu_;  // namespaces with pending appends (async mode)
  std::condition_variable dirty_cv_;
  std::deque<std::shared_ptr<Namespace>> dirty_;  // guarded by dirty_mu_
  bool stop_ = false;                             // guarded by dirty_mu_
  bool applying_ = false;  // the applier holds a namespace popped from dirty_ (dirty_mu_)
  std::condition_variable idle_cv_;  // dirty_ drained and nothing applying
  std::thread applier_;
};

}  // namespace floe::suffix_cache
