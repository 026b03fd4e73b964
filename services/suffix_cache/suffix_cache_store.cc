#include "services/suffix_cache/suffix_cache_store.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/suffix_cache/suffix_tree/draft_feedback.h"
#include "services/suffix_cache/suffix_tree/invariant.h"

namespace floe::suffix_cache {
namespace {

constexpr int32_t kLocalSeq = 0;  // the one sequence of a local tree
// Live-size estimate of a tree node (node + its share of the edge table) and
// of a cached token (its one copy, in the tree's storage: snapshots read it
// from there). Measured from live counts, not capacities: freed nodes are
// reused by later appends.
constexpr int64_t kBytesPerNode = 64;
constexpr int64_t kBytesPerToken = 4;
// Admission's estimate of a new request's memory before its local tree is
// built (then measured exactly): a small tree's fixed part, and per indexed
// prompt token what the tree allocates (70-145 B measured over vocabularies
// of 3 to 128k ids and 10 to 200k tokens; docs/suffix-cache.md).
constexpr int64_t kRequestBaseBytes = 2048;
constexpr int64_t kEstimatedBytesPerPromptToken = 100;

// A queued global append (async_global_appends), counted while it waits.
int64_t PendingBytes(const std::string& id, size_t tokens) {
  return static_cast<int64_t>(sizeof(std::pair<std::string, std::vector<int32_t>>) + id.size() +
                              tokens * sizeof(int32_t));
}

std::string Seconds(std::chrono::milliseconds d) { return absl::StrCat(static_cast<double>(d.count()) / 1000.0); }

}  // namespace

struct SuffixCacheStore::Request {
  Request(int max_depth, size_t id_bytes) : local(max_depth), fixed_bytes(sizeof(Request) + id_bytes) {}
  // What it holds now: the local tree as allocated, the context's capacity,
  // the struct and its id (mu held).
  int64_t MeasureBytes() const {
    return fixed_bytes - static_cast<int64_t>(sizeof(SuffixTree)) + static_cast<int64_t>(local.MemoryUsage()) +
           static_cast<int64_t>(context.capacity() * sizeof(int32_t));
  }
  std::mutex mu;
  SuffixTree local;
  std::vector<int32_t> context;  // tail of prompt + response
  int64_t response_len = 0;
  DraftFeedback feedback;      // the request's record: adjusts its drafts
  // Global seq id of the cached response the last proposed draft was read
  // from; -1 when it came from the local tree (or none was proposed).
  int32_t draft_source = -1;
  bool done = false;           // ended, aborted or expired while a Step held it
  bool expired = false;        // done by ExpireIdle
  const int64_t fixed_bytes;
  int64_t bytes = 0;  // counted in active_bytes_ (mu held; 0 once done)
  // Lease: the clock's time (ns since its epoch) of the last call naming it.
  std::atomic<int64_t> last_call_ns{0};
};

struct SuffixCacheStore::Namespace {
  Namespace(std::string n, int max_depth) : name(std::move(n)), global(max_depth) {}
  struct Cached {
    int32_t seq_id;
    uint64_t order;
    int64_t length;  // tokens appended to the tree so far
    bool active;
    bool expired = false;  // ended by ExpireIdle
  };
  // Unlinks a cached response; returns its seq id when the tree still holds
  // it (the caller removes it with RemoveFromTree), else -1.
  int32_t Detach(const std::string& id) {  // tree_mu held exclusively
    auto it = cached.find(id);
    if (it == cached.end()) return -1;
    const int32_t seq = it->second.seq_id;
    cached_tokens -= it->second.length;
    fifo.erase(it->second.order);
    cached.erase(it);
    {
      std::lock_guard<std::mutex> l(credit_mu);
      credits.erase(seq);
    }
    if (global.Contains(seq)) return seq;
    used_seqs.erase(seq);  // an empty response never reached the tree
    return -1;
  }
  // Records a cached response (its tokens, if any, are in `global` as seq).
  void AddCached(std::string id, int32_t seq, uint64_t order, int64_t length, bool active) {  // tree_mu held exclusively
    cached_tokens += length;
    used_seqs[seq] = true;
    fifo.emplace(order, id);
    cached[std::move(id)] = Cached{seq, order, length, active};
  }
  int32_t AllocateSeqId() {  // tree_mu held exclusively
    while (true) {
      const int32_t seq = next_seq;
      next_seq = static_cast<int32_t>((int64_t{next_seq} + 1) & 0x7FFFFFFF);  // wraps to 0 after INT32_MAX
      if (!used_seqs.contains(seq) && !global.Contains(seq)) return seq;
    }
  }
  // Usage-aware eviction: the victim `id` had accepted drafts since it was
  // last at the front: its credit is spent and it moves to the back (order
  // `back`) instead of being evicted. False (nothing done) without credit.
  bool SecondChance(const std::string& id, uint64_t back) {  // tree_mu held exclusively
    auto it = cached.find(id);
    {
      std::lock_guard<std::mutex> l(credit_mu);
      auto c = credits.find(it->second.seq_id);
      if (c == credits.end()) return false;
      credits.erase(c);
    }
    fifo.erase(it->second.order);
    it->second.order = back;
    fifo.emplace(back, id);
    return true;
  }
  void Credit(int32_t seq, int64_t accepted) {
    std::lock_guard<std::mutex> l(credit_mu);
    credits[seq] += accepted;
  }
  int64_t EstimatedBytes() const {  // tree_mu held
    return global.num_nodes() * kBytesPerNode + cached_tokens * kBytesPerToken;
  }

