#include "services/worker/engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "services/worker/sampling/sampler.h"

namespace floe {

using Clock = Sequence::Clock;

absl::StatusOr<StepCostCurve> MeasureStepCost(Backend& backend, int block_size, int max_tokens) {
  // One sequence of N tokens from position 0, every row with logits, as a
  // verified draft has: the pool is empty, so any blocks will do.
  std::vector<int> sizes;
  for (int n = 1; n <= std::min(max_tokens, 64); n *= 2) sizes.push_back(n);
  if (sizes.empty()) return absl::InvalidArgumentError("step cost: no token count to measure");
  const int largest = sizes.back();
  std::vector<int32_t> tokens(largest, 0), blocks((largest + block_size - 1) / block_size);
  for (size_t b = 0; b < blocks.size(); ++b) blocks[b] = static_cast<int32_t>(b);
  std::vector<float> logits(static_cast<size_t>(largest) * backend.config().vocab_size);
  constexpr int kRounds = 3;  // plus one warm-up round
  std::vector<std::vector<double>> ms(sizes.size());
  for (int round = 0; round <= kRounds; ++round) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      ForwardSequence f;
      f.tokens = std::span<const int32_t>(tokens).first(sizes[i]);
      f.block_table = blocks;
      f.num_logits = sizes[i];
      const auto t0 = Clock::now();
      absl::Status status = backend.Forward({&f, 1}, logits.data());
      if (!status.ok()) return status;
      if (round > 0) ms[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  std::vector<std::pair<int, double>> points;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::nth_element(ms[i].begin(), ms[i].begin() + kRounds / 2, ms[i].end());
    // Non-decreasing: a step never runs faster for running more.
    const double t = std::max(ms[i][kRounds / 2], points.empty() ? 0.0 : points.back().second);
    points.emplace_back(sizes[i], std::max(t, 1e-3));
  }
  return StepCostCurve::FromPoints(std::move(points));
}

absl::StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(
    std::unique_ptr<Backend> backend, EngineOptions options, std::vector<std::unique_ptr<Proposer>> proposers) {
  if (options.block_size <= 0 || options.block_size > 1024)
    return absl::InvalidArgumentError(absl::StrCat("block_size must be in [1, 1024], got ", options.block_size));
  if (options.max_num_batched_tokens <= 0 || options.max_num_seqs <= 0)
    return absl::InvalidArgumentError("max_num_batched_tokens and max_num_seqs must be positive");
  if (options.num_speculative_tokens < 0 || options.num_speculative_tokens > 64)
    return absl::InvalidArgumentError(
        absl::StrCat("num_speculative_tokens must be in [0, 64], got ", options.num_speculative_tokens));
  int num_blocks = options.num_blocks;
  if (num_blocks <= 0) {
    const size_t per_block = backend->KvBytesPerBlock(options.block_size);
    num_blocks = static_cast<int>(options.kv_cache_bytes / static_cast<int64_t>(per_block));
  }
  if (num_blocks < 2)
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache budget of ", options.kv_cache_bytes, " bytes holds fewer than 2 blocks of ",
        options.block_size, " tokens (", backend->KvBytesPerBlock(options.block_size), " bytes each)"));
  auto status = backend->AllocateKvCache(num_blocks, options.block_size);
  if (!status.ok()) return status;
  if (options.measure_step_cost && options.speculative_step_cost_curve.empty() && !proposers.empty() &&
      options.num_speculative_tokens > 0 && options.speculative_step_overhead_tokens >= 0) {
    const int max_tokens = std::min({options.max_num_batched_tokens, options.speculative_token_threshold,
                                     num_blocks * options.block_size});
    if (max_tokens >= 1) {  // else no step has room for a draft: nothing to plan on
      auto curve = MeasureStepCost(*backend, options.block_size, max_tokens);
      if (!curve.ok()) return curve.status();
      options.speculative_step_cost_curve = curve->points();
    }
  }
  return std::unique_ptr<EngineCore>(
      new EngineCore(std::move(backend), std::move(options), num_blocks, std::move(proposers)));
}

