#include "services/suffix_cache/suffix_cache_service.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/auth/grpc_auth.h"
#include "common/log/log.h"
#include "common/rpc/status_conversion.h"
#include "common/status/status_macros.h"
#include "services/suffix_cache/snapshot.h"

namespace floe::suffix_cache {

std::string NamespaceOrDefault(const std::string& ns) { return ns.empty() ? "default" : ns; }

// Admission: one slot per call while it runs; none left -> RESOURCE_EXHAUSTED.
class SuffixCacheService::CallSlot {
 public:
  CallSlot(SuffixCacheService* s, const char* method)
      : s_(s), method_(method), start_(std::chrono::steady_clock::now()) {
    const int running = s_->in_flight_.fetch_add(1) + 1;
    if (!s_->accepting_.load()) {
      status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "suffix-cache is not serving (restoring or draining)");
    } else if (running > s_->limits_.max_concurrent_calls) {
      s_->rejected_total_.fetch_add(1, std::memory_order_relaxed);
      status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat(running - 1, " calls in flight; --max-concurrent-calls is ",
                                          s_->limits_.max_concurrent_calls));
    }
  }
  ~CallSlot() {
    s_->in_flight_.fetch_sub(1);
    if (s_->observer_) {
      s_->observer_(method_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
  }
  const grpc::Status& status() const { return status_; }

 private:
  SuffixCacheService* s_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
  grpc::Status status_;
};

SuffixCacheService::SuffixCacheService(SuffixCacheStore* store, ServiceLimits limits,
                                       std::shared_ptr<const InternalTrust> internal_trust)
    : store_(store), limits_(std::move(limits)), internal_trust_(std::move(internal_trust)) {}

grpc::Status SuffixCacheService::AuthorizeInternal(const grpc::ServerContext& context, std::string_view call) const {
  return internal_trust_ ? internal_trust_->Authorize(context, call) : grpc::Status::OK;
}

absl::StatusOr<std::optional<std::string>> SuffixCacheService::StatsScope(const grpc::ServerContext& context) const {
  // Without internal trust the workers send no credential: open, as before.
  if (!internal_trust_ || !internal_trust_->enabled()) return std::nullopt;
  if (internal_trust_->IsInternalCaller(context)) return std::nullopt;
  const std::string_view authorization = CallMetadata(context, "authorization");
  if (admin_keys_ && !authorization.empty()) {
    auto tenant = admin_keys_->Authenticate(authorization);
    if (tenant.ok()) return (*tenant)->admin ? std::nullopt : std::optional<std::string>((*tenant)->name);
  }
  return absl::UnauthenticatedError(
      admin_keys_ ? "SuffixCache.GetStats needs the cluster's internal key (--internal-key-file) or a key from "
                    "--admin-key-file (a tenant's key reads its own namespaces)"
                  : "SuffixCache.GetStats needs the cluster's internal key (--internal-key-file)");
}

absl::Status SuffixCacheService::CheckNamespace(absl::string_view field, const std::string& ns) const {
  if (static_cast<int>(ns.size()) > limits_.max_namespace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, "namespace is ", ns.size(),
                                                   " bytes; the limit is ", limits_.max_namespace_bytes));
  }
  return absl::OkStatus();
}

absl::Status SuffixCacheService::CheckIds(absl::string_view field, const std::string& ns,
                                          const std::string& request_id) const {
  if (absl::Status s = CheckNamespace(field, ns); !s.ok()) return s;
  if (request_id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, "request_id is empty"));
  if (static_cast<int>(request_id.size()) > limits_.max_request_id_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, "request_id is ", request_id.size(),
                                                   " bytes; the limit is ", limits_.max_request_id_bytes));
  }
  return absl::OkStatus();
}