  const std::string name;
  std::shared_mutex requests_mu;
  absl::flat_hash_map<std::string, std::shared_ptr<Request>> active;  // guarded by requests_mu
  bool cleared = false;  // dropped by ClearNamespace: no more starts here (guarded by requests_mu)
  // Guards global, cached, used_seqs, fifo, next_seq, cached_tokens.
  std::shared_mutex tree_mu;
  SuffixTree global;
  absl::flat_hash_map<std::string, Cached> cached;
  absl::flat_hash_map<int32_t, bool> used_seqs;
  std::map<uint64_t, std::string> fifo;
  int32_t next_seq = 0;
  int64_t cached_tokens = 0;
  // Accepted draft tokens per cached response (seq id) since it was last at
  // the front; only with eviction = kUsage. A leaf lock: Steps credit under
  // their request locks and shared tree holds.
  std::mutex credit_mu;
  absl::flat_hash_map<int32_t, int64_t> credits;  // guarded by credit_mu
  // async_global_appends: appends waiting for the applier, in arrival order.
  std::mutex pending_mu;
  std::vector<std::pair<std::string, std::vector<int32_t>>> pending;  // guarded by pending_mu
  bool scheduled = false;                                             // guarded by pending_mu
  std::mutex apply_mu;  // one applier at a time keeps each sequence in order
};

SuffixCacheStore::SuffixCacheStore(const StoreOptions& options)
    : options_(options), pool_(std::make_unique<WorkerPool>(options.step_threads)) {
  if (options_.async_global_appends) applier_ = std::thread([this] { ApplierLoop(); });
}

SuffixCacheStore::~SuffixCacheStore() {
  {
    std::lock_guard<std::mutex> l(dirty_mu_);
    stop_ = true;
  }
  dirty_cv_.notify_all();
  if (applier_.joinable()) applier_.join();
}

std::shared_ptr<SuffixCacheStore::Namespace> SuffixCacheStore::FindNamespace(const std::string& ns) const {
  std::shared_lock<std::shared_mutex> l(namespaces_mu_);
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? nullptr : it->second;
}

std::shared_ptr<SuffixCacheStore::Namespace> SuffixCacheStore::GetOrCreateNamespace(const std::string& ns) {
  if (auto found = FindNamespace(ns)) return found;
  std::unique_lock<std::shared_mutex> l(namespaces_mu_);
  auto& slot = namespaces_[ns];
  if (!slot) slot = std::make_shared<Namespace>(ns, options_.max_depth);
  return slot;
}

std::vector<std::shared_ptr<SuffixCacheStore::Namespace>> SuffixCacheStore::AllNamespaces() const {
  std::shared_lock<std::shared_mutex> l(namespaces_mu_);
  std::vector<std::shared_ptr<Namespace>> all;
  for (const auto& [name, ns] : namespaces_) all.push_back(ns);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a->name < b->name; });
  return all;
}

void SuffixCacheStore::RemoveFromTree(Namespace& ns, const std::vector<int32_t>& seq_ids) {
  // One removal per exclusive hold: speculates interleave between them.
  for (int32_t seq : seq_ids) {
    if (seq < 0) continue;
    std::unique_lock<std::shared_mutex> t(ns.tree_mu);
    absl::Status st = ns.global.Remove(seq);
    FLOE_SUFFIX_INVARIANT(st.ok(), "removing a detached response");
    ns.used_seqs.erase(seq);
    evictions_total_.fetch_add(1, std::memory_order_relaxed);
  }
}

void SuffixCacheStore::ApplyAppend(Namespace& ns, const std::string& id, absl::Span<const int32_t> tokens) {
  auto c = ns.cached.find(id);
  if (c == ns.cached.end()) return;  // evicted (or aborted) meanwhile
  ns.global.Extend(c->second.seq_id, tokens);
  c->second.length += static_cast<int64_t>(tokens.size());
  ns.cached_tokens += static_cast<int64_t>(tokens.size());
}

void SuffixCacheStore::FlushPending(Namespace& ns) {
  std::lock_guard<std::mutex> a(ns.apply_mu);
  std::vector<std::pair<std::string, std::vector<int32_t>>> batch;
  {
    std::lock_guard<std::mutex> p(ns.pending_mu);
    batch.swap(ns.pending);
    ns.scheduled = false;
  }
  if (batch.empty()) return;
  int64_t applied = 0;
  {
    std::unique_lock<std::shared_mutex> t(ns.tree_mu);
    for (const auto& [id, tokens] : batch) {
      ApplyAppend(ns, id, tokens);
      applied += PendingBytes(id, tokens.size());
    }
  }
  active_bytes_.fetch_sub(applied);
}

void SuffixCacheStore::ApplierLoop() {
  while (true) {
    std::shared_ptr<Namespace> ns;
    {
      std::unique_lock<std::mutex> l(dirty_mu_);
      dirty_cv_.wait(l, [this] { return stop_ || !dirty_.empty(); });
      if (dirty_.empty()) return;  // stopping, nothing left
      ns = std::move(dirty_.front());
      dirty_.pop_front();
      applying_ = true;
    }
    FlushPending(*ns);
    std::lock_guard<std::mutex> l(dirty_mu_);
    applying_ = false;
    if (dirty_.empty()) idle_cv_.notify_all();
  }
}