EngineCore::EngineCore(std::unique_ptr<Backend> backend, EngineOptions options, int num_blocks,
                       std::vector<std::unique_ptr<Proposer>> proposers)
    : backend_(std::move(backend)),
      options_(std::move(options)),
      blocks_(std::make_unique<BlockManager>(num_blocks, options_.block_size)),
      chain_(std::make_unique<PrefixChain>(*blocks_, options_.enable_prefix_caching)),
      scheduler_(std::make_unique<Scheduler>(
          SchedulerLimits{options_.max_num_batched_tokens, options_.max_num_seqs}, *chain_)),
      next_seed_(std::random_device{}()) {
  // A backend that cannot copy KV slots cannot compact a verified tree path:
  // tree drafts are cut to their first root path there.
  const bool tree_verify = backend_->CopyKvSlots({}).ok();
  drafts_ = std::make_unique<DraftPlanner>(options_, std::move(proposers), backend_->config().vocab_size,
                                           tree_verify);
  for (const auto& proposer : drafts_->proposers()) {
    SpeculationCounters c;
    c.proposer = std::string(proposer->name());
    c.accepted_per_position.assign(options_.num_speculative_tokens, 0);
    counters_.speculation.push_back(std::move(c));
  }
  const int model_len = backend_->config().max_position_embeddings;
  max_model_len_ = options_.max_model_len > 0 ? std::min(options_.max_model_len, model_len) : model_len;
  // A sequence must always fit in the cache by itself, or preemption could not make room.
  max_model_len_ = std::min(max_model_len_, num_blocks * options_.block_size);
}

EngineCore::~EngineCore() = default;

void EngineCore::Add(EngineRequest request) {
  if (request.prompt_logprobs >= 0 && backend_->SamplesOnDevice()) {
    RequestOutput rejected;
    rejected.finish_reason = FinishReason::kAbort;
    rejected.status = absl::FailedPreconditionError(
        "logprobs.prompt_top_n (prompt logprobs) is computed on the host; this worker samples on its device");
    if (request.sink) request.sink(rejected);
    return;
  }
  if (sequences_.contains(request.id)) {
    RequestOutput rejected;
    rejected.finish_reason = FinishReason::kAbort;
    rejected.status = absl::AlreadyExistsError(absl::StrCat("request_id \"", request.id, "\" is already running"));
    if (request.sink) request.sink(rejected);
    return;
  }
  auto seq = std::make_unique<Sequence>();
  seq->tokens = request.prompt;
  seq->prompt_len = static_cast<int32_t>(request.prompt.size());
  if (!request.seeded) {
    request.sampling.seed = next_seed_;
    next_seed_ = next_seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
  }
  if (!request.stop.ignore_eos) seq->banned = options_.eos_token_ids;
  seq->banned.insert(seq->banned.end(), request.stop.stop_token_ids.begin(),
                     request.stop.stop_token_ids.end());
  seq->arrival = request.arrival == Clock::time_point{} ? Clock::now() : request.arrival;
  if (request.grammar) seq->matcher = std::make_unique<grammar::GrammarMatcher>(request.grammar);
  seq->request = std::move(request);
  Sequence* raw = seq.get();
  sequences_[raw->request.id] = std::move(seq);
  scheduler_->Add(raw);
}

bool EngineCore::Abort(const std::string& id, FinishReason reason, absl::Status why) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  Sequence& seq = *it->second;
  RequestOutput output;
  output.status = std::move(why);
  Finish(seq, output, reason);
  return true;
}

void EngineCore::AbortAll(const absl::Status& why) {
  std::vector<std::string> ids;
  for (const auto& [id, seq] : sequences_) ids.push_back(id);
  for (const std::string& id : ids) Abort(id, FinishReason::kAbort, why);
}

EngineLoad EngineCore::Load() const {
  EngineLoad load;
  load.running = static_cast<int>(scheduler_->running().size());
  load.waiting = static_cast<int>(scheduler_->waiting().size());
  load.kv_usage = blocks_->Usage();
  load.block_size = options_.block_size;
  load.total_blocks = blocks_->num_blocks();
  load.preemptions = scheduler_->preemptions();
  return load;
}

