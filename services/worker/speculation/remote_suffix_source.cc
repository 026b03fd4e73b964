#include "services/worker/speculation/remote_suffix_source.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "common/log/log.h"

namespace floe {
namespace {
absl::string_view Sv(std::string_view v) { return absl::string_view(v.data(), v.size()); }
// google.rpc.Code values the service and the client answer with.
constexpr int kCancelled = 1;
constexpr int kDeadlineExceeded = 4;
constexpr int kNotFound = 5;
constexpr int kResourceExhausted = 8;
constexpr int kFailedPrecondition = 9;
constexpr int kUnavailable = 14;

// Codes that say the replica did not answer (as opposed to answering "no").
bool IsTransportFailure(int code) {
  return code == kDeadlineExceeded || code == kUnavailable || code == kCancelled || code == kResourceExhausted;
}

RemoteSuffixStats::Failure FailureOf(int code) {
  if (code == kDeadlineExceeded) return RemoteSuffixStats::kTimeout;
  if (code == kUnavailable) return RemoteSuffixStats::kUnavailable;
  return RemoteSuffixStats::kOther;
}
}  // namespace

RemoteSuffixSource::RemoteSuffixSource(suffix_cache::SuffixCacheClient* client, suffix_cache::DraftParams params,
                                       RemoteSuffixOptions options)
    : client_(client),
      params_(params),
      options_(std::move(options)),
      backoff_(static_cast<int>(client->addresses().size()), options_.backoff) {
  StartThread();
}

RemoteSuffixSource::RemoteSuffixSource(std::unique_ptr<suffix_cache::SuffixCacheClient> client,
                                       suffix_cache::DraftParams params, RemoteSuffixOptions options)
    : owned_(std::move(client)),
      client_(owned_.get()),
      params_(params),
      options_(std::move(options)),
      backoff_(static_cast<int>(client_->addresses().size()), options_.backoff) {
  StartThread();
}

void RemoteSuffixSource::StartThread() {
  lifecycle_ = std::thread([this] { RunLifecycle(); });
}

RemoteSuffixSource::~RemoteSuffixSource() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  lifecycle_.join();
}

