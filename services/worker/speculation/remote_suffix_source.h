// The cluster-wide global suffix tree (floe-suffix-cache) as a
// GlobalDraftSource for SuffixProposer, through SuffixCacheClient.
//
// Per step: one SuffixCacheClient::Step for the batch (the client fans out
// per replica and drops answers later than its step_deadline, a few ms), each
// entry carrying the response tokens emitted since the last acknowledged
// offset. After a late or lost answer the next Step's offset check
// (FAILED_PRECONDITION naming the server's count) resynchronises the request.
//
// Lifecycle calls never run on the engine thread: a request is registered
// (StartRequest) on a lifecycle thread the first time it is asked about, and
// joins the Step batches once that call succeeded; when it leaves the engine
// its last tokens (an append-only Step) and EndRequest go the same way, so its
// response joins the shared tree. The lifecycle queue is bounded: a full
// queue drops a Start (the request simply gets no global drafts); an End takes
// the place of the newest queued Start instead, and is dropped (the request
// stays open on the service until its TTL) only when no Start is queued.
//
// Leases: the service expires a request no call has named for its lease
// (floe-suffix-cache --request-lease-s). A request the engine stops drafting
// for (the cost model says drafts do not pay under load) is named by no Step,
// so every `lease_renewal` the lifecycle thread sends one Step naming each
// such request (no tokens, no draft asked), which renews it.
//
// Faults: a ReplicaBackoff per replica stops all calls to a replica after a
// few transport failures in a row (down, SIGKILLed, SIGSTOPped) except a
// probe after an exponential backoff; a request the service no longer knows
// (NOT_FOUND: it restarted) stops being asked. Decoding never waits past the
// step deadline and never loses tokens, only drafts.
//
// Thread: Query and Finish on the engine thread only (as Proposer).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "services/suffix_cache/client/suffix_cache_client.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"
#include "services/worker/speculation/remote_suffix_stats.h"
#include "services/worker/speculation/replica_backoff.h"
#include "services/worker/speculation/suffix_proposer.h"

namespace floe {

struct RemoteSuffixOptions {
  BackoffOptions backoff;
  int max_pending_lifecycle = 1024;  // queued Start/End calls beyond are dropped (Starts first)
  std::shared_ptr<RemoteSuffixStats> stats;  // optional; one replica per client address
  // Requests no Step named for this long get a renewal Step. Keep it well
  // under the service's lease (default 60 s).
  absl::Duration lease_renewal = absl::Seconds(20);
};

class RemoteSuffixSource final : public GlobalDraftSource {
 public:
  // `client` must outlive this source.
  RemoteSuffixSource(suffix_cache::SuffixCacheClient* client, suffix_cache::DraftParams params,
                     RemoteSuffixOptions options = {});
  // Owns the client.
  RemoteSuffixSource(std::unique_ptr<suffix_cache::SuffixCacheClient> client, suffix_cache::DraftParams params,
                     RemoteSuffixOptions options = {});
  // Stops the lifecycle thread; calls still queued are dropped.
  ~RemoteSuffixSource() override;

  void Query(std::span<const SpecSequence> batch, int max_spec_tokens, std::span<DraftProposal> out) override;
  void Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
              int32_t prompt_len) override;

  // True once every queued lifecycle call has run (false at the timeout).
  bool WaitIdle(absl::Duration timeout);

  struct Counters {
    int64_t steps = 0;           // Step calls sent
    int64_t failed_entries = 0;  // late, unavailable or out of order
  };
  const Counters& counters() const { return counters_; }
  // Renewal Steps sent (lifecycle thread).
  int64_t renewals() const { return renewals_.load(); }

 private:
  enum class State { kStarting, kLive, kGone };
  using SharedState = std::shared_ptr<std::atomic<State>>;
  struct Remote {
    std::string ns;
    int replica = 0;
    int64_t acknowledged = 0;  // response tokens the server has
    SharedState state;
  };
  struct Lifecycle {
    bool start = true;  // false: final append + EndRequest
    std::string ns, id;
    int replica = 0;
    std::vector<int32_t> tokens;  // start: the prompt; end: the whole response
    int64_t acknowledged = 0;     // end: response tokens the server had
    SharedState state;
  };

  // What the lifecycle thread needs to renew a live request's lease.
  struct Lease {
    std::string ns;
    int replica = 0;
    int64_t acknowledged = 0;
    absl::Time last_named;
    SharedState state;
  };

  void StartThread();
  // Lifecycle thread: one Step naming every live request idle past lease_renewal.
  void RenewLeases();
  Remote* Track(const SpecSequence& s);
  bool Enqueue(Lifecycle call);
  void RunLifecycle();
  void RunStart(Lifecycle& call);
  void RunEnd(Lifecycle& call);
  // Admits a call to `replica` (false: skipped, replica down).
  bool Admit(int replica, RemoteSuffixStats::Call call);
  // After an admitted call to `replica`: `code` is its google.rpc.Code (0 ok);
  // `answered_anyway`: a failure code that still proves the replica is up.
  void Report(int replica, RemoteSuffixStats::Call call, int code, bool answered_anyway = false);
  void Observe(RemoteSuffixStats::Call call, absl::Duration latency);
  void AddEntry(floe::v1::SuffixStepRequest& step, const std::string& id, const Remote& r,
                std::span<const int32_t> response, bool speculate);
  void Absorb(Remote& r, const floe::v1::SuffixDraft& result, int64_t sent_to);

  std::unique_ptr<suffix_cache::SuffixCacheClient> owned_;
  suffix_cache::SuffixCacheClient* client_;
  suffix_cache::DraftParams params_;
  RemoteSuffixOptions options_;
  ReplicaBackoff backoff_;
  // Node map: Query keeps Remote pointers across Track inserts (a flat map rehashes).
  absl::node_hash_map<std::string, Remote> live_;  // engine thread
  Counters counters_;                              // engine thread

  absl::Mutex mu_;
  std::deque<Lifecycle> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> renewals_{0};
  std::thread lifecycle_;
};

}  // namespace floe