void SuffixCacheStore::WaitForAppends() {
  if (!options_.async_global_appends) return;
  std::unique_lock<std::mutex> l(dirty_mu_);
  idle_cv_.wait(l, [this] { return dirty_.empty() && !applying_; });
}

absl::Status SuffixCacheStore::StartRequest(const std::string& ns_name, const std::string& request_id,
                                            absl::Span<const int32_t> prompt) {
  // Only the prompt's tail is indexed (see StoreOptions).
  const size_t indexed = std::min<size_t>(
      prompt.size(), static_cast<size_t>(std::max<int64_t>(0, options_.max_prompt_index_tokens)));
  // Admission: reserve the estimate before building anything, so that a
  // refusal costs nothing; the measured size replaces it below.
  const int64_t estimate = kRequestBaseBytes + static_cast<int64_t>(request_id.size()) +
                           static_cast<int64_t>(indexed) * kEstimatedBytesPerPromptToken;
  auto refuse = [&](int64_t held, int64_t adds) {
    refused_starts_total_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "active requests hold ", held, " bytes of --max-bytes ", options_.max_bytes, "; request_id '", request_id,
        "' would add ", adds, " (its prompt's last ", indexed, " tokens indexed; --max-prompt-index-tokens ",
        options_.max_prompt_index_tokens, "). Retry once requests end"));
  };
  int64_t held = active_bytes_.load();
  do {
    if (held + estimate > options_.max_bytes) return refuse(held, estimate);
  } while (!active_bytes_.compare_exchange_weak(held, held + estimate));
  auto request = std::make_shared<Request>(options_.max_depth, request_id.size());
  request->local.Extend(kLocalSeq, prompt.subspan(prompt.size() - indexed));  // outside every shared lock
  const size_t keep = std::min<size_t>(prompt.size(), options_.max_depth);
  request->context.assign(prompt.end() - keep, prompt.end());
  request->bytes = request->MeasureBytes();  // not shared yet: no lock needed
  const int64_t now_held = active_bytes_.fetch_add(request->bytes - estimate) + request->bytes - estimate;
  if (request->bytes > estimate && now_held > options_.max_bytes) {  // the estimate fell short
    active_bytes_.fetch_sub(request->bytes);
    return refuse(now_held - request->bytes, request->bytes);
  }
  request->last_call_ns.store(Now().time_since_epoch() / std::chrono::nanoseconds(1));
  std::shared_ptr<Namespace> ns;
  std::vector<int32_t> victims;
  while (true) {
    ns = GetOrCreateNamespace(ns_name);
    std::unique_lock<std::shared_mutex> l(ns->requests_mu);
    // ClearNamespace dropped it since the lookup: a request added now would
    // be in no namespace (never ended, its bytes never released). Again.
    if (ns->cleared) continue;
    if (ns->active.contains(request_id)) {
      active_bytes_.fetch_sub(request->bytes);
      return absl::AlreadyExistsError(absl::StrCat("request_id '", request_id, "' is already active in namespace '",
                                                   ns_name, "'"));
    }
    if (options_.max_cached_responses != 0) {
      std::unique_lock<std::shared_mutex> t(ns->tree_mu);
      victims.push_back(ns->Detach(request_id));  // re-start replaces the cached response
      const int32_t seq = ns->AllocateSeqId();
      const uint64_t order = next_order_.fetch_add(1);
      ns->AddCached(request_id, seq, order, 0, /*active=*/true);
      while (options_.max_cached_responses > 0 &&
             static_cast<int64_t>(ns->cached.size()) > options_.max_cached_responses) {
        auto it = ns->fifo.begin();  // oldest first, never the one just added
        if (it->second == request_id) ++it;
        if (it == ns->fifo.end()) break;
        const std::string victim = it->second;
        // Credits only shrink here, so the loop ends.
        if (ns->SecondChance(victim, next_order_.fetch_add(1))) continue;
        victims.push_back(ns->Detach(victim));
      }
    }
    ns->active.emplace(request_id, std::move(request));
    break;
  }
  RemoveFromTree(*ns, victims);
  return absl::OkStatus();
}

std::vector<StepOutcome> SuffixCacheStore::Step(const std::vector<StepItem>& items, StepTimings* timings) {
  std::vector<StepOutcome> out(items.size());
  if (timings != nullptr) timings->entries = static_cast<int>(items.size());
  std::vector<std::pair<absl::string_view, size_t>> order;
  order.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) order.emplace_back(items[i].ns, i);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t b = 0; b < order.size();) {
    size_t e = b;
    std::vector<size_t> group;
    while (e < order.size() && order[e].first == order[b].first) group.push_back(order[e++].second);
    auto ns = FindNamespace(std::string(order[b].first));
    if (ns == nullptr) {
      for (size_t i : group) {
        out[i].status = absl::NotFoundError(absl::StrCat("request_id '", items[i].request_id,
                                                         "' is not active in namespace '", items[i].ns, "'"));
      }
    } else {
      StepNamespace(ns, items, group, &out, timings);
    }
    b = e;
  }
  return out;
}