void EngineCore::BuildBatch(const std::vector<Planned>& plan, std::vector<ForwardSequence>& batch) {
  batch.clear();
  batch.reserve(plan.size());
  for (const Planned& p : plan) {
    Sequence& seq = *p.seq;
    ForwardSequence f;
    f.start_pos = seq.num_computed;
    f.block_table = seq.block_table;
    if (!seq.draft.empty()) {
      seq.verify.assign(1, seq.tokens.back());
      seq.verify.insert(seq.verify.end(), seq.draft.begin(), seq.draft.end());
      seq.verify_parents.assign(1, -1);
      const bool tree = !seq.draft_parents.empty();  // a prefix of a tree is a tree
      for (size_t j = 0; j < seq.draft.size(); ++j)
        seq.verify_parents.push_back(tree ? seq.draft_parents[j] + 1 : static_cast<int32_t>(j));
      f.tokens = seq.verify;
      f.num_logits = static_cast<int32_t>(seq.verify.size());
      if (tree) f.parents = seq.verify_parents;
    } else {
      f.tokens = std::span<const int32_t>(seq.tokens).subspan(seq.num_computed, p.num_tokens);
      f.num_logits = seq.num_computed + p.num_tokens == seq.total_len() ? 1 : 0;
      seq.prompt_rows_step = seq.wants_prompt_logprobs() && seq.num_computed < seq.prompt_len;
      if (seq.prompt_rows_step) f.num_logits = p.num_tokens;
    }
    batch.push_back(f);
  }
}

absl::Status EngineCore::Step() {
  const Clock::time_point step_start = Clock::now();
  drafts_->Plan(scheduler_->running(), scheduler_->waiting(), max_model_len_);
  counters_.structured_output.draft_tokens_cut = drafts_->grammar_cut_tokens();
  const std::vector<Planned> plan = scheduler_->Schedule();
  counters_.preemptions = scheduler_->preemptions();
  if (plan.empty()) return absl::OkStatus();
  std::vector<ForwardSequence> batch;
  BuildBatch(plan, batch);
  int32_t logit_rows = 0;
  for (const ForwardSequence& f : batch) logit_rows += f.num_logits;
  const size_t vocab = static_cast<size_t>(backend_->config().vocab_size);
  if (logits_.size() < logit_rows * vocab) logits_.resize(logit_rows * vocab);
  const Clock::time_point forward_start = Clock::now();
  // A backend that samples on its device keeps the logits there: only the
  // drawn tokens, and the rows the host must sample, come back.
  const bool on_device = backend_->SamplesOnDevice();
  absl::Status status = backend_->Forward(batch, on_device ? nullptr : logits_.data());
  const Clock::time_point forward_end = Clock::now();  // sampling, on either device, is outside the forward
  if (status.ok() && on_device) status = SampleOnDevice(plan, batch);
  ++counters_.steps;
  if (!status.ok()) {
    for (const Planned& p : plan) Abort(p.seq->request.id, FinishReason::kAbort, status);
    return status;
  }
  const int32_t* drawn = on_device ? row_tokens_.data() : nullptr;
  // Hidden states for proposers that read them (a backend that exports none,
  // or not one per logits row, leaves last_hidden empty).
  const size_t hidden_size = static_cast<size_t>(backend_->config().hidden_size);
  std::span<const float> hidden = drafts_->wants_last_hidden() ? backend_->LastHiddenStates() : std::span<const float>();
  if (hidden.size() != logit_rows * hidden_size) hidden = {};
  int32_t row = 0;
  const ModelConfig& config = backend_->config();
  const bool swiftkv = config.dense_layers() < config.num_layers;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& seq = *plan[i].seq;
    if (seq.num_computed < seq.prompt_len) {
      counters_.prompt_tokens_computed += std::min(plan[i].num_tokens, seq.prompt_len - seq.num_computed);
    }
    if (swiftkv && batch[i].parents.empty()) {  // as LlamaForward narrows a step
      counters_.swiftkv_skipped_tokens += static_cast<int64_t>(batch[i].tokens.size()) - batch[i].num_logits;
    }
    const int32_t num_rows = batch[i].num_logits;
    float* seq_logits = logits_.data() + static_cast<size_t>(row) * vocab;
    const float* seq_hidden = hidden.empty() ? nullptr : hidden.data() + static_cast<size_t>(row) * hidden_size;
    const int32_t* seq_drawn = drawn ? drawn + row : nullptr;
    if (seq.prompt_rows_step) {
      // A prompt chunk with a row per token (prompt_logprobs); the last row
      // of the prompt's last chunk samples the first output token.
      RecordPromptLogprobs(seq, seq_logits, num_rows);
      seq.prompt_rows_step = false;
      const bool ends = seq.num_computed + plan[i].num_tokens == seq.total_len();
      seq.num_computed += plan[i].num_tokens;
      chain_->RegisterFullBlocks(seq);
      if (ends)
        SampleAndEmit(seq, seq_logits + static_cast<size_t>(num_rows - 1) * vocab,
                      seq_hidden ? seq_hidden + static_cast<size_t>(num_rows - 1) * hidden_size : nullptr, nullptr, 1);
    } else if (num_rows > 1) {
      // Verification: the KV of the accepted prefix is set by SampleAndEmit.
      SampleAndEmit(seq, seq_logits, seq_hidden, seq_drawn, num_rows);
    } else {
      seq.num_computed += plan[i].num_tokens;
      chain_->RegisterFullBlocks(seq);
      if (num_rows > 0) SampleAndEmit(seq, seq_logits, seq_hidden, seq_drawn, 1);
    }
    row += num_rows;
  }
  counters_.prefix_query_tokens = blocks_->prefix_queries_tokens();
  counters_.prefix_hit_tokens = blocks_->prefix_hit_tokens();
  // What the step spent outside the forward (drafting and its RPC, planning,
  // sampling, verification, streaming): the draft budget adds it to the
  // measured forward curve.
  drafts_->ObserveStep(std::chrono::duration<double, std::milli>(Clock::now() - step_start).count(),
                       std::chrono::duration<double, std::milli>(forward_end - forward_start).count());
  return absl::OkStatus();
}

