// The floe-suffix-cache service as a replay's draft source. The tokens a step
// emits wait here and travel with the next step's Step call, which also asks
// for that step's draft: one round trip per step, as an engine makes.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/suffix_cache/client/suffix_cache_client.h"
#include "services/suffix_cache/replay/draft_source.h"

namespace floe::suffix_cache {
namespace {

absl::Status EntryStatus(const floe::v1::SuffixStepResponse& resp, const std::string& id) {
  if (resp.results_size() != 1) {
    return absl::InternalError(absl::StrCat("Step for '", id, "' answered ", resp.results_size(), " results"));
  }
  const floe::v1::SuffixDraft& d = resp.results(0);
  if (d.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(d.code()), absl::StrCat("Step for '", id, "': ", d.error()));
}

class RemoteSource final : public DraftSource {
 public:
  RemoteSource(const ReplayOptions& options, std::unique_ptr<SuffixCacheClient> client,
               const floe::v1::SuffixStats& at_start)
      : options_(options), client_(std::move(client)), params_(ToSpeculateParams(options.draft)),
        at_start_(at_start) {}

  absl::Status Start(const TraceRequest& r) override {
    offset_ = 0;
    pending_.clear();
    return client_->StartRequest(options_.server_namespace, r.id, r.prompt);
  }
  absl::StatusOr<Draft> Propose(const TraceRequest& r, absl::Span<const int32_t>) override {
    FLOE_ASSIGN_OR_RETURN(floe::v1::SuffixStepResponse resp, Step(r, /*speculate=*/true));
    const floe::v1::SuffixDraft& d = resp.results(0);
    Draft draft;
    draft.token_ids.assign(d.token_ids().begin(), d.token_ids().end());
    draft.parents.assign(d.parents().begin(), d.parents().end());
    draft.probs.assign(d.probs().begin(), d.probs().end());
    draft.score = d.score();
    draft.match_len = d.match_len();
    return draft;
  }
  absl::Status Append(const TraceRequest&, absl::Span<const int32_t> tokens) override {
    pending_.insert(pending_.end(), tokens.begin(), tokens.end());
    return absl::OkStatus();
  }
  absl::Status Stop(const TraceRequest& r) override {
    if (!pending_.empty()) FLOE_RETURN_IF_ERROR(Step(r, /*speculate=*/false).status());
    return client_->EndRequest(options_.server_namespace, r.id).status();
  }
  void Abandon(const TraceRequest& r) override { (void)client_->AbortRequest(options_.server_namespace, r.id); }
  absl::Status Finish(ReplayResult* res) override {
    FLOE_ASSIGN_OR_RETURN(const floe::v1::SuffixStats stats, client_->GetStats(0));
    const int64_t over_budget = stats.budget_evictions_total() - at_start_.budget_evictions_total();
    if (over_budget > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the service at ", options_.server, " evicted ", over_budget,
          " responses over its --max-bytes during the replay (a small budget, or other namespaces): its drafts "
          "may differ from the in-process speculator's, which has no byte budget"));
    }
    res->evictions = stats.evictions_total() - at_start_.evictions_total();  // server-wide
    for (const floe::v1::SuffixNamespaceStats& n : stats.namespaces()) {
      if (n.namespace_() != options_.server_namespace) continue;
      res->cached_tokens = n.cached_tokens();
      res->global_tree_bytes = static_cast<size_t>(n.tree_bytes());
    }
    return absl::OkStatus();
  }

 private:
  // Sends the pending tokens and, when asked, the draft request.
  absl::StatusOr<floe::v1::SuffixStepResponse> Step(const TraceRequest& r, bool speculate) {
    floe::v1::SuffixStepRequest req;
    floe::v1::SuffixStepEntry* e = req.add_entries();
    e->set_namespace_(options_.server_namespace);
    e->set_request_id(r.id);
    e->set_response_offset(offset_);
    e->mutable_appended()->Add(pending_.begin(), pending_.end());
    e->set_speculate(speculate);
    *e->mutable_params() = params_;
    floe::v1::SuffixStepResponse resp = client_->Step(req);
    FLOE_RETURN_IF_ERROR(EntryStatus(resp, r.id));
    offset_ += static_cast<int64_t>(pending_.size());
    pending_.clear();
    return resp;
  }

  const ReplayOptions& options_;
  std::unique_ptr<SuffixCacheClient> client_;
  const floe::v1::SpeculateParams params_;
  int64_t offset_ = 0;            // response tokens the service holds
  std::vector<int32_t> pending_;  // emitted, not sent yet
  const floe::v1::SuffixStats at_start_;
};

// The service drafts as the in-process speculator only with the same
// configuration and a namespace that starts empty.
absl::Status CheckServer(const ReplayOptions& o, const floe::v1::SuffixStats& stats) {
  const SpeculatorConfig& want = o.speculator;
  if (stats.max_depth() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("the service at ", o.server,
                                                      " does not report its configuration (older than the replay)"));
  }
  std::vector<std::string> diffs;
  if (stats.max_depth() != want.max_depth) {
    diffs.push_back(absl::StrCat("--max-depth ", stats.max_depth(), " (want ", want.max_depth, ")"));
  }
  if (stats.max_cached_responses() != want.max_cached_requests) {
    diffs.push_back(absl::StrCat("--max-cached-responses ", stats.max_cached_responses(), " (want ",
                                 want.max_cached_requests, ")"));
  }
  if (stats.eviction() != EvictionKindName(want.eviction)) {
    diffs.push_back(absl::StrCat("--eviction ", stats.eviction(), " (want ", EvictionKindName(want.eviction), ")"));
  }
  if (stats.async_global_appends()) diffs.push_back("--async-global-appends (want it off)");
  if (!diffs.empty()) {
    std::string all;
    for (const std::string& d : diffs) absl::StrAppend(&all, all.empty() ? "" : ", ", d);
    return absl::FailedPreconditionError(
        absl::StrCat("the service at ", o.server, " runs with ", all, ": its drafts would differ"));
  }
  for (const floe::v1::SuffixNamespaceStats& n : stats.namespaces()) {
    if (n.namespace_() == o.server_namespace && (n.cached_responses() > 0 || n.active_requests() > 0)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "namespace '", o.server_namespace, "' on ", o.server, " already holds ", n.cached_responses(),
          " responses and ", n.active_requests(), " active requests: clear it (ClearNamespace) or pick another"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DraftSource>> ConnectRemoteSource(const ReplayOptions& options) {
  ClientOptions c;
  c.addresses = {options.server};
  c.step_deadline = std::chrono::milliseconds(options.server_deadline_ms);
  c.call_deadline = std::chrono::milliseconds(options.server_deadline_ms);
  FLOE_ASSIGN_OR_RETURN(std::unique_ptr<SuffixCacheClient> client, SuffixCacheClient::Create(c));
  absl::StatusOr<floe::v1::SuffixStats> stats = client->GetStats(0);
  if (!stats.ok()) {
    return absl::Status(stats.status().code(), absl::StrCat("GetStats from the service at ", options.server, ": ",
                                                            stats.status().message()));
  }
  FLOE_RETURN_IF_ERROR(CheckServer(options, *stats));
  return std::make_unique<RemoteSource>(options, std::move(client), *stats);
}

}  // namespace floe::suffix_cache