void SuffixCacheStore::StepNamespace(const std::shared_ptr<Namespace>& ns_ptr, const std::vector<StepItem>& items,
                                     const std::vector<size_t>& indices, std::vector<StepOutcome>* out,
                                     StepTimings* timings) {
  Namespace& ns = *ns_ptr;
  std::vector<std::pair<std::shared_ptr<Request>, size_t>> live;
  std::vector<size_t> missing;
  {
    std::shared_lock<std::shared_mutex> l(ns.requests_mu);
    // Renewed under the shared hold: ExpireIdle re-reads it under the
    // exclusive one, so nothing found here is expired under this Step.
    const int64_t now_ns = Now().time_since_epoch() / std::chrono::nanoseconds(1);
    for (size_t i : indices) {
      auto it = ns.active.find(items[i].request_id);
      if (it == ns.active.end()) {
        missing.push_back(i);
      } else {
        it->second->last_call_ns.store(now_ns, std::memory_order_relaxed);
        live.emplace_back(it->second, i);
      }
    }
  }
  auto ended_error = [&](size_t i) {
    return absl::FailedPreconditionError(absl::StrCat("request_id '", items[i].request_id, "' in namespace '",
                                                      items[i].ns, "' has ended; no more appends"));
  };
  if (!missing.empty()) {
    std::shared_lock<std::shared_mutex> t(ns.tree_mu);
    for (size_t i : missing) {
      auto c = ns.cached.find(items[i].request_id);
      const bool known = c != ns.cached.end() && !c->second.active;
      // An expired request answers NOT_FOUND (a worker stops asking), an
      // ended one FAILED_PRECONDITION.
      (*out)[i].status = known && !c->second.expired ? ended_error(i)
                                                     : NotActiveError(items[i].ns, items[i].request_id,
                                                                      known && c->second.expired);
    }
  }
  // Address order: two batches sharing requests never deadlock.
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first.get() < b.first.get(); });
  for (auto& [req, i] : live) req->mu.lock();

  const auto start = std::chrono::steady_clock::now();
  // The entries that go ahead (checked first, so that the global appends
  // can run beside the local work).
  struct Entry {
    Request* req;
    size_t item;
    bool global_speculate = false;  // the local draft can still lose
  };
  std::vector<Entry> ok;
  std::vector<size_t> appended;  // indices into ok
  for (auto& [req_ptr, i] : live) {
    Request& req = *req_ptr;
    const StepItem& item = items[i];
    if (req.done) {
      (*out)[i].status = req.expired ? NotActiveError(item.ns, item.request_id, /*expired=*/true) : ended_error(i);
      continue;
    }
    if (item.response_offset != req.response_len) {
      (*out)[i].status = absl::FailedPreconditionError(
          absl::StrCat("response_offset ", item.response_offset, " of request_id '", item.request_id,
                       "' is out of order: the request has ", req.response_len, " response tokens"));
      continue;
    }
    if (!item.appended.empty()) appended.push_back(ok.size());
    ok.push_back(Entry{&req, i});
  }
  // Entry order, as a caller replaying the batch one by one would append.
  std::sort(appended.begin(), appended.end(), [&](size_t a, size_t b) { return ok[a].item < ok[b].item; });
  auto context_of = [&](const Request& req) {
    absl::Span<const int32_t> context(req.context);
    if (static_cast<int>(context.size()) > options_.max_depth) {
      context = context.subspan(context.size() - options_.max_depth);
    }
    return context;
  };
  // Item 0: every global append (one tree, so one thread); items 1..n: the
  // local work of entry n-1, which touches only its own (locked) request:
  // its local append, then its local draft while that tree is in this
  // core's cache. Global drafts wait for every global append, so that they
  // see the whole batch.
  auto global_appends = [&] {
    if (appended.empty() || options_.max_cached_responses == 0) return;
    if (options_.async_global_appends) {
      bool schedule;
      {
        std::lock_guard<std::mutex> p(ns_ptr->pending_mu);
        int64_t queued = 0;
        for (size_t k : appended) {
          const StepItem& item = items[ok[k].item];
          ns_ptr->pending.emplace_back(item.request_id,
                                       std::vector<int32_t>(item.appended.begin(), item.appended.end()));
          queued += PendingBytes(item.request_id, item.appended.size());
        }
        active_bytes_.fetch_add(queued);
        schedule = !ns_ptr->scheduled;
        ns_ptr->scheduled = true;
      }
      if (schedule) {
        {
          std::lock_guard<std::mutex> l(dirty_mu_);
          dirty_.push_back(ns_ptr);
        }
        dirty_cv_.notify_one();
      }
    } else {
      // One exclusive hold per request: speculates slip in between.
      for (size_t k : appended) {
        const StepItem& item = items[ok[k].item];
        std::unique_lock<std::shared_mutex> t(ns.tree_mu);
        ApplyAppend(ns, item.request_id, item.appended);
      }
    }
  };
  pool_->ParallelFor(ok.size() + 1, [&](size_t job) {
    if (job == 0) {
      global_appends();
      return;
    }
    Entry& entry = ok[job - 1];
    Request& req = *entry.req;
    const StepItem& item = items[entry.item];
    if (!item.appended.empty()) {
      req.local.Extend(kLocalSeq, item.appended);
      const int64_t accepted = req.feedback.Observe(item.appended);
      if (accepted > 0 && req.draft_source >= 0 && options_.eviction == EvictionKind::kUsage) {
        ns.Credit(req.draft_source, accepted);
      }
      req.draft_source = -1;
      req.response_len += static_cast<int64_t>(item.appended.size());
      req.context.insert(req.context.end(), item.appended.begin(), item.appended.end());
      if (req.context.size() > 4 * static_cast<size_t>(options_.max_depth)) {
        req.context.erase(req.context.begin(), req.context.end() - options_.max_depth);
      }
      // A running request keeps growing (it is never refused): counted.
      const int64_t bytes = req.MeasureBytes();
      active_bytes_.fetch_add(bytes - req.bytes, std::memory_order_relaxed);
      req.bytes = bytes;
    }
    if (!item.speculate) return;
    const absl::Span<const int32_t> context = context_of(req);
    Draft& draft = (*out)[entry.item].draft;
    draft = req.local.Speculate(context, req.feedback.Adjust(item.params, /*local=*/true), kLocalSeq);
    req.draft_source = -1;  // this draft replaces any earlier one
    // A draft's score is at most its token count, which the global tree's
    // budget bounds (no confident extension there); ties go to the local
    // draft. So a local draft at that bound cannot lose: skip the global
    // tree (and its lock) altogether. Agentic copies hit this often.
    const int global_bound = DraftBudget(item.params, static_cast<int32_t>(context.size()) - 1);
    entry.global_speculate = options_.max_cached_responses != 0 && draft.score < static_cast<float>(global_bound);
    if (!entry.global_speculate) req.feedback.Proposed(draft);
  });
  const auto global_start = std::chrono::steady_clock::now();
  std::vector<Entry*> global;
  for (Entry& e : ok) {
    if (e.global_speculate) global.push_back(&e);
  }
  // Speculates take shared holds only: in parallel over the pool.
  pool_->ParallelFor(global.size(), [&](size_t k) {
    Request& req = *global[k]->req;
    const StepItem& item = items[global[k]->item];
    Draft& best = (*out)[global[k]->item].draft;
    {
      std::shared_lock<std::shared_mutex> t(ns.tree_mu);
      auto c = ns.cached.find(item.request_id);
      // The hint needs the sequence's tail to be the context's tail (with
      // async appends it may lag a step).
      const int32_t own = c != ns.cached.end() ? c->second.seq_id : -1;
      const int32_t hint = own >= 0 && c->second.length == req.response_len ? own : -1;
      Draft draft = ns.global.Speculate(context_of(req), req.feedback.Adjust(item.params, /*local=*/false), hint,
                                        best.score);
      if (draft.score > best.score) {
        best = std::move(draft);
        // A draft read from the request's own response credits nothing.
        req.draft_source = best.source_seq == own ? -1 : best.source_seq;
      }
    }
    req.feedback.Proposed(best);
  });
  if (timings != nullptr) {
    const auto end = std::chrono::steady_clock::now();
    timings->appends_local_drafts_seconds += std::chrono::duration<double>(global_start - start).count();
    timings->global_drafts_seconds += std::chrono::duration<double>(end - global_start).count();
  }
  for (auto& [req, i] : live) req->mu.unlock();
}

