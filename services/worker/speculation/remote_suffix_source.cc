#include "services/worker/speculation/remote_suffix_source.h"

#include <cstdlib>

namespace floe {
namespace {
absl::string_view Sv(std::string_view v) { return absl::string_view(v.data(), v.size()); }
constexpr int kFailedPrecondition = 9;  // google.rpc.Code
}  // namespace

RemoteSuffixSource::RemoteSuffixSource(suffix_cache::SuffixCacheClient* client, suffix_cache::DraftParams params)
    : client_(client), params_(params) {}

RemoteSuffixSource::RemoteSuffixSource(std::unique_ptr<suffix_cache::SuffixCacheClient> client,
                                       suffix_cache::DraftParams params)
    : owned_(std::move(client)), client_(owned_.get()), params_(params) {}

RemoteSuffixSource::Remote* RemoteSuffixSource::Track(const SpecSequence& s) {
  auto it = live_.find(Sv(s.request_id));
  if (it == live_.end()) {
    Remote r;
    r.ns = std::string(s.ns);
    r.broken = !client_->StartRequest(r.ns, std::string(s.request_id),
                                      absl::MakeConstSpan(s.tokens.data(), s.prompt_len)).ok();
    it = live_.emplace(std::string(s.request_id), std::move(r)).first;
  }
  return it->second.broken ? nullptr : &it->second;
}

void RemoteSuffixSource::AddEntry(floe::v1::SuffixStepRequest& step, const std::string& id, const Remote& r,
                                  std::span<const int32_t> tokens, int32_t prompt_len, bool speculate) {
  auto* e = step.add_entries();
  e->set_namespace_(r.ns);
  e->set_request_id(id);
  e->set_response_offset(r.acknowledged);
  const size_t from = static_cast<size_t>(prompt_len + r.acknowledged);
  if (from < tokens.size()) e->mutable_appended()->Add(tokens.begin() + from, tokens.end());
  e->set_speculate(speculate);
}

void RemoteSuffixSource::Absorb(Remote& r, const floe::v1::SuffixDraft& result, int64_t sent_to) {
  if (result.code() == 0) {
    r.acknowledged = sent_to;
    return;
  }
  ++counters_.failed_entries;
  if (result.code() != kFailedPrecondition) return;  // late or unavailable: resend next step
  // "... the request has N response tokens": take the server's count.
  const std::string& msg = result.error();
  const size_t at = msg.rfind("has ");
  if (at == std::string::npos) return;
  const int64_t n = std::strtoll(msg.c_str() + at + 4, nullptr, 10);
  if (n >= 0 && n <= sent_to) r.acknowledged = n;
}

void RemoteSuffixSource::Query(std::span<const SpecSequence> batch, int max_spec_tokens,
                               std::span<DraftProposal> out) {
  floe::v1::SuffixStepRequest step;
  auto* p = step.mutable_params();
  p->set_max_spec_tokens(std::max(1, max_spec_tokens));
  p->set_max_spec_factor(params_.max_spec_factor);
  p->set_max_spec_offset(params_.max_spec_offset);
  p->set_min_token_prob(params_.min_token_prob);
  p->set_use_tree_spec(false);
  std::vector<std::pair<size_t, Remote*>> sent;
  for (size_t i = 0; i < batch.size(); ++i) {
    Remote* r = Track(batch[i]);
    if (!r) continue;
    AddEntry(step, std::string(batch[i].request_id), *r, batch[i].tokens, batch[i].prompt_len, true);
    step.mutable_entries(step.entries_size() - 1)->mutable_params()->CopyFrom(*p);
    step.mutable_entries(step.entries_size() - 1)->mutable_params()->set_max_spec_tokens(batch[i].max_draft);
    sent.emplace_back(i, r);
  }
  if (sent.empty()) return;
  ++counters_.steps;
  floe::v1::SuffixStepResponse resp = client_->Step(step);
  for (size_t k = 0; k < sent.size() && k < static_cast<size_t>(resp.results_size()); ++k) {
    const auto& [i, r] = sent[k];
    const floe::v1::SuffixDraft& d = resp.results(static_cast<int>(k));
    Absorb(*r, d, static_cast<int64_t>(batch[i].tokens.size()) - batch[i].prompt_len);
    if (d.code() != 0) continue;
    out[i].tokens.assign(d.token_ids().begin(), d.token_ids().end());
    out[i].score = d.score();
  }
}

void RemoteSuffixSource::Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
                                int32_t prompt_len) {
  (void)ns;
  auto it = live_.find(Sv(request_id));
  if (it == live_.end()) return;
  Remote& r = it->second;
  if (!r.broken) {
    const int64_t response = static_cast<int64_t>(tokens.size()) - prompt_len;
    if (response > r.acknowledged) {
      floe::v1::SuffixStepRequest step;
      AddEntry(step, std::string(request_id), r, tokens, prompt_len, false);
      floe::v1::SuffixStepResponse resp = client_->Step(step);
      if (resp.results_size() > 0) Absorb(r, resp.results(0), response);
    }
    (void)client_->EndRequest(r.ns, std::string(request_id));
  }
  live_.erase(it);
}

}  // namespace floe