absl::Status EngineCore::SampleOnDevice(const std::vector<Planned>& plan, std::span<const ForwardSequence> batch) {
  row_sampling_.clear();
  for (size_t i = 0; i < plan.size(); ++i) {
    const Sequence& seq = *plan[i].seq;
    const int32_t rows = batch[i].num_logits;
    // Row j is sampled (if the walk reaches it) at output position
    // output_len + its depth in the verified chain or tree.
    row_depth_.assign(std::max(rows, 1), 0);
    for (int32_t j = 1; j < rows; ++j) row_depth_[j] = row_depth_[seq.verify_parents[j]] + 1;
    const EngineRequest& request = seq.request;
    const SamplingOptions& s = request.sampling;
    for (int32_t j = 0; j < rows; ++j) {
      RowSampling r;
      r.position = seq.output_len() + row_depth_[j];
      const bool forced = static_cast<size_t>(r.position) < s.forced_tokens.size();
      const bool banned = r.position < request.stop.min_tokens && !seq.banned.empty();
      if (request.logprobs) {
        r.action = RowSampling::Action::kDownload;  // the raw logits are reported
      } else if (forced) {
        r.action = RowSampling::Action::kNone;
      } else if (banned || Sampler::UsesPenalties(s) || seq.matcher || !s.logit_bias.empty()) {
        // A grammar's mask and a logit bias are applied on the host for now
        // (stages in the device sampler are follow-up work): such rows come
        // back like rows with penalties.
        r.action = RowSampling::Action::kDownload;
      } else {
        r.temperature = s.temperature;
        r.top_k = s.top_k;
        r.top_p = s.top_p;
        r.min_p = s.min_p;
        r.seed = s.seed;
      }
      row_sampling_.push_back(r);
    }
  }
  row_tokens_.assign(row_sampling_.size(), -1);
  return backend_->SampleLogits(row_sampling_, row_tokens_.data(), logits_.data());
}