std::chrono::steady_clock::time_point SuffixCacheStore::Now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

int64_t SuffixCacheStore::MarkDone(Request& request, bool expired) {
  std::lock_guard<std::mutex> r(request.mu);
  const int64_t released = request.bytes;
  request.done = true;
  request.expired = expired;
  request.bytes = 0;
  active_bytes_.fetch_sub(released);
  return released;
}

absl::Status SuffixCacheStore::NotActiveError(const std::string& ns_name, const std::string& request_id,
                                              bool expired) const {
  if (expired) {
    return absl::NotFoundError(absl::StrCat("request_id '", request_id, "' in namespace '", ns_name,
                                            "' expired: no call named it for longer than its lease (--request-lease-s ",
                                            Seconds(options_.request_lease), "); its response so far stays cached"));
  }
  return absl::NotFoundError(absl::StrCat("request_id '", request_id, "' is not active in namespace '", ns_name, "'"));
}

bool SuffixCacheStore::ExpiredResponse(const std::string& ns_name, const std::string& request_id) const {
  auto ns = FindNamespace(ns_name);
  if (ns == nullptr) return false;
  std::shared_lock<std::shared_mutex> t(ns->tree_mu);
  auto c = ns->cached.find(request_id);
  return c != ns->cached.end() && c->second.expired;
}

std::shared_ptr<SuffixCacheStore::Namespace> SuffixCacheStore::RetireActive(const std::string& ns_name,
                                                                             const std::string& request_id) {
  auto ns = FindNamespace(ns_name);
  if (ns == nullptr) return nullptr;
  std::shared_ptr<Request> request;
  {
    std::unique_lock<std::shared_mutex> l(ns->requests_mu);
    auto it = ns->active.find(request_id);
    if (it == ns->active.end()) return nullptr;
    request = std::move(it->second);
    ns->active.erase(it);
  }
  MarkDone(*request, /*expired=*/false);
  // Its last appends reach the tree now: before Finish, and so that no stale
  // append reaches a re-started id.
  FlushPending(*ns);
  return ns;
}

