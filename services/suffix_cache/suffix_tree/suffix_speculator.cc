#include "services/suffix_cache/suffix_tree/suffix_speculator.h"

#include <algorithm>
#include <utility>

#include "services/suffix_cache/suffix_tree/invariant.h"
#include "absl/strings/str_cat.h"

namespace floe::suffix_cache {
namespace {
// The local tree holds one sequence.
constexpr int32_t kLocalSeq = 0;
}  // namespace

SuffixSpeculator::SuffixSpeculator(const SpeculatorConfig& config)
    : config_(config), global_(config.max_depth), eviction_(config.eviction) {}

absl::Status SuffixSpeculator::StartRequest(absl::string_view request_id,
                                            absl::Span<const int32_t> prompt) {
  std::string id(request_id);
  if (active_.contains(id)) {
    return absl::InvalidArgumentError(absl::StrCat("request '", id, "' is already active"));
  }
  auto local = std::make_unique<SuffixTree>(config_.max_depth);
  local->Extend(kLocalSeq, prompt);
  active_.emplace(id, Active{std::move(local), DraftFeedback(), -1});
  if (config_.max_cached_requests != 0) {
    if (cached_.contains(id)) {
      absl::Status st = Evict(id);
      FLOE_SUFFIX_INVARIANT(st.ok(), "evicting a cached response");
    }
    AllocateSeqId(id);
  }
  return absl::OkStatus();
}

int32_t SuffixSpeculator::AllocateSeqId(const std::string& request_id) {
  int32_t seq_id;
  while (true) {
    seq_id = next_seq_id_;
    next_seq_id_ = (next_seq_id_ + 1) & 0x7FFFFFFF;
    auto it = request_of_seq_.find(seq_id);
    if (it == request_of_seq_.end() || !active_.contains(it->second)) break;
  }
  if (auto it = request_of_seq_.find(seq_id); it != request_of_seq_.end()) {
    // Wrapped around onto an inactive cached response: evict it.
    absl::Status st = Evict(std::string(it->second));
    FLOE_SUFFIX_INVARIANT(st.ok(), "evicting a cached response");
  }
  cached_[request_id] = Cached{seq_id};
  request_of_seq_[seq_id] = request_id;
  eviction_.Add(seq_id);
  EvictBeyondLimit(seq_id);
  return seq_id;
}

void SuffixSpeculator::EvictBeyondLimit(int32_t newest_seq_id) {
  if (config_.max_cached_requests < 0) return;
  while (static_cast<int64_t>(cached_.size()) > config_.max_cached_requests) {
    // Never the response just added.
    const int32_t victim = eviction_.PickVictim(newest_seq_id);
    if (victim < 0) return;
    absl::Status st = Evict(std::string(request_of_seq_.at(victim)));
    FLOE_SUFFIX_INVARIANT(st.ok(), "evicting a cached response");
    ++num_evictions_;
  }
}

absl::Status SuffixSpeculator::Evict(const std::string& request_id) {
  auto it = cached_.find(request_id);
  if (it == cached_.end()) {
    return absl::NotFoundError(absl::StrCat("request '", request_id, "' is not cached"));
  }
  const Cached c = it->second;
  cached_.erase(it);
  request_of_seq_.erase(c.seq_id);
  eviction_.Remove(c.seq_id);
  if (global_.Contains(c.seq_id)) return global_.Remove(c.seq_id);
  return absl::OkStatus();  // an empty response was never added to the tree
}

absl::Status SuffixSpeculator::EvictCachedResponse(absl::string_view request_id) {
  return Evict(std::string(request_id));
}

absl::Status SuffixSpeculator::AppendTokens(absl::string_view request_id,
                                            absl::Span<const int32_t> tokens) {
  auto it = active_.find(request_id);
  if (it == active_.end()) {
    return absl::NotFoundError(absl::StrCat("request '", request_id, "' is not active"));
  }
  Active& a = it->second;
  a.local->Extend(kLocalSeq, tokens);
  const int64_t accepted = a.feedback.Observe(tokens);
  if (a.last_source >= 0) eviction_.Credit(a.last_source, accepted);
  a.last_source = -1;
  if (auto c = cached_.find(request_id); c != cached_.end()) {
    global_.Extend(c->second.seq_id, tokens);
  }
  return absl::OkStatus();
}

absl::Status SuffixSpeculator::StopRequest(absl::string_view request_id) {
  auto it = active_.find(request_id);
  if (it == active_.end()) {
    return absl::NotFoundError(absl::StrCat("request '", request_id, "' is not active"));
  }
  active_.erase(it);
  if (auto c = cached_.find(request_id); c != cached_.end()) {
    global_.Finish(c->second.seq_id);  // no more appends: drop match state
  }
  return absl::OkStatus();
}

absl::StatusOr<Draft> SuffixSpeculator::Speculate(absl::string_view request_id,
                                                  absl::Span<const int32_t> context,
                                                  const DraftParams& params) {
  auto it = active_.find(request_id);
  if (it == active_.end()) {
    return absl::NotFoundError(absl::StrCat("request '", request_id, "' is not active"));
  }
  if (static_cast<int>(context.size()) > config_.max_depth) {
    context = context.subspan(context.size() - config_.max_depth);
  }
  Active& a = it->second;
  Draft best = a.local->Speculate(context, a.feedback.Adjust(params, /*local=*/true), kLocalSeq);
  best.source_seq = -1;  // the local tree is no cached response
  if (config_.max_cached_requests != 0) {
    int32_t hint = -1;
    if (auto c = cached_.find(request_id); c != cached_.end()) hint = c->second.seq_id;
    Draft global = global_.Speculate(context, a.feedback.Adjust(params, /*local=*/false), hint, best.score);
    // A draft read from the request's own response credits nothing.
    if (global.source_seq == hint) global.source_seq = -1;
    if (global.score > best.score) best = std::move(global);
  }
  a.feedback.Proposed(best);
  a.last_source = best.source_seq;
  return best;
}

size_t SuffixSpeculator::LocalMemoryUsage() const {
  size_t total = 0;
  for (const auto& [id, a] : active_) total += a.local->MemoryUsage();
  return total;
}

}  // namespace floe::suffix_cache