int32_t EngineCore::SampleOne(Sequence& seq, float* logits_row, int32_t drawn, RequestOutput& output) {
  const EngineRequest& request = seq.request;
  const size_t vocab = static_cast<size_t>(backend_->config().vocab_size);
  std::span<float> logits(logits_row, vocab);
  if (request.logprobs) raw_logits_.assign(logits.begin(), logits.end());

  int32_t token = drawn;
  if (token < 0) {
    SamplingContext context;
    context.prompt_tokens = std::span<const int32_t>(seq.tokens).first(seq.prompt_len);
    context.output_tokens = std::span<const int32_t>(seq.tokens).subspan(seq.prompt_len);
    context.output_position = seq.output_len();
    if (seq.output_len() < request.stop.min_tokens) context.banned_tokens = seq.banned;
    // The forced stage (benchmarks) overrides the mask: none is computed.
    const bool forced = static_cast<size_t>(seq.output_len()) < request.sampling.forced_tokens.size();
    if (seq.matcher && !forced) context.allowed_tokens = GrammarMask(seq);
    token = Sampler::Sample(request.sampling, context, logits);
    if (token == Sampler::kNoToken) {
      // Only EOS or a stop id could end the output here, and ignore_eos or
      // min_tokens forbids them: ending is the one honest answer.
      ++counters_.structured_output.dead_ends;
      LogEvent(LogLevel::kWarning, "engine", "structured_output_dead_end",
               {{"request_id", request.id},
                {"output_tokens", static_cast<int64_t>(seq.output_len())},
                {"why", std::string(seq.matcher->CanEnd()
                                        ? "the output is complete but ignore_eos or min_tokens forbids ending"
                                        : "the grammar allows no token")}});
      return token;
    }
  }

  output.new_tokens.push_back(token);
  if (request.logprobs) {
    TopLogprobs lp = Sampler::ComputeLogprobs(raw_logits_, token, request.top_logprobs);
    output.logprobs.push_back({lp.sampled_logprob, 0, std::move(lp.ids), std::move(lp.logprobs)});
  }
  seq.tokens.push_back(token);
  ++counters_.generated_tokens;
  if (seq.matcher) AcceptGrammarToken(seq, token);
  return token;
}

std::span<const uint32_t> EngineCore::GrammarMask(Sequence& seq) {
  grammar::GrammarMatcher& matcher = *seq.matcher;
  const grammar::TokenVocab& vocab = *matcher.grammar().vocab();
  const int32_t model_vocab = backend_->config().vocab_size;
  // Ids past the tokenizer's (a padded embedding) stay clear.
  const size_t words = std::max<size_t>((model_vocab + 31) / 32, vocab.mask_words());
  if (grammar_mask_.size() < words) grammar_mask_.resize(words);
  StructuredOutputCounters& c = counters_.structured_output;
  const bool timed = c.masks++ % StructuredOutputCounters::kMaskSampleEvery == 0;
  const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
  matcher.FillNextTokenMask(grammar_mask_.data());
  if (timed) {
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    const auto& bounds = StructuredOutputCounters::kMaskBuckets;
    ++c.mask_seconds_buckets[std::lower_bound(bounds.begin(), bounds.end(), s) - bounds.begin()];
    ++c.mask_seconds_count;
    c.mask_seconds_sum += s;
  }
  std::fill(grammar_mask_.begin() + vocab.mask_words(), grammar_mask_.begin() + words, 0);
  if (matcher.CanEnd()) {
    // EOS ends the output only without ignore_eos; a stop id the grammar
    // never allows (a special token) ends it like EOS. Stop ids that are
    // text are the grammar's to allow.
    const EngineRequest& request = seq.request;
    if (!request.stop.ignore_eos) {
      for (int32_t id : options_.eos_token_ids)
        if (id >= 0 && id < model_vocab) grammar::SetTokenBit(grammar_mask_.data(), id);
    }
    for (int32_t id : request.stop.stop_token_ids)
      if (id >= 0 && id < model_vocab && !vocab.allowed(id)) grammar::SetTokenBit(grammar_mask_.data(), id);
  }
  return std::span<const uint32_t>(grammar_mask_.data(), words);
}