absl::StatusOr<bool> SuffixCacheStore::EndRequest(const std::string& ns_name, const std::string& request_id) {
  auto ns = RetireActive(ns_name, request_id);
  if (ns == nullptr) return NotActiveError(ns_name, request_id, ExpiredResponse(ns_name, request_id));
  std::unique_lock<std::shared_mutex> t(ns->tree_mu);
  auto c = ns->cached.find(request_id);
  if (c == ns->cached.end()) return false;
  c->second.active = false;
  ns->global.Finish(c->second.seq_id);  // no more appends: drop match state
  return true;
}

absl::Status SuffixCacheStore::AbortRequest(const std::string& ns_name, const std::string& request_id) {
  auto ns = RetireActive(ns_name, request_id);
  if (ns == nullptr) return NotActiveError(ns_name, request_id, ExpiredResponse(ns_name, request_id));
  std::vector<int32_t> victims;
  {
    std::unique_lock<std::shared_mutex> t(ns->tree_mu);
    victims.push_back(ns->Detach(request_id));
  }
  RemoveFromTree(*ns, victims);
  return absl::OkStatus();
}

std::pair<int64_t, int64_t> SuffixCacheStore::ClearNamespace(const std::string& ns_name) {
  std::shared_ptr<Namespace> ns;
  {
    std::unique_lock<std::shared_mutex> l(namespaces_mu_);
    auto it = namespaces_.find(ns_name);
    if (it == namespaces_.end()) return {0, 0};
    ns = std::move(it->second);
    namespaces_.erase(it);
  }
  // Steps already holding `ns` finish on it; it is freed with the last one.
  std::vector<std::shared_ptr<Request>> active;
  {
    std::unique_lock<std::shared_mutex> l(ns->requests_mu);
    ns->cleared = true;
    for (auto& [id, r] : ns->active) active.push_back(r);
    ns->active.clear();
  }
  for (auto& r : active) MarkDone(*r, /*expired=*/false);
  FlushPending(*ns);
  int64_t cached = 0;
  {
    std::shared_lock<std::shared_mutex> t(ns->tree_mu);
    for (const auto& [id, c] : ns->cached) cached += c.active ? 0 : 1;
  }
  return {cached, static_cast<int64_t>(active.size())};
}

absl::Status SuffixCacheStore::CheckIntegrity() const {
  int64_t active_bytes = 0;
  for (const auto& ns : AllNamespaces()) {
    std::vector<std::pair<std::string, std::shared_ptr<Request>>> active;
    {
      std::shared_lock<std::shared_mutex> l(ns->requests_mu);
      active.assign(ns->active.begin(), ns->active.end());
    }
    for (const auto& [id, r] : active) {
      std::lock_guard<std::mutex> rl(r->mu);
      const std::string where = absl::StrCat("request '", id, "' in namespace '", ns->name, "': ");
      if (r->done) return absl::InternalError(absl::StrCat(where, "active but done"));
      if (r->bytes != r->MeasureBytes()) {
        return absl::InternalError(absl::StrCat(where, "accounted ", r->bytes, " bytes, holds ", r->MeasureBytes()));
      }
      if (absl::Status st = r->local.CheckIntegrity(); !st.ok()) {
        return absl::InternalError(absl::StrCat(where, "local tree: ", st.message()));
      }
      active_bytes += r->bytes;
    }
    {
      std::lock_guard<std::mutex> p(ns->pending_mu);
      for (const auto& [id, tokens] : ns->pending) active_bytes += PendingBytes(id, tokens.size());
    }
    std::shared_lock<std::shared_mutex> t(ns->tree_mu);
    if (absl::Status st = ns->global.CheckIntegrity(); !st.ok()) {
      return absl::InternalError(absl::StrCat("namespace '", ns->name, "': global tree: ", st.message()));
    }
    int64_t tokens = 0;
    for (const auto& [id, c] : ns->cached) {
      tokens += c.length;
      if (c.active && c.expired) {
        return absl::InternalError(absl::StrCat("namespace '", ns->name, "': response '", id, "' active and expired"));
      }
    }
    if (tokens != ns->cached_tokens) {
      return absl::InternalError(absl::StrCat("namespace '", ns->name, "': cached_tokens ", ns->cached_tokens,
                                              ", the responses hold ", tokens));
    }
  }
  if (active_bytes != active_bytes_.load()) {
    return absl::InternalError(
        absl::StrCat("active_bytes is ", active_bytes_.load(), "; the active requests and queued appends hold ",
                     active_bytes));
  }
  return absl::OkStatus();
}