absl::Status SuffixCacheService::CheckTokens(absl::string_view field,
                                             const google::protobuf::RepeatedField<int32_t>& tokens) const {
  for (int i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || (limits_.vocab_size > 0 && t >= limits_.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] = ", t, " is out of range: token ids must be >= 0",
          limits_.vocab_size > 0 ? absl::StrCat(" and < --vocab-size ", limits_.vocab_size) : std::string()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DraftParams> SuffixCacheService::ToDraftParams(absl::string_view field,
                                                              const floe::v1::SpeculateParams& p) const {
  DraftParams d;
  d.max_spec_tokens = p.max_spec_tokens();
  d.max_spec_factor = p.max_spec_factor();
  d.max_spec_offset = p.max_spec_offset();
  d.min_token_prob = p.min_token_prob();
  d.use_tree_spec = p.use_tree_spec();
  if (d.max_spec_tokens < 1 || d.max_spec_tokens > limits_.max_spec_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(field, "max_spec_tokens is ", d.max_spec_tokens,
                                                   "; it must be in [1, ", limits_.max_spec_tokens, "]"));
  }
  // Budgets are computed in int (DraftBudget): bounded, finite factors only.
  if (!(d.max_spec_factor >= 0.0f && d.max_spec_factor <= 1e6f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "max_spec_factor is ", d.max_spec_factor, "; it must be in [0, 1e6]"));
  }
  if (!(d.max_spec_offset >= -1e6f && d.max_spec_offset <= 1e6f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "max_spec_offset is ", d.max_spec_offset, "; it must be in [-1e6, 1e6]"));
  }
  if (!(d.min_token_prob >= 0.0f && d.min_token_prob <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(field, "min_token_prob is ", d.min_token_prob,
                                                   "; it must be in [0, 1]"));
  }
  d.extend_past_depth = p.extend_past_depth();
  d.discount_own_suffix = p.discount_own_suffix();
  d.confident_prob = p.confident_prob();
  d.confident_min_acceptance = p.confident_min_acceptance();
  d.confident_min_support = p.confident_min_support();
  if (p.has_confident_min_match()) d.confident_min_match = p.confident_min_match();
  if (p.has_score_exponent()) d.score_exponent = p.score_exponent();
  auto unit_range = [&](const char* name, float v) -> absl::Status {
    if (v >= 0.0f && v <= 1.0f) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, name, " is ", v, "; it must be in [0, 1]"));
  };
  FLOE_RETURN_IF_ERROR(unit_range("confident_prob", d.confident_prob));
  FLOE_RETURN_IF_ERROR(unit_range("confident_min_acceptance", d.confident_min_acceptance));
  if (d.confident_min_support < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "confident_min_support is ", d.confident_min_support, "; it must be >= 0"));
  }
  if (p.has_confident_min_match() && d.confident_min_match < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "confident_min_match is ", d.confident_min_match, "; it must be >= 0"));
  }
  if (!(d.score_exponent >= 0.01f && d.score_exponent <= 100.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "score_exponent is ", d.score_exponent, "; it must be in [0.01, 100]"));
  }
  return d;
}

grpc::Status SuffixCacheService::StartRequest(grpc::ServerContext* context, const floe::v1::SuffixStartRequest* req,
                                              floe::v1::SuffixStartResponse*) {
  if (grpc::Status s = AuthorizeInternal(*context, "SuffixCache.StartRequest"); !s.ok()) return s;
  CallSlot slot(this, "StartRequest");
  if (!slot.status().ok()) return slot.status();
  if (absl::Status s = CheckIds("", req->namespace_(), req->request_id()); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = CheckTokens("prompt", req->prompt()); !s.ok()) return ToGrpcStatus(s);
  absl::Status started = store_->StartRequest(NamespaceOrDefault(req->namespace_()), req->request_id(),
                                              absl::MakeConstSpan(req->prompt().data(), req->prompt().size()));
  // Over --max-bytes: refused like an overload (the requests running go on).
  if (absl::IsResourceExhausted(started)) rejected_total_.fetch_add(1, std::memory_order_relaxed);
  return ToGrpcStatus(started);
}