void EngineCore::AcceptGrammarToken(Sequence& seq, int32_t token) {
  if (seq.matcher->AcceptToken(token)) return;
  // EOS or a special stop id where the output may end: the request stops
  // on it (StopReason) and the grammar has nothing left to follow.
  const grammar::TokenVocab& vocab = *seq.matcher->grammar().vocab();
  if (!vocab.allowed(token) && seq.matcher->CanEnd()) return;
  // A token the mask did not choose: benchmarks' forced_output_ids (or a
  // device draw). From here the output is no longer the grammar's; say so
  // and stop masking rather than mask against a state it left.
  LogEvent(LogLevel::kWarning, "engine", "structured_output_abandoned",
           {{"request_id", seq.request.id},
            {"token", static_cast<int64_t>(token)},
            {"output_tokens", static_cast<int64_t>(seq.output_len())}});
  seq.matcher.reset();
}

FinishReason EngineCore::StopReason(const Sequence& seq, int32_t token, RequestOutput& output) const {
  const EngineRequest& request = seq.request;
  const bool can_stop = seq.output_len() >= request.stop.min_tokens;
  const auto& stops = request.stop.stop_token_ids;
  const auto& eos = options_.eos_token_ids;
  if (can_stop && (std::find(stops.begin(), stops.end(), token) != stops.end() ||
                   (!request.stop.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()))) {
    output.stop_token = token;
    return FinishReason::kStop;
  }
  if (seq.output_len() >= request.stop.max_tokens) return FinishReason::kLength;
  if (seq.total_len() >= max_model_len_) return FinishReason::kContext;
  return FinishReason::kNone;
}

void EngineCore::SampleAndEmit(Sequence& seq, float* logits, const float* hidden, const int32_t* drawn,
                               int32_t num_rows) {
  const size_t vocab = static_cast<size_t>(backend_->config().vocab_size);
  RequestOutput output;
  FinishReason reason = FinishReason::kNone;
  const int32_t num_drafts = num_rows - 1;
  const int32_t start_pos = seq.num_computed;  // slot of verify[0]
  // Row j holds the target's distribution after the root path of verify[j]
  // (for a chain: [.., last token, d1..dj]). From the root, the target's
  // token at each node is sampled exactly as plain decoding would sample it
  // there; a child carrying that token is accepted and the walk descends.
  std::vector<int32_t>& path = accepted_path_;
  path.clear();
  int32_t node = 0;  // the row the newest token was sampled from
  for (;;) {
    const int32_t token = SampleOne(seq, logits + static_cast<size_t>(node) * vocab, drawn ? drawn[node] : -1, output);
    if (token == Sampler::kNoToken) {
      reason = FinishReason::kStop;
      break;
    }
    int32_t child = -1;
    for (int32_t c = node + 1; c < num_rows && child < 0; ++c) {
      if (seq.verify_parents[c] == node && seq.verify[c] == token) child = c;
    }
    if (child >= 0) path.push_back(child);
    reason = StopReason(seq, token, output);
    if (reason != FinishReason::kNone || child < 0) break;
    node = child;
  }
  if (hidden != nullptr) {
    const size_t h = static_cast<size_t>(backend_->config().hidden_size);
    seq.last_hidden.assign(hidden + node * h, hidden + (node + 1) * h);
  }
  const int32_t accepted = static_cast<int32_t>(path.size());
  if (num_drafts > 0) {
    // The proposer's tokens lead; tokens the grammar forced follow them
    // (grammar_drafts.h). Each side is credited with what it drafted.
    const int32_t proposed = seq.draft_source >= 0 ? std::min(seq.draft_proposed, num_drafts) : 0;
    const int32_t proposed_accepted = std::min(accepted, proposed);
    if (proposed > 0) {
      drafts_->RecordVerified(seq, proposed, proposed_accepted);
      SpeculationCounters& c = counters_.speculation[seq.draft_source];
      ++c.drafts;
      c.draft_tokens += proposed;
      c.accepted_tokens += proposed_accepted;
      for (int32_t j = 0; j < proposed_accepted && j < static_cast<int32_t>(c.accepted_per_position.size()); ++j)
        ++c.accepted_per_position[j];
    }
    counters_.structured_output.forced_draft_tokens += num_drafts - proposed;
    counters_.structured_output.forced_draft_accepted += accepted - proposed_accepted;
    seq.draft.clear();
    // KV is final for the last token and every accepted draft; the newest
    // emitted token is computed next step, rejected slots are overwritten.
    // An accepted tree path moves into its chain slots first (node path[d-1]
    // belongs at start_pos + d; path[d-1] >= d, so in order no copy
    // overwrites a later source).
    seq.num_computed = seq.total_len() - 1;
    if (reason == FinishReason::kNone) {
      kv_copies_.clear();
      const int32_t bs = options_.block_size;
      for (int32_t d = 1; d <= accepted; ++d) {
        const int32_t from = start_pos + path[d - 1], to = start_pos + d;
        if (from == to) continue;
        kv_copies_.push_back({seq.block_table[from / bs], from % bs, seq.block_table[to / bs], to % bs});
      }
      if (!kv_copies_.empty()) {
        output.status = backend_->CopyKvSlots(kv_copies_);
        if (!output.status.ok()) reason = FinishReason::kAbort;
      }
    }
    if (reason == FinishReason::kNone) {
      chain_->Trim(seq);
      chain_->RegisterFullBlocks(seq);
    }
  }
  // The request's timeline runs on this one clock: the first token's time
  // is the time of the output that carries it.
  output.time = Clock::now();
  if (!seq.has_first_token && !output.new_tokens.empty()) {
    seq.first_token = output.time;
    seq.has_first_token = true;
  }
  if (seq.wants_prompt_logprobs() && !output.new_tokens.empty()) {
    seq.prompt_logprobs.resize(std::max(0, seq.prompt_len - 1));
    output.prompt_logprobs = std::move(seq.prompt_logprobs);
    output.has_prompt_logprobs = true;
    seq.prompt_logprobs_sent = true;
  }
  if (reason != FinishReason::kNone) {
    Finish(seq, output, reason);
  } else {
    output.prompt_tokens = seq.prompt_len;
    output.completion_tokens = seq.output_len();
    output.cached_prompt_tokens = seq.cached_prompt_tokens;
    if (seq.request.sink) seq.request.sink(output);
  }
}