std::vector<SuffixCacheStore::Expired> SuffixCacheStore::ExpireIdle() {
  std::vector<Expired> out;
  if (options_.request_lease <= std::chrono::milliseconds::zero()) return out;
  const int64_t lease_ns = options_.request_lease / std::chrono::nanoseconds(1);
  for (const auto& ns : AllNamespaces()) {
    std::vector<std::string> stale;
    const int64_t now_ns = Now().time_since_epoch() / std::chrono::nanoseconds(1);
    {
      std::shared_lock<std::shared_mutex> l(ns->requests_mu);
      for (const auto& [id, r] : ns->active) {
        if (now_ns - r->last_call_ns.load(std::memory_order_relaxed) > lease_ns) stale.push_back(id);
      }
    }
    for (const std::string& id : stale) {
      std::shared_ptr<Request> request;
      int64_t idle_ns = 0;
      {
        std::unique_lock<std::shared_mutex> l(ns->requests_mu);
        auto it = ns->active.find(id);
        if (it == ns->active.end()) continue;  // ended meanwhile
        // A Step renews under the shared hold: re-read under this one.
        idle_ns = now_ns - it->second->last_call_ns.load(std::memory_order_relaxed);
        if (idle_ns <= lease_ns) continue;
        request = std::move(it->second);
        ns->active.erase(it);
      }
      const int64_t bytes = MarkDone(*request, /*expired=*/true);
      FlushPending(*ns);  // its last appends reach the tree, as for EndRequest
      {
        std::unique_lock<std::shared_mutex> t(ns->tree_mu);
        auto c = ns->cached.find(id);
        if (c != ns->cached.end()) {
          c->second.active = false;
          c->second.expired = true;
          ns->global.Finish(c->second.seq_id);
        }
      }
      expired_total_.fetch_add(1, std::memory_order_relaxed);
      out.push_back(Expired{ns->name, id,
                            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(idle_ns)),
                            bytes});
    }
  }
  return out;
}

int64_t SuffixCacheStore::TrimToBudget() {
  auto all = AllNamespaces();
  std::vector<int64_t> sizes(all.size());
  int64_t total = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    std::shared_lock<std::shared_mutex> t(all[i]->tree_mu);
    sizes[i] = all[i]->EstimatedBytes();
    total += sizes[i];
  }
  int64_t evicted = 0;
  // The active requests' bytes change meanwhile (Steps, starts): read live.
  while (total + active_bytes_.load() > options_.max_bytes) {
    // The oldest ended response over all namespaces (active ones stay).
    size_t best = all.size();
    uint64_t best_order = std::numeric_limits<uint64_t>::max();
    std::string best_id;
    for (size_t i = 0; i < all.size(); ++i) {
      std::shared_lock<std::shared_mutex> t(all[i]->tree_mu);
      for (const auto& [order, id] : all[i]->fifo) {
        if (order >= best_order) break;
        if (all[i]->cached.at(id).active) continue;
        best = i, best_order = order, best_id = id;
        break;
      }
    }
    if (best == all.size()) break;
    Namespace& ns = *all[best];
    int32_t seq = -1;
    {
      std::unique_lock<std::shared_mutex> t(ns.tree_mu);
      auto c = ns.cached.find(best_id);
      if (c == ns.cached.end() || c->second.order != best_order) continue;  // raced: pick again
      if (ns.SecondChance(best_id, next_order_.fetch_add(1))) continue;  // credits only shrink: ends
      seq = ns.Detach(best_id);
    }
    RemoveFromTree(ns, {seq});
    budget_evictions_total_.fetch_add(1, std::memory_order_relaxed);
    ++evicted;
    std::shared_lock<std::shared_mutex> t(ns.tree_mu);
    total += ns.EstimatedBytes() - sizes[best];
    sizes[best] = ns.EstimatedBytes();
  }
  bytes_.store(total);
  return evicted;
}

StoreStats SuffixCacheStore::Stats() const {
  StoreStats stats;
  for (const auto& ns : AllNamespaces()) {
    NamespaceStats n;
    n.name = ns->name;
    {
      std::shared_lock<std::shared_mutex> l(ns->requests_mu);
      n.active = static_cast<int64_t>(ns->active.size());
    }
    {
      std::shared_lock<std::shared_mutex> t(ns->tree_mu);
      n.cached = static_cast<int64_t>(ns->cached.size());
      n.cached_tokens = ns->cached_tokens;
      n.tree_bytes = ns->EstimatedBytes();
      n.nodes = ns->global.num_nodes();
    }
    stats.active += n.active;
    stats.cached += n.cached;
    stats.cached_tokens += n.cached_tokens;
    stats.bytes += n.tree_bytes;
    stats.nodes += n.nodes;
    stats.namespaces.push_back(std::move(n));
  }
  stats.active_bytes = active_bytes_.load();
  stats.evictions_total = evictions_total_.load();
  stats.budget_evictions_total = budget_evictions_total_.load();
  stats.expired_total = expired_total_.load();
  stats.refused_starts_total = refused_starts_total_.load();
  return stats;
}

SnapshotData SuffixCacheStore::ExportSnapshot() const {
  SnapshotData data;
  data.max_depth = static_cast<uint32_t>(options_.max_depth);
  for (const auto& ns : AllNamespaces()) {
    SnapshotNamespace out;
    out.name = ns->name;
    std::shared_lock<std::shared_mutex> t(ns->tree_mu);
    for (const auto& [order, id] : ns->fifo) {
      const auto& c = ns->cached.at(id);
      if (c.active) continue;
      const absl::Span<const int32_t> tokens = ns->global.Tokens(c.seq_id);
      out.responses.push_back({id, std::vector<int32_t>(tokens.begin(), tokens.end()), c.seq_id});
    }
    if (out.responses.empty()) continue;
    const size_t tree_bytes = ns->global.MemoryUsage();
    const size_t per_token_bound =
        static_cast<size_t>(options_.max_image_bytes_per_token) * static_cast<size_t>(ns->global.num_tokens());
    if (options_.max_image_bytes_per_token > 0 && (tree_bytes <= size_t{16} << 20 || tree_bytes <= per_token_bound)) {
      ns->global.AppendImage(&out.tree_image);
    }
    data.namespaces.push_back(std::move(out));
  }
  return data;
}

