#include "services/worker/speculation/suffix_proposer.h"

namespace floe {
namespace {
// Debian's Abseil has its own string_view.
absl::string_view Sv(std::string_view v) { return absl::string_view(v.data(), v.size()); }
}  // namespace

SuffixProposer::SuffixProposer(SuffixProposerOptions options, std::unique_ptr<GlobalDraftSource> global)
    : options_(options), global_(std::move(global)) {}

SuffixProposer::~SuffixProposer() = default;

suffix_cache::SuffixSpeculator& SuffixProposer::SpeculatorFor(std::string_view ns) {
  auto& slot = by_namespace_[Sv(ns)];
  if (!slot) {
    suffix_cache::SpeculatorConfig config;
    config.max_depth = options_.max_depth;
    config.max_cached_requests = options_.max_cached_requests;
    slot = std::make_unique<suffix_cache::SuffixSpeculator>(config);
  }
  return *slot;
}

void SuffixProposer::Sync(suffix_cache::SuffixSpeculator& speculator, std::string_view request_id,
                          std::span<const int32_t> tokens, int32_t prompt_len) {
  const absl::string_view id = Sv(request_id);
  auto it = appended_.find(id);
  if (it == appended_.end()) {
    // Ids are unique among live requests, so a failure here means a stale
    // entry; drafting simply stays off for it.
    if (!speculator.StartRequest(id, absl::MakeConstSpan(tokens.data(), prompt_len)).ok()) return;
    it = appended_.emplace(std::string(request_id), static_cast<size_t>(prompt_len)).first;
  }
  if (tokens.size() > it->second) {
    (void)speculator.AppendTokens(id, absl::MakeConstSpan(tokens.data() + it->second, tokens.size() - it->second));
    it->second = tokens.size();
  }
}

void SuffixProposer::Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) {
  int max_spec = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SpecSequence& s = batch[i];
    auto& speculator = SpeculatorFor(s.ns);
    Sync(speculator, s.request_id, s.tokens, s.prompt_len);
    suffix_cache::DraftParams params = options_.params;
    params.max_spec_tokens = std::min(params.max_spec_tokens, s.max_draft);
    max_spec = std::max(max_spec, params.max_spec_tokens);
    auto draft = speculator.Speculate(Sv(s.request_id),
                                      absl::MakeConstSpan(s.tokens.data(), s.tokens.size()), params);
    if (!draft.ok()) continue;
    out[i].tokens = std::move(draft->token_ids);
    if (params.use_tree_spec) out[i].parents = std::move(draft->parents);
    out[i].score = draft->score;
  }
  if (!global_ || batch.empty()) return;
  remote_.assign(batch.size(), DraftProposal{});
  global_->Query(batch, max_spec, remote_);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!remote_[i].tokens.empty() && remote_[i].score > out[i].score) out[i] = std::move(remote_[i]);
  }
}

void SuffixProposer::Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
                            int32_t prompt_len) {
  if (global_) global_->Finish(request_id, ns, tokens, prompt_len);
  if (!appended_.contains(Sv(request_id))) return;
  auto& speculator = SpeculatorFor(ns);
  Sync(speculator, request_id, tokens, prompt_len);
  (void)speculator.StopRequest(Sv(request_id));
  appended_.erase(appended_.find(Sv(request_id)));
}

}  // namespace floe
