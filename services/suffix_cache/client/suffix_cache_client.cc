#include "services/suffix_cache/client/suffix_cache_client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/status_conversion.h"

namespace floe::suffix_cache {
namespace {

uint64_t Hash64(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  // Finalizer (splitmix64): FNV alone clusters similar strings on the ring.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

// One Step per replica; shared with the gRPC callback, which may outlive
// Step() when the answer comes late.
struct PendingStep {
  grpc::ClientContext ctx;
  floe::v1::SuffixStepRequest request;
  floe::v1::SuffixStepResponse response;
  std::vector<int> entry_index;  // position in the caller's request
};

struct StepLatch {
  absl::Mutex mu;
  int remaining = 0;
  std::vector<grpc::Status> status;
  std::vector<bool> done;
};

// gRPC 1.51 (Debian 12) serves the C++ callback API, which Step uses, from one
// process-wide completion queue reference-counted by the channels that used
// it: when the last such channel is destroyed, gRPC shuts the queue down and
// deletes it while its own polling threads may still touch it, and the
// process aborts ("ref_counted.h: assertion failed: prior > 0"; seen in
// tests that create and destroy clients). One channel that made a callback
// call and lives as long as the process keeps the count above zero, so the
// teardown never runs. Intentionally leaked: it must outlive every client
// (held by a static, so LeakSanitizer sees it reachable, not lost).
void PinCallbackQueue() {
  static const std::shared_ptr<grpc::Channel>* const pinned = [] {
    auto* channel = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
    auto stub = floe::v1::SuffixCache::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now());  // fails at once; the reference is what matters
    floe::v1::SuffixStepRequest request;
    floe::v1::SuffixStepResponse response;
    absl::Mutex mu;
    bool done = false;
    stub->async()->Step(&ctx, &request, &response, [&](grpc::Status) {
      absl::MutexLock lock(&mu);
      done = true;
    });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return channel;
  }();
  (void)pinned;
}

}  // namespace

floe::v1::SpeculateParams ToSpeculateParams(const DraftParams& params) {
  floe::v1::SpeculateParams p;
  p.set_max_spec_tokens(params.max_spec_tokens);
  p.set_max_spec_factor(params.max_spec_factor);
  p.set_max_spec_offset(params.max_spec_offset);
  p.set_min_token_prob(params.min_token_prob);
  p.set_use_tree_spec(params.use_tree_spec);
  p.set_extend_past_depth(params.extend_past_depth);
  p.set_discount_own_suffix(params.discount_own_suffix);
  p.set_confident_prob(params.confident_prob);
  if (params.confident_min_match >= 0) p.set_confident_min_match(params.confident_min_match);
  p.set_confident_min_acceptance(params.confident_min_acceptance);
  p.set_confident_min_support(params.confident_min_support);
  if (params.score_exponent != 1.0f) p.set_score_exponent(params.score_exponent);
  return p;
}

NamespaceRing::NamespaceRing(const std::vector<std::string>& replicas, int virtual_nodes) {
  for (int r = 0; r < static_cast<int>(replicas.size()); ++r) {
    for (int v = 0; v < virtual_nodes; ++v) points_.emplace_back(Hash64(absl::StrCat(replicas[r], "#", v)), r);
  }
  std::sort(points_.begin(), points_.end());
}

int NamespaceRing::ReplicaFor(absl::string_view ns) const {
  if (points_.empty()) return 0;
  const uint64_t h = Hash64(ns.empty() ? absl::string_view("default") : ns);
  auto it = std::lower_bound(points_.begin(), points_.end(), std::make_pair(h, -1));
  if (it == points_.end()) it = points_.begin();
  return it->second;
}

absl::StatusOr<std::unique_ptr<SuffixCacheClient>> SuffixCacheClient::Create(const ClientOptions& options) {
  if (options.addresses.empty()) return absl::InvalidArgumentError("addresses is empty: need at least one replica");
  if (options.virtual_nodes < 1) return absl::InvalidArgumentError("virtual_nodes must be >= 1");
  PinCallbackQueue();
  return std::unique_ptr<SuffixCacheClient>(
      new SuffixCacheClient(options, NamespaceRing(options.addresses, options.virtual_nodes)));
}

SuffixCacheClient::SuffixCacheClient(const ClientOptions& options, NamespaceRing ring)
    : options_(options), ring_(std::move(ring)) {
  for (const std::string& address : options_.addresses) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, options_.initial_backoff_ms);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, options_.initial_backoff_ms);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, options_.max_backoff_ms);
    auto channel = grpc::CreateCustomChannel(
        address, options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(), args);
    stubs_.push_back(floe::v1::SuffixCache::NewStub(channel));
    channels_.push_back(std::move(channel));
  }
}

void SuffixCacheClient::PrepareContext(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.call_deadline);
  if (options_.internal_trust) options_.internal_trust->Attach(ctx);
}