// The image path of ImportSnapshot: true when `in`'s tree image loaded and
// held every kept response (`in.responses[first..]`) as a finished sequence
// with the same tokens; the namespace then holds that tree. Else `why` says
// what was wrong and nothing changed.
bool SuffixCacheStore::AdoptTreeImage(Namespace& ns, SnapshotNamespace& in, size_t first, uint64_t first_order,
                                      std::string* why) {
  if (in.tree_image.empty()) {
    *why = "no tree image";
    return false;
  }
  if (!ns.cached.empty() || ns.global.num_seqs() > 0) {
    *why = "namespace not empty";
    return false;
  }
  SuffixTree tree(options_.max_depth);
  if (absl::Status st = tree.LoadImage(in.tree_image); !st.ok()) {
    *why = std::string(st.message());
    return false;
  }
  absl::flat_hash_map<int32_t, size_t> keep;  // seq id -> response index
  absl::flat_hash_map<std::string, bool> ids;
  for (size_t i = first; i < in.responses.size(); ++i) {
    const SnapshotResponse& r = in.responses[i];
    if (!ids.emplace(r.request_id, true).second) continue;  // as the rebuild: first copy wins
    // An empty response never reached the tree (as in a rebuild).
    const bool in_image = r.tokens.empty() ? r.seq_id >= 0 && !tree.Contains(r.seq_id)
                                           : tree.IsFinished(r.seq_id) &&
                                                 tree.Tokens(r.seq_id) == absl::MakeConstSpan(r.tokens);
    if (!in_image || !keep.emplace(r.seq_id, i).second) {
      *why = absl::StrCat("response '", r.request_id, "' (seq ", r.seq_id, ") is not in the image as cached");
      return false;
    }
  }
  for (int32_t seq : tree.SeqIds()) {
    if (!keep.contains(seq)) tree.Remove(seq).IgnoreError();  // active at export, or beyond the bound
  }
  ns.global = std::move(tree);
  int32_t last_seq = -1;
  for (size_t i = first; i < in.responses.size(); ++i) {
    SnapshotResponse& r = in.responses[i];
    auto k = keep.find(r.seq_id);
    if (k == keep.end() || k->second != i) continue;
    last_seq = std::max(last_seq, r.seq_id);
    ns.AddCached(std::move(r.request_id), r.seq_id, first_order + i, static_cast<int64_t>(r.tokens.size()),
                 /*active=*/false);
  }
  ns.next_seq = static_cast<int32_t>((int64_t{last_seq} + 1) & 0x7FFFFFFF);  // an image's seq id may be INT32_MAX
  return true;
}

SuffixCacheStore::ImportReport SuffixCacheStore::ImportSnapshot(SnapshotData data) {
  ImportReport report;
  if (options_.max_cached_responses == 0) return report;
  // FIFO positions in snapshot order across namespaces, as they were written.
  std::vector<uint64_t> first_order(data.namespaces.size());
  for (size_t k = 0; k < data.namespaces.size(); ++k) {
    first_order[k] = next_order_.fetch_add(data.namespaces[k].responses.size());
  }
  std::mutex report_mu;
  auto import_one = [&](size_t k) {
    SnapshotNamespace& in = data.namespaces[k];
    auto ns = GetOrCreateNamespace(in.name);
    size_t first = 0;
    if (options_.max_cached_responses > 0 &&
        static_cast<int64_t>(in.responses.size()) > options_.max_cached_responses) {
      first = in.responses.size() - options_.max_cached_responses;  // keep the newest
    }
    // One exclusive hold for the whole namespace: nothing is served yet.
    std::unique_lock<std::shared_mutex> t(ns->tree_mu);
    std::string why;
    if (AdoptTreeImage(*ns, in, first, first_order[k], &why)) {
      std::lock_guard<std::mutex> l(report_mu);
      ++report.namespaces_from_image;
      return;
    }
    ns->cached.reserve(ns->cached.size() + in.responses.size() - first);
    for (size_t i = first; i < in.responses.size(); ++i) {
      SnapshotResponse& r = in.responses[i];
      if (ns->cached.contains(r.request_id)) continue;
      const int32_t seq = ns->AllocateSeqId();
      const uint64_t order = first_order[k] + i;
      ns->global.Extend(seq, r.tokens);
      ns->global.Finish(seq);
      ns->AddCached(std::move(r.request_id), seq, order, static_cast<int64_t>(r.tokens.size()), /*active=*/false);
    }
    std::lock_guard<std::mutex> l(report_mu);
    ++report.namespaces_rebuilt;
    if (!in.tree_image.empty()) report.image_problems.push_back(absl::StrCat("namespace '", in.name, "': ", why));
  };
  const size_t threads =
      std::min<size_t>(data.namespaces.size(), std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (size_t k = 0; k < data.namespaces.size(); ++k) import_one(k);
    return report;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (size_t w = 0; w < threads; ++w) {
    workers.emplace_back([&] {
      for (size_t k; (k = next.fetch_add(1)) < data.namespaces.size();) import_one(k);
    });
  }
  for (auto& w : workers) w.join();
  return report;
}

}  // namespace floe::suffix_cache