bool RemoteSuffixSource::WaitIdle(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

bool RemoteSuffixSource::Enqueue(Lifecycle call) {
  absl::MutexLock l(&mu_);
  if (static_cast<int>(queue_.size()) >= options_.max_pending_lifecycle) {
    if (options_.stats) options_.stats->RecordDroppedLifecycle();
    // A dropped Start only costs its request global drafts; a dropped End
    // leaves the request open on the service until its TTL. So an End takes
    // the place of the newest queued Start (whose request then never
    // registers, and whose own End is never queued), if there is one.
    // The order stays FIFO: an End still runs after its own Start.
    auto start = std::find_if(queue_.rbegin(), queue_.rend(), [](const Lifecycle& c) { return c.start; });
    if (call.start || start == queue_.rend()) return false;
    start->state->store(State::kGone);
    queue_.erase(std::next(start).base());
  }
  queue_.push_back(std::move(call));
  return true;
}

void RemoteSuffixSource::RunLifecycle() {
  absl::Time next_renewal = absl::Now() + options_.lease_renewal / 2;
  while (true) {
    Lifecycle call;
    bool renew = false;
    {
      absl::MutexLock l(&mu_);
      busy_ = false;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.AwaitWithDeadline(absl::Condition(&ready), next_renewal);
      if (stopping_) return;
      busy_ = true;
      // Renewals go out on time even while Start/End calls keep coming.
      if (queue_.empty() || absl::Now() >= next_renewal) {
        renew = true;
      } else {
        call = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (renew) {
      RenewLeases();
      next_renewal = absl::Now() + options_.lease_renewal / 2;
      continue;
    }
    if (call.start) {
      RunStart(call);
    } else {
      RunEnd(call);
    }
  }
}

bool RemoteSuffixSource::Admit(int replica, RemoteSuffixStats::Call call) {
  switch (backoff_.Admit(replica, absl::Now())) {
    case ReplicaBackoff::Gate::kSend:
      return true;
    case ReplicaBackoff::Gate::kProbe:
      if (options_.stats) options_.stats->RecordProbe(replica);
      return true;
    case ReplicaBackoff::Gate::kSkip:
      break;
  }
  if (options_.stats) options_.stats->RecordSkipped(call);
  return false;
}

void RemoteSuffixSource::Report(int replica, RemoteSuffixStats::Call call, int code, bool answered_anyway) {
  if (options_.stats && code != 0) options_.stats->RecordFailure(call, FailureOf(code));
  const bool answered = answered_anyway || !IsTransportFailure(code);
  if (!backoff_.Report(replica, answered, absl::Now())) return;
  if (options_.stats) options_.stats->RecordReplicaState(replica, answered);
  LogEvent(answered ? LogLevel::kInfo : LogLevel::kWarning, "worker",
           answered ? "suffix_cache_reconnected" : "suffix_cache_unreachable",
           {{"replica", client_->addresses().at(static_cast<size_t>(replica))}});
}

void RemoteSuffixSource::Observe(RemoteSuffixStats::Call call, absl::Duration latency) {
  if (options_.stats) options_.stats->RecordCall(call, latency);
}

void RemoteSuffixSource::RunStart(Lifecycle& call) {
  if (!Admit(call.replica, RemoteSuffixStats::kStart)) {
    call.state->store(State::kGone);
    return;
  }
  const absl::Time begin = absl::Now();
  absl::Status s = client_->StartRequest(call.ns, call.id, call.tokens);
  Observe(RemoteSuffixStats::kStart, absl::Now() - begin);
  // RESOURCE_EXHAUSTED from StartRequest is the service answering that its
  // --max-bytes budget is full: the replica is up, this request just gets
  // no global drafts (backing the replica off would cost every request).
  const bool full = s.code() == absl::StatusCode::kResourceExhausted;
  Report(call.replica, RemoteSuffixStats::kStart, static_cast<int>(s.code()), full);
  call.state->store(s.ok() ? State::kLive : State::kGone);
  if (!s.ok()) return;
  absl::MutexLock l(&mu_);
  leases_[call.id] = Lease{call.ns, call.replica, 0, absl::Now(), call.state};
}

void RemoteSuffixSource::RenewLeases() {
  floe::v1::SuffixStepRequest step;
  std::vector<SharedState> states;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    for (auto it = leases_.begin(); it != leases_.end();) {
      Lease& lease = it->second;
      if (lease.state->load() != State::kLive) {
        leases_.erase(it++);
        continue;
      }
      if (now - lease.last_named >= options_.lease_renewal && backoff_.Admit(lease.replica, now) != ReplicaBackoff::Gate::kSkip) {
        auto* e = step.add_entries();
        e->set_namespace_(lease.ns);
        e->set_request_id(it->first);
        // Naming the request is what renews it; an offset the engine has
        // since moved past only makes the entry answer FAILED_PRECONDITION.
        e->set_response_offset(lease.acknowledged);
        e->set_speculate(false);
        states.push_back(lease.state);
        lease.last_named = now;
      }
      ++it;
    }
  }
  if (states.empty()) return;
  renewals_.fetch_add(1);
  floe::v1::SuffixStepResponse resp = client_->Step(step);
  for (int k = 0; k < resp.results_size() && k < static_cast<int>(states.size()); ++k) {
    const floe::v1::SuffixDraft& d = resp.results(k);
    if (d.code() == kNotFound || (d.code() == kFailedPrecondition && d.error().find("has ended") != std::string::npos))
      states[static_cast<size_t>(k)]->store(State::kGone);
  }
}

void RemoteSuffixSource::RunEnd(Lifecycle& call) {
  {
    absl::MutexLock l(&mu_);
    leases_.erase(call.id);  // Finish may have run before its Start did
  }
  if (call.state->load() != State::kLive) return;  // never started, or the service forgot it
  if (call.acknowledged < static_cast<int64_t>(call.tokens.size())) {
    // The last tokens, then End: the whole response joins the global tree.
    if (!Admit(call.replica, RemoteSuffixStats::kEnd)) return;
    Remote r{call.ns, call.replica, call.acknowledged, call.state};
    floe::v1::SuffixStepRequest step;
    AddEntry(step, call.id, r, call.tokens, false);
    const absl::Time begin = absl::Now();
    floe::v1::SuffixStepResponse resp = client_->Step(step);
    Observe(RemoteSuffixStats::kEnd, absl::Now() - begin);
    Report(call.replica, RemoteSuffixStats::kEnd, resp.results_size() > 0 ? resp.results(0).code() : kUnavailable);
    // Late or not, End follows: the service keeps what it got.
  }
  if (!Admit(call.replica, RemoteSuffixStats::kEnd)) return;
  const absl::Time begin = absl::Now();
  absl::StatusOr<bool> ended = client_->EndRequest(call.ns, call.id);
  Observe(RemoteSuffixStats::kEnd, absl::Now() - begin);
  Report(call.replica, RemoteSuffixStats::kEnd, static_cast<int>(ended.status().code()));
}

RemoteSuffixSource::Remote* RemoteSuffixSource::Track(const SpecSequence& s) {
  auto it = live_.find(Sv(s.request_id));
  if (it == live_.end()) {
    Remote r;
    r.ns = std::string(s.ns);
    r.replica = client_->ReplicaFor(Sv(s.ns));
    r.state = std::make_shared<std::atomic<State>>(State::kStarting);
    Lifecycle start{true, r.ns, std::string(s.request_id), r.replica,
                    std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.prompt_len), 0, r.state};
    if (!Enqueue(std::move(start))) r.state->store(State::kGone);
    it = live_.emplace(std::string(s.request_id), std::move(r)).first;
  }
  return it->second.state->load() == State::kLive ? &it->second : nullptr;
}

void RemoteSuffixSource::AddEntry(floe::v1::SuffixStepRequest& step, const std::string& id, const Remote& r,
                                  std::span<const int32_t> response, bool speculate) {
  auto* e = step.add_entries();
  e->set_namespace_(r.ns);
  e->set_request_id(id);
  e->set_response_offset(r.acknowledged);
  const size_t from = static_cast<size_t>(r.acknowledged);
  if (from < response.size()) e->mutable_appended()->Add(response.begin() + from, response.end());
  e->set_speculate(speculate);
}

void RemoteSuffixSource::Absorb(Remote& r, const floe::v1::SuffixDraft& result, int64_t sent_to) {
  if (result.code() == 0) {
    r.acknowledged = sent_to;
    return;
  }
  ++counters_.failed_entries;
  // Restarted or expired (NOT_FOUND), or ended (FAILED_PRECONDITION "has
  // ended"): the service takes no more from this request; stop asking.
  if (result.code() == kNotFound || (result.code() == kFailedPrecondition &&
                                     result.error().find("has ended") != std::string::npos)) {
    r.state->store(State::kGone);
    return;
  }
  if (result.code() != kFailedPrecondition) return;  // late or unavailable: resend next step
  // "... the request has N response tokens": take the server's count.
  const std::string& msg = result.error();
  const size_t at = msg.rfind("has ");
  if (at == std::string::npos || msg.find(" response tokens", at) == std::string::npos) return;
  const int64_t n = std::strtoll(msg.c_str() + at + 4, nullptr, 10);
  if (n >= 0 && n <= sent_to) r.acknowledged = n;
}

void RemoteSuffixSource::Query(std::span<const SpecSequence> batch, int max_spec_tokens,
                               std::span<DraftProposal> out) {
  floe::v1::SuffixStepRequest step;
  // Every entry carries its own params (its draft cap); the step's are unset.
  floe::v1::SpeculateParams params = suffix_cache::ToSpeculateParams(params_);
  params.set_use_tree_spec(false);
  // Per replica: -1 not asked yet, 0 skipped (down), 1 admitted.
  std::vector<int> admitted(client_->addresses().size(), -1);
  std::vector<std::pair<size_t, Remote*>> sent;
  for (size_t i = 0; i < batch.size(); ++i) {
    Remote* r = Track(batch[i]);
    if (!r) continue;
    int& gate = admitted[static_cast<size_t>(r->replica)];
    if (gate < 0) gate = Admit(r->replica, RemoteSuffixStats::kStep) ? 1 : 0;
    if (gate == 0) continue;
    AddEntry(step, std::string(batch[i].request_id), *r, batch[i].tokens.subspan(batch[i].prompt_len), true);
    // The proposer's cap (max_spec_tokens) and the engine's for this request.
    params.set_max_spec_tokens(std::max(1, std::min(batch[i].max_draft, max_spec_tokens)));
    *step.mutable_entries(step.entries_size() - 1)->mutable_params() = params;
    sent.emplace_back(i, r);
  }
  if (sent.empty()) return;
  ++counters_.steps;
  const absl::Time begin = absl::Now();
  floe::v1::SuffixStepResponse resp = client_->Step(step);
  Observe(RemoteSuffixStats::kStep, absl::Now() - begin);
  // Per replica, the transport outcome: answered if any entry was answered.
  std::vector<int> outcome(admitted.size(), -1);  // -1 none, else a code (0: answered)
  for (size_t k = 0; k < sent.size() && k < static_cast<size_t>(resp.results_size()); ++k) {
    const auto& [i, r] = sent[k];
    const floe::v1::SuffixDraft& d = resp.results(static_cast<int>(k));
    int& o = outcome[static_cast<size_t>(r->replica)];
    if (!IsTransportFailure(d.code())) {
      o = 0;
    } else if (o != 0) {
      o = d.code();
    }
    Absorb(*r, d, static_cast<int64_t>(batch[i].tokens.size()) - batch[i].prompt_len);
    if (d.code() != 0) continue;
    out[i].tokens.assign(d.token_ids().begin(), d.token_ids().end());
    out[i].score = d.score();
  }
  for (size_t replica = 0; replica < outcome.size(); ++replica) {
    if (outcome[replica] >= 0) Report(static_cast<int>(replica), RemoteSuffixStats::kStep, outcome[replica]);
  }
  // This Step named them: their leases are fresh.
  absl::MutexLock l(&mu_);
  for (const auto& [i, r] : sent) {
    auto it = leases_.find(Sv(batch[i].request_id));
    if (it == leases_.end()) continue;
    it->second.last_named = begin;
    it->second.acknowledged = r->acknowledged;
  }
}

void RemoteSuffixSource::Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
                                int32_t prompt_len) {
  (void)ns;
  auto it = live_.find(Sv(request_id));
  if (it == live_.end()) return;
  Remote& r = it->second;
  {
    absl::MutexLock l(&mu_);
    leases_.erase(Sv(request_id));
  }
  if (r.state->load() != State::kGone) {
    // Queued behind its Start (FIFO), so the lifecycle thread sees the outcome.
    Lifecycle end{false, r.ns, std::string(request_id), r.replica,
                  std::vector<int32_t>(tokens.begin() + prompt_len, tokens.end()), r.acknowledged, r.state};
    (void)Enqueue(std::move(end));
  }
  live_.erase(it);
}

}  // namespace floe