void EngineCore::RecordPromptLogprobs(Sequence& seq, const float* logits, int32_t num_rows) {
  const size_t vocab = static_cast<size_t>(backend_->config().vocab_size);
  seq.prompt_logprobs.resize(std::max(0, seq.prompt_len - 1));
  for (int32_t r = 0; r < num_rows; ++r) {
    const int32_t next = seq.num_computed + r + 1;  // row r's logits predict this position
    if (next >= seq.prompt_len) break;
    const std::span<const float> row(logits + static_cast<size_t>(r) * vocab, vocab);
    const int32_t token = seq.tokens[next];
    TopLogprobs lp = Sampler::ComputeLogprobs(row, token, seq.request.prompt_logprobs);
    int32_t rank = 1;
    for (float x : row) rank += x > row[token] ? 1 : 0;
    seq.prompt_logprobs[next - 1] = {lp.sampled_logprob, rank, std::move(lp.ids), std::move(lp.logprobs)};
  }
}

void EngineCore::Finish(Sequence& seq, RequestOutput& output, FinishReason reason) {
  output.finish_reason = reason;
  using Seconds = std::chrono::duration<double>;
  if (output.time == Clock::time_point{}) output.time = Clock::now();  // aborts
  const auto now = output.time;
  const auto scheduled = seq.scheduled_once ? seq.first_scheduled : now;
  const auto first_token = seq.has_first_token ? seq.first_token : now;
  output.arrival = seq.arrival;
  output.queue_time_s = Seconds(scheduled - seq.arrival).count();
  output.prefill_time_s = Seconds(first_token - scheduled).count();
  output.decode_time_s = Seconds(now - first_token).count();
  output.prompt_tokens = seq.prompt_len;
  output.completion_tokens = seq.output_len();
  output.cached_prompt_tokens = seq.cached_prompt_tokens;
  OutputSink sink = std::move(seq.request.sink);
  drafts_->Finish(seq);
  chain_->Release(seq);
  scheduler_->Remove(&seq);
  sequences_.erase(seq.request.id);  // seq is gone after this line
  if (sink) sink(output);
}

}  // namespace floe