absl::Status SuffixCacheClient::StartRequest(const std::string& ns, const std::string& request_id,
                                             absl::Span<const int32_t> prompt) {
  floe::v1::SuffixStartRequest req;
  req.set_namespace_(ns);
  req.set_request_id(request_id);
  req.mutable_prompt()->Add(prompt.begin(), prompt.end());
  floe::v1::SuffixStartResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  return FromGrpcStatus(StubFor(ns)->StartRequest(&ctx, req, &resp));
}

absl::StatusOr<bool> SuffixCacheClient::EndRequest(const std::string& ns, const std::string& request_id) {
  floe::v1::SuffixEndRequest req;
  req.set_namespace_(ns);
  req.set_request_id(request_id);
  floe::v1::SuffixEndResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  if (grpc::Status s = StubFor(ns)->EndRequest(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp.cached();
}

absl::Status SuffixCacheClient::AbortRequest(const std::string& ns, const std::string& request_id) {
  floe::v1::SuffixAbortRequest req;
  req.set_namespace_(ns);
  req.set_request_id(request_id);
  floe::v1::SuffixAbortResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  return FromGrpcStatus(StubFor(ns)->AbortRequest(&ctx, req, &resp));
}

absl::StatusOr<floe::v1::SuffixStats> SuffixCacheClient::GetStats(int replica) {
  if (replica < 0 || replica >= static_cast<int>(stubs_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", replica, " is not in [0, ", stubs_.size(), ")"));
  }
  floe::v1::SuffixStats stats;
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  if (grpc::Status s = stubs_[replica]->GetStats(&ctx, {}, &stats); !s.ok()) return FromGrpcStatus(s);
  return stats;
}

floe::v1::SuffixStepResponse SuffixCacheClient::Step(const floe::v1::SuffixStepRequest& request) {
  const int n = request.entries_size();
  floe::v1::SuffixStepResponse out;
  for (int i = 0; i < n; ++i) out.add_results();
  if (n == 0) return out;
  const auto deadline = std::chrono::system_clock::now() + options_.step_deadline;

  std::vector<std::shared_ptr<PendingStep>> calls(stubs_.size());
  for (int i = 0; i < n; ++i) {
    const int r = ring_.ReplicaFor(request.entries(i).namespace_());
    if (!calls[r]) {
      calls[r] = std::make_shared<PendingStep>();
      if (request.has_params()) *calls[r]->request.mutable_params() = request.params();
    }
    *calls[r]->request.add_entries() = request.entries(i);
    calls[r]->entry_index.push_back(i);
  }
  auto latch = std::make_shared<StepLatch>();
  latch->status.resize(calls.size());
  latch->done.resize(calls.size(), false);
  std::vector<int> issued;
  for (int r = 0; r < static_cast<int>(calls.size()); ++r) {
    if (!calls[r]) continue;
    // A replica known to be down fails at once; gRPC keeps reconnecting.
    if (channels_[r]->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      latch->status[r] = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                      absl::StrCat("suffix-cache replica ", options_.addresses[r], " is unreachable"));
      continue;
    }
    issued.push_back(r);
  }
  {
    absl::MutexLock l(&latch->mu);
    latch->remaining = static_cast<int>(issued.size());
  }
  for (int r : issued) {
    std::shared_ptr<PendingStep> call = calls[r];
    call->ctx.set_deadline(deadline);
    if (options_.internal_trust) options_.internal_trust->Attach(&call->ctx);
    stubs_[r]->async()->Step(&call->ctx, &call->request, &call->response,
                             [call, latch, r](grpc::Status s) {
                               absl::MutexLock l(&latch->mu);
                               latch->status[r] = std::move(s);
                               latch->done[r] = true;
                               --latch->remaining;
                             });
  }
  // gRPC enforces the deadline; the wait adds a little slack for the callback
  // and then gives up on any call still out (its answer is dropped).
  const absl::Time wait_until =
      absl::FromChrono(deadline) + absl::Microseconds(500);
  {
    absl::MutexLock l(&latch->mu);
    latch->mu.AwaitWithDeadline(
        absl::Condition(+[](StepLatch* s) { return s->remaining == 0; }, latch.get()), wait_until);
  }
  for (int r = 0; r < static_cast<int>(calls.size()); ++r) {
    if (!calls[r]) continue;
    grpc::Status status;
    bool finished;
    {
      absl::MutexLock l(&latch->mu);
      finished = latch->done[r] || std::find(issued.begin(), issued.end(), r) == issued.end();
      status = latch->status[r];
    }
    const std::vector<int>& idx = calls[r]->entry_index;
    if (!finished) {
      // Late: drop it. The callback still owns `call` until gRPC is done.
      calls[r]->ctx.TryCancel();
      status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "suffix-cache Step answer came too late");
    } else if (status.ok() && calls[r]->response.results_size() == static_cast<int>(idx.size())) {
      for (size_t k = 0; k < idx.size(); ++k) out.mutable_results(idx[k])->Swap(calls[r]->response.mutable_results(k));
      continue;
    } else if (status.ok()) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "suffix-cache answered a different number of results");
    }
    for (int i : idx) {
      out.mutable_results(i)->set_code(static_cast<int32_t>(status.error_code()));
      out.mutable_results(i)->set_error(status.error_message());
    }
  }
  return out;
}

}  // namespace floe::suffix_cache