grpc::Status SuffixCacheService::Step(grpc::ServerContext* context, const floe::v1::SuffixStepRequest* req,
                                      floe::v1::SuffixStepResponse* resp) {
  if (grpc::Status s = AuthorizeInternal(*context, "SuffixCache.Step"); !s.ok()) return s;
  CallSlot slot(this, "Step");
  if (!slot.status().ok()) return slot.status();
  const int n = req->entries_size();
  if (n == 0) return ToGrpcStatus(absl::InvalidArgumentError("entries is empty: a Step needs at least one request"));
  if (n > limits_.max_batch) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("entries has ", n, " requests; --max-batch is ", limits_.max_batch)));
  }
  DraftParams batch_params;
  if (req->has_params()) {
    auto p = ToDraftParams("params.", req->params());
    if (!p.ok()) return ToGrpcStatus(p.status());
    batch_params = *p;
  }
  std::vector<StepItem> items(n);
  absl::flat_hash_set<std::pair<std::string, std::string>> seen;
  for (int i = 0; i < n; ++i) {
    const floe::v1::SuffixStepEntry& e = req->entries(i);
    const std::string field = absl::StrCat("entries[", i, "].");
    if (absl::Status s = CheckIds(field, e.namespace_(), e.request_id()); !s.ok()) return ToGrpcStatus(s);
    if (absl::Status s = CheckTokens(absl::StrCat(field, "appended"), e.appended()); !s.ok()) return ToGrpcStatus(s);
    StepItem& item = items[i];
    item.ns = NamespaceOrDefault(e.namespace_());
    item.request_id = e.request_id();
    if (!seen.emplace(item.ns, item.request_id).second) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          field, "request_id '", item.request_id, "' appears twice in one Step (namespace '", item.ns, "')")));
    }
    item.response_offset = e.response_offset();
    item.appended = absl::MakeConstSpan(e.appended().data(), e.appended().size());
    item.speculate = e.speculate();
    item.params = batch_params;
    if (e.has_params()) {
      auto p = ToDraftParams(absl::StrCat(field, "params."), e.params());
      if (!p.ok()) return ToGrpcStatus(p.status());
      item.params = *p;
    }
  }
  StepTimings timings;
  std::vector<StepOutcome> outcomes = store_->Step(items, &timings);
  if (step_observer_) step_observer_(timings);
  steps_total_.fetch_add(1, std::memory_order_relaxed);
  int64_t drafts = 0, queries = 0;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    StepOutcome& o = outcomes[i];
    floe::v1::SuffixDraft* d = resp->add_results();
    if (!o.status.ok()) {
      d->set_code(static_cast<int32_t>(o.status.code()));
      d->set_error(std::string(o.status.message()));
      continue;
    }
    queries += items[i].speculate ? 1 : 0;
    drafts += o.draft.token_ids.empty() ? 0 : 1;
    d->mutable_token_ids()->Assign(o.draft.token_ids.begin(), o.draft.token_ids.end());
    d->mutable_parents()->Assign(o.draft.parents.begin(), o.draft.parents.end());
    d->mutable_probs()->Assign(o.draft.probs.begin(), o.draft.probs.end());
    d->set_score(o.draft.score);
    d->set_match_len(o.draft.match_len);
  }
  drafts_total_.fetch_add(drafts, std::memory_order_relaxed);
  speculate_queries_total_.fetch_add(queries, std::memory_order_relaxed);
  return grpc::Status::OK;
}

grpc::Status SuffixCacheService::EndRequest(grpc::ServerContext* context, const floe::v1::SuffixEndRequest* req,
                                            floe::v1::SuffixEndResponse* resp) {
  if (grpc::Status s = AuthorizeInternal(*context, "SuffixCache.EndRequest"); !s.ok()) return s;
  CallSlot slot(this, "EndRequest");
  if (!slot.status().ok()) return slot.status();
  if (absl::Status s = CheckIds("", req->namespace_(), req->request_id()); !s.ok()) return ToGrpcStatus(s);
  auto cached = store_->EndRequest(NamespaceOrDefault(req->namespace_()), req->request_id());
  if (!cached.ok()) return ToGrpcStatus(cached.status());
  resp->set_cached(*cached);
  return grpc::Status::OK;
}

