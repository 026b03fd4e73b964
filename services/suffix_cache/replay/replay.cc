#include "services/suffix_cache/replay/replay.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/suffix_cache/replay/draft_source.h"
#include "services/suffix_cache/replay/ngram.h"

namespace floe::suffix_cache {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Accepted tokens of a draft against the true continuation: the longest
// matching prefix of a path, or for a tree the longest chain from the root
// that follows the truth.
int64_t AcceptedTokens(const Draft& d, bool tree, absl::Span<const int32_t> truth) {
  if (!tree) {
    int64_t a = 0;
    while (a < static_cast<int64_t>(d.token_ids.size()) && a < static_cast<int64_t>(truth.size()) &&
           d.token_ids[a] == truth[a]) {
      ++a;
    }
    return a;
  }
  int32_t parent = -1;
  int64_t a = 0;
  for (; a < static_cast<int64_t>(truth.size()); ++a) {
    int32_t next = -1;
    for (size_t i = 0; i < d.token_ids.size(); ++i) {
      if (d.parents[i] == parent && d.token_ids[i] == truth[a]) {
        next = static_cast<int32_t>(i);
        break;
      }
    }
    if (next < 0) break;
    parent = next;
  }
  return a;
}

// The n-gram prompt-lookup baseline.
class NgramSource final : public DraftSource {
 public:
  explicit NgramSource(const ReplayOptions& o) : n_(o.ngram_n), k_(o.ngram_k), ngram_(n_, k_) {}
  absl::Status Start(const TraceRequest& r) override {
    ngram_ = NgramProposer(n_, k_);
    ngram_.Append(r.prompt);
    return absl::OkStatus();
  }
  absl::StatusOr<Draft> Propose(const TraceRequest&, absl::Span<const int32_t>) override {
    Draft d;
    d.token_ids = ngram_.Propose();
    return d;
  }
  absl::Status Append(const TraceRequest&, absl::Span<const int32_t> tokens) override {
    ngram_.Append(tokens);
    return absl::OkStatus();
  }
  absl::Status Stop(const TraceRequest&) override { return absl::OkStatus(); }
  absl::Status Finish(ReplayResult*) override { return absl::OkStatus(); }

 private:
  int n_, k_;
  NgramProposer ngram_;
};

// The suffix speculator in this process.
class SpeculatorSource final : public DraftSource {
 public:
  explicit SpeculatorSource(const ReplayOptions& o) : options_(o), speculator_(o.speculator) {}
  absl::Status Prefill(ReplayResult* res) {
    const auto t0 = Clock::now();
    for (size_t k = 0; k < options_.prefill.size(); ++k) {
      const std::string id = absl::StrCat("prefill-", k);
      FLOE_RETURN_IF_ERROR(speculator_.StartRequest(id, {}));
      FLOE_RETURN_IF_ERROR(speculator_.AppendTokens(id, options_.prefill[k]));
      FLOE_RETURN_IF_ERROR(speculator_.StopRequest(id));
      res->prefill_tokens += static_cast<int64_t>(options_.prefill[k].size());
    }
    res->prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return absl::OkStatus();
  }
  absl::Status Start(const TraceRequest& r) override { return speculator_.StartRequest(r.id, r.prompt); }
  absl::StatusOr<Draft> Propose(const TraceRequest& r, absl::Span<const int32_t> context) override {
    return speculator_.Speculate(r.id, context, options_.draft);
  }
  absl::Status Append(const TraceRequest& r, absl::Span<const int32_t> tokens) override {
    return speculator_.AppendTokens(r.id, tokens);
  }
  absl::Status Stop(const TraceRequest& r) override { return speculator_.StopRequest(r.id); }
  absl::Status Finish(ReplayResult* res) override {
    res->cached_tokens = speculator_.global_tree().num_tokens();
    res->evictions = speculator_.num_evictions();
    res->global_tree_bytes = speculator_.global_tree().MemoryUsage();
    return absl::OkStatus();
  }

 private:
  const ReplayOptions& options_;
  SuffixSpeculator speculator_;
};

}  // namespace

absl::StatusOr<ReplayResult> RunReplay(const std::vector<TraceRequest>& trace,
                                       const ReplayOptions& options) {
  ReplayResult res;
  std::unique_ptr<DraftSource> source;
  if (options.ngram) {
    source = std::make_unique<NgramSource>(options);
  } else if (!options.server.empty()) {
    if (!options.prefill.empty()) {
      return absl::InvalidArgumentError("prefill responses are for in-process replays only");
    }
    FLOE_ASSIGN_OR_RETURN(source, ConnectRemoteSource(options));
  } else {
    auto local = std::make_unique<SpeculatorSource>(options);
    FLOE_RETURN_IF_ERROR(local->Prefill(&res));
    source = std::move(local);
  }
  const bool tree = options.draft.use_tree_spec && !options.ngram;
  std::vector<int32_t> context;
  const auto wall0 = Clock::now();
  for (const TraceRequest& r : trace) {
    ++res.requests;
    res.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    res.output_tokens += static_cast<int64_t>(r.output.size());
    auto t0 = Clock::now();
    FLOE_RETURN_IF_ERROR(source->Start(r));
    res.start_us += MicrosSince(t0);
    // Past Start, a failure lets go of the request before returning.
    auto abandon_on_error = [&](absl::Status s) {
      if (!s.ok()) source->Abandon(r);
      return s;
    };
    context.assign(r.prompt.begin(), r.prompt.end());
    const absl::Span<const int32_t> out(r.output);
    size_t i = 0;
    while (i < out.size()) {
      t0 = Clock::now();
      absl::StatusOr<Draft> proposed = source->Propose(r, context);
      FLOE_RETURN_IF_ERROR(abandon_on_error(proposed.status()));
      const Draft& draft = *proposed;
      res.speculate_us.push_back(MicrosSince(t0));
      const int64_t accepted = AcceptedTokens(draft, tree, out.subspan(i));
      const int64_t drafted = static_cast<int64_t>(draft.token_ids.size());
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
      FLOE_RETURN_IF_ERROR(abandon_on_error(source->Append(r, emitted)));
      res.append_us += MicrosSince(t0);
      context.insert(context.end(), emitted.begin(), emitted.end());
      i += emit;
    }
    t0 = Clock::now();
    FLOE_RETURN_IF_ERROR(abandon_on_error(source->Stop(r)));
    res.stop_us += MicrosSince(t0);
  }
  res.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  FLOE_RETURN_IF_ERROR(source->Finish(&res));
  return res;
}

}  // namespace floe::suffix_cache
