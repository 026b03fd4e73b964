#include "services/suffix_cache/replay/replay.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/suffix_cache/replay/ngram.h"

namespace floe::suffix_cache {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Drafting backend of one replay: the suffix speculator or the baseline.
class Drafter {
 public:
  explicit Drafter(const ReplayOptions& o)
      : options_(o), speculator_(o.speculator), ngram_(o.ngram_n, o.ngram_k) {}

  absl::Status Start(const TraceRequest& r) {
    if (options_.ngram) {
      ngram_ = NgramProposer(options_.ngram_n, options_.ngram_k);
      ngram_.Append(r.prompt);
      return absl::OkStatus();
    }
    return speculator_.StartRequest(r.id, r.prompt);
  }
  absl::Status Draft(const TraceRequest& r, absl::Span<const int32_t> context,
                     std::vector<int32_t>* out) {
    if (options_.ngram) {
      *out = ngram_.Propose();
      return absl::OkStatus();
    }
    FLOE_ASSIGN_OR_RETURN(suffix_cache::Draft d,
                          speculator_.Speculate(r.id, context, options_.draft));
    if (options_.draft.use_tree_spec) {
      // Greedy walk of the draft tree along the true output happens in
      // Accept(); keep the tree here.
      tree_ = std::move(d);
      out->clear();
      return absl::OkStatus();
    }
    *out = std::move(d.token_ids);
    return absl::OkStatus();
  }
  absl::Status Append(const TraceRequest& r, absl::Span<const int32_t> tokens) {
    if (options_.ngram) {
      ngram_.Append(tokens);
      return absl::OkStatus();
    }
    return speculator_.AppendTokens(r.id, tokens);
  }
  absl::Status Stop(const TraceRequest& r) {
    if (options_.ngram) return absl::OkStatus();
    return speculator_.StopRequest(r.id);
  }
  // Accepted tokens of the last draft against the true continuation, and
  // the number drafted.
  std::pair<int64_t, int64_t> Accept(const std::vector<int32_t>& path,
                                     absl::Span<const int32_t> truth) const {
    if (!options_.draft.use_tree_spec || options_.ngram) {
      int64_t a = 0;
      while (a < static_cast<int64_t>(path.size()) && a < static_cast<int64_t>(truth.size()) &&
             path[a] == truth[a]) {
        ++a;
      }
      return {a, static_cast<int64_t>(path.size())};
    }
    // Tree: from the root, follow the child equal to the next true token.
    int32_t parent = -1;
    int64_t a = 0;
    for (; a < static_cast<int64_t>(truth.size()); ++a) {
      int32_t next = -1;
      for (size_t i = 0; i < tree_.token_ids.size(); ++i) {
        if (tree_.parents[i] == parent && tree_.token_ids[i] == truth[a]) {
          next = static_cast<int32_t>(i);
          break;
        }
      }
      if (next < 0) break;
      parent = next;
    }
    return {a, static_cast<int64_t>(tree_.token_ids.size())};
  }
  const SuffixSpeculator& speculator() const { return speculator_; }
  SuffixSpeculator& speculator() { return speculator_; }

 private:
  const ReplayOptions& options_;
  SuffixSpeculator speculator_;
  NgramProposer ngram_;
  suffix_cache::Draft tree_;
};

}  // namespace

void ApplyDefaultMode(DraftParams* draft) {
  draft->extend_past_depth = true;
  draft->discount_own_suffix = true;
  draft->confident_prob = 0.99f;
  draft->confident_min_acceptance = 0.5f;
  draft->confident_min_support = 3;
  draft->score_exponent = 1.5f;
  draft->min_token_prob = 0.13f;
}

absl::StatusOr<ReplayResult> RunReplay(const std::vector<TraceRequest>& trace,
                                       const ReplayOptions& options) {
  ReplayResult res;
  Drafter drafter(options);
  std::vector<int32_t> context;
  std::vector<int32_t> draft;
  if (!options.ngram && !options.prefill.empty()) {
    const auto t0 = Clock::now();
    SuffixSpeculator& s = drafter.speculator();
    for (size_t k = 0; k < options.prefill.size(); ++k) {
      const std::string id = absl::StrCat("prefill-", k);
      FLOE_RETURN_IF_ERROR(s.StartRequest(id, {}));
      FLOE_RETURN_IF_ERROR(s.AppendTokens(id, options.prefill[k]));
      FLOE_RETURN_IF_ERROR(s.StopRequest(id));
      res.prefill_tokens += static_cast<int64_t>(options.prefill[k].size());
    }
    res.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const auto wall0 = Clock::now();
  for (const TraceRequest& r : trace) {
    ++res.requests;
    res.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    res.output_tokens += static_cast<int64_t>(r.output.size());
    auto t0 = Clock::now();
    FLOE_RETURN_IF_ERROR(drafter.Start(r));
    res.start_us += MicrosSince(t0);
    context.assign(r.prompt.begin(), r.prompt.end());
    const absl::Span<const int32_t> out(r.output);
    size_t i = 0;
    while (i < out.size()) {
      t0 = Clock::now();
      FLOE_RETURN_IF_ERROR(drafter.Draft(r, context, &draft));
      res.speculate_us.push_back(MicrosSince(t0));
      const auto [accepted, drafted] = drafter.Accept(draft, out.subspan(i));
      const size_t emit = std::min<size_t>(accepted + 1, out.size() - i);
      ++res.steps;
      res.accepted_tokens += accepted;
      res.drafted_tokens += drafted;
      if (drafted == 0) ++res.empty_draft_steps;
      auto bump = [](std::vector<int64_t>& h, int64_t at) {
        if (static_cast<int64_t>(h.size()) <= at) h.resize(at + 1, 0);
        ++h[at];
      };
      bump(res.drafted_histogram, drafted);
      bump(res.accepted_histogram, accepted);
      const absl::Span<const int32_t> emitted = out.subspan(i, emit);
      t0 = Clock::now();
      FLOE_RETURN_IF_ERROR(drafter.Append(r, emitted));
      res.append_us += MicrosSince(t0);
      context.insert(context.end(), emitted.begin(), emitted.end());
      i += emit;
    }
    t0 = Clock::now();
    FLOE_RETURN_IF_ERROR(drafter.Stop(r));
    res.stop_us += MicrosSince(t0);
  }
  res.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  if (!options.ngram) {
    res.cached_tokens = drafter.speculator().global_tree().num_tokens();
    res.evictions = drafter.speculator().num_evictions();
    res.global_tree_bytes = drafter.speculator().global_tree().MemoryUsage();
  }
  return res;
}

}  // namespace floe::suffix_cache