grpc::Status SuffixCacheService::AbortRequest(grpc::ServerContext* context, const floe::v1::SuffixAbortRequest* req,
                                              floe::v1::SuffixAbortResponse*) {
  if (grpc::Status s = AuthorizeInternal(*context, "SuffixCache.AbortRequest"); !s.ok()) return s;
  CallSlot slot(this, "AbortRequest");
  if (!slot.status().ok()) return slot.status();
  if (absl::Status s = CheckIds("", req->namespace_(), req->request_id()); !s.ok()) return ToGrpcStatus(s);
  return ToGrpcStatus(store_->AbortRequest(NamespaceOrDefault(req->namespace_()), req->request_id()));
}

grpc::Status SuffixCacheService::GetStats(grpc::ServerContext* context, const floe::v1::SuffixStatsRequest*,
                                          floe::v1::SuffixStats* resp) {
  auto scope = StatsScope(*context);
  if (!scope.ok()) return ToGrpcStatus(scope.status());
  CallSlot slot(this, "GetStats");
  if (!slot.status().ok()) return slot.status();
  StoreStats s = store_->Stats();
  resp->set_max_bytes(store_->options().max_bytes);
  resp->set_last_snapshot_unix_ms(last_snapshot_ms_.load());
  resp->set_max_depth(store_->options().max_depth);
  resp->set_max_cached_responses(store_->options().max_cached_responses);
  resp->set_eviction(EvictionKindName(store_->options().eviction));
  resp->set_async_global_appends(store_->options().async_global_appends);
  for (const NamespaceStats& n : s.namespaces) {
    if (*scope && !TenantOwnsNamespace(**scope, n.name)) continue;
    floe::v1::SuffixNamespaceStats* out = resp->add_namespaces();
    out->set_namespace_(n.name);
    out->set_active_requests(n.active);
    out->set_cached_responses(n.cached);
    out->set_cached_tokens(n.cached_tokens);
    out->set_tree_bytes(n.tree_bytes);
    if (*scope) {
      // A tenant's totals are over its own namespaces only.
      resp->set_active_requests(resp->active_requests() + n.active);
      resp->set_cached_responses(resp->cached_responses() + n.cached);
      resp->set_cached_tokens(resp->cached_tokens() + n.cached_tokens);
      resp->set_bytes(resp->bytes() + n.tree_bytes);
    }
  }
  if (*scope) return grpc::Status::OK;  // the service-wide counters mix every tenant's traffic
  resp->set_active_requests(s.active);
  resp->set_cached_responses(s.cached);
  resp->set_cached_tokens(s.cached_tokens);
  resp->set_bytes(s.bytes);
  resp->set_evictions_total(s.evictions_total);
  resp->set_budget_evictions_total(s.budget_evictions_total);
  resp->set_active_bytes(s.active_bytes);
  resp->set_expired_requests_total(s.expired_total);
  resp->set_refused_starts_total(s.refused_starts_total);
  resp->set_steps_total(steps_total_.load());
  resp->set_drafts_total(drafts_total_.load());
  resp->set_rejected_overload_total(rejected_total_.load());
  return grpc::Status::OK;
}

grpc::Status SuffixCacheService::Snapshot(grpc::ServerContext* context, const floe::v1::SuffixSnapshotRequest*,
                                          floe::v1::SuffixSnapshotResponse* resp) {
  if (grpc::Status s = AuthorizeAdminOrInternal(admin_keys_, internal_trust_.get(), *context, "SuffixCache.Snapshot");
      !s.ok())
    return s;
  CallSlot slot(this, "Snapshot");
  if (!slot.status().ok()) return slot.status();
  auto info = WriteSnapshot();
  if (!info.ok()) return ToGrpcStatus(info.status());
  resp->set_path(info->path);
  resp->set_bytes(info->bytes);
  resp->set_responses(info->responses);
  return grpc::Status::OK;
}

grpc::Status SuffixCacheService::ClearNamespace(grpc::ServerContext* context,
                                                const floe::v1::SuffixClearNamespaceRequest* req,
                                                floe::v1::SuffixClearNamespaceResponse* resp) {
  if (grpc::Status s =
          AuthorizeAdminOrInternal(admin_keys_, internal_trust_.get(), *context, "SuffixCache.ClearNamespace");
      !s.ok())
    return s;
  CallSlot slot(this, "ClearNamespace");
  if (!slot.status().ok()) return slot.status();
  if (absl::Status s = CheckNamespace("", req->namespace_()); !s.ok()) return ToGrpcStatus(s);
  auto [cached, active] = store_->ClearNamespace(NamespaceOrDefault(req->namespace_()));
  resp->set_dropped_responses(cached);
  resp->set_dropped_active(active);
  LogEvent(LogLevel::kInfo, "suffix-cache", "namespace_cleared",
           {{"namespace", NamespaceOrDefault(req->namespace_())}, {"responses", cached}, {"active", active}});
  return grpc::Status::OK;
}

absl::StatusOr<SnapshotInfo> SuffixCacheService::WriteSnapshot() {
  if (limits_.snapshot_path.empty()) {
    return absl::FailedPreconditionError("no snapshot path: start with --snapshot-dir");
  }
  absl::MutexLock l(&snapshot_mu_);
  SnapshotData data = store_->ExportSnapshot();
  SnapshotInfo info;
  info.path = limits_.snapshot_path;
  for (const auto& ns : data.namespaces) info.responses += static_cast<int64_t>(ns.responses.size());
  const std::string bytes = EncodeSnapshot(data);
  info.bytes = static_cast<int64_t>(bytes.size());
  if (absl::Status s = WriteFileAtomically(info.path, bytes); !s.ok()) {
    LogEvent(LogLevel::kError, "suffix-cache", "snapshot_failed", {{"error", std::string(s.message())}});
    return s;
  }
  last_snapshot_ms_.store(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
  LogEvent(LogLevel::kInfo, "suffix-cache", "snapshot_written",
           {{"path", info.path}, {"bytes", info.bytes}, {"responses", info.responses}});
  return info;
}

int64_t SuffixCacheService::RestoreSnapshot() {
  if (limits_.snapshot_path.empty()) return 0;
  auto bytes = ReadWholeFile(limits_.snapshot_path);
  if (!bytes.ok()) {
    LogEvent(LogLevel::kInfo, "suffix-cache", "no_snapshot", {{"path", limits_.snapshot_path}});
    return 0;
  }
  auto data = DecodeSnapshot(*bytes);
  if (!data.ok()) {
    const std::string aside = limits_.snapshot_path + ".corrupt";
    std::rename(limits_.snapshot_path.c_str(), aside.c_str());
    LogEvent(LogLevel::kError, "suffix-cache", "snapshot_corrupt",
             {{"path", limits_.snapshot_path}, {"moved_to", aside}, {"error", std::string(data.status().message())}});
    return 0;
  }
  if (static_cast<int>(data->max_depth) != store_->options().max_depth) {
    LogEvent(LogLevel::kWarning, "suffix-cache", "snapshot_depth_changed",
             {{"snapshot_max_depth", static_cast<int64_t>(data->max_depth)},
              {"max_depth", static_cast<int64_t>(store_->options().max_depth)}});
  }
  int64_t n = 0;
  for (const auto& ns : data->namespaces) n += static_cast<int64_t>(ns.responses.size());
  const int64_t namespaces = static_cast<int64_t>(data->namespaces.size());
  const auto start = std::chrono::steady_clock::now();
  const SuffixCacheStore::ImportReport report = store_->ImportSnapshot(std::move(*data));
  for (const std::string& problem : report.image_problems) {
    LogEvent(LogLevel::kWarning, "suffix-cache", "tree_image_rebuilt", {{"reason", problem}});
  }
  LogEvent(LogLevel::kInfo, "suffix-cache", "snapshot_restored",
           {{"path", limits_.snapshot_path},
            {"responses", n},
            {"namespaces", namespaces},
            {"from_image", static_cast<int64_t>(report.namespaces_from_image)},
            {"rebuilt", static_cast<int64_t>(report.namespaces_rebuilt)},
            {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}});
  return n;
}

}  // namespace floe::suffix_cache
