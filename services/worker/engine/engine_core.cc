#include "services/worker/engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "services/worker/sampling/sampler.h"

namespace floe {

using Clock = std::chrono::steady_clock;

struct EngineCore::Sequence {
  EngineRequest request;
  std::vector<int32_t> tokens;  // prompt followed by output
  int32_t prompt_len = 0;
  std::vector<int32_t> block_table;
  int32_t num_computed = 0;  // leading tokens whose KV is in the cache
  int32_t cached_prompt_tokens = 0;
  bool admitted_once = false;
  int32_t registered_blocks = 0;
  uint64_t last_block_hash = 0;
  int64_t admission = 0;  // admission order, for choosing whom to preempt
  std::vector<int32_t> banned;  // EOS + stop ids, banned before min_tokens
  // This step's draft (decode phase only) and the proposer it came from;
  // verify = [last token, draft...] is what the step runs. A tree draft has
  // draft_parents (index of each token's parent in draft, -1: the last
  // token); empty for a chain. verify_parents indexes verify (chain or tree).
  std::vector<int32_t> draft;
  std::vector<int32_t> draft_parents;
  int draft_source = -1;
  std::vector<int32_t> verify;
  std::vector<int32_t> verify_parents;
  // The backend's hidden state at the position that produced tokens.back(),
  // kept only when a proposer wants_last_hidden().
  std::vector<float> last_hidden;
  // Timeline for metrics (steady clock).
  Clock::time_point arrival, first_scheduled, first_token;
  bool scheduled_once = false, has_first_token = false;

  int32_t total_len() const { return static_cast<int32_t>(tokens.size()); }
  int32_t output_len() const { return total_len() - prompt_len; }
};

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
  return std::unique_ptr<EngineCore>(
      new EngineCore(std::move(backend), std::move(options), num_blocks, std::move(proposers)));
}

EngineCore::EngineCore(std::unique_ptr<Backend> backend, EngineOptions options, int num_blocks,
                       std::vector<std::unique_ptr<Proposer>> proposers)
    : backend_(std::move(backend)),
      options_(std::move(options)),
      blocks_(std::make_unique<BlockManager>(num_blocks, options_.block_size)),
      proposers_(std::move(proposers)),
      next_seed_(std::random_device{}()),
      draft_stats_(options_.num_speculative_tokens) {
  // A backend that cannot copy KV slots cannot compact a verified tree path:
  // tree drafts are cut to their first root path there.
  tree_verify_ = backend_->CopyKvSlots({}).ok();
  for (const auto& proposer : proposers_) {
    keep_hidden_ = keep_hidden_ || proposer->wants_last_hidden();
    SpeculationCounters c;
    c.proposer = std::string(proposer->name());
    c.accepted_per_position.assign(options_.num_speculative_tokens, 0);
    counters_.speculation.push_back(std::move(c));
  }
  proposals_.resize(proposers_.size());
  const int model_len = backend_->config().max_position_embeddings;
  max_model_len_ = options_.max_model_len > 0 ? std::min(options_.max_model_len, model_len) : model_len;
  // A sequence must always fit in the cache by itself, or preemption could not make room.
  max_model_len_ = std::min(max_model_len_, num_blocks * options_.block_size);
}

EngineCore::~EngineCore() = default;

void EngineCore::Add(EngineRequest request) {
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
  seq->request = std::move(request);
  Sequence* raw = seq.get();
  sequences_[raw->request.id] = std::move(seq);
  waiting_.push_back(raw);
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
  load.running = static_cast<int>(running_.size());
  load.waiting = static_cast<int>(waiting_.size());
  load.kv_usage = blocks_->Usage();
  load.block_size = options_.block_size;
  load.total_blocks = blocks_->num_blocks();
  load.preemptions = counters_.preemptions;
  return load;
}

bool EngineCore::EnsureBlocks(Sequence& seq, int32_t num_tokens) {
  const int32_t bs = options_.block_size;
  const int32_t needed = (seq.num_computed + num_tokens + bs - 1) / bs - static_cast<int32_t>(seq.block_table.size());
  if (needed <= 0) return true;
  auto fresh = blocks_->Allocate(needed);
  if (!fresh) return false;
  seq.block_table.insert(seq.block_table.end(), fresh->begin(), fresh->end());
  return true;
}

void EngineCore::Release(Sequence& seq) {
  blocks_->Release(seq.block_table);
  seq.block_table.clear();
  seq.draft.clear();
  seq.num_computed = 0;
  seq.registered_blocks = 0;
  seq.last_block_hash = 0;
}

void EngineCore::Preempt(Sequence& seq) {
  Release(seq);
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  waiting_.push_front(&seq);
  ++counters_.preemptions;
}

bool EngineCore::Admit(Sequence& seq, int32_t budget, std::vector<Planned>& plan) {
  if (options_.enable_prefix_caching) {
    // Leave at least the last token to compute: its logits start the output.
    std::span<const int32_t> lookup(seq.tokens.data(), seq.tokens.size() - 1);
    seq.block_table = blocks_->AcquireCachedPrefix(lookup);
    seq.num_computed = static_cast<int32_t>(seq.block_table.size()) * options_.block_size;
    seq.registered_blocks = static_cast<int32_t>(seq.block_table.size());
    seq.last_block_hash = 0;
    for (int32_t b = 0; b < seq.registered_blocks; ++b) {
      seq.last_block_hash = BlockManager::HashBlock(
          seq.last_block_hash,
          std::span<const int32_t>(seq.tokens).subspan(b * options_.block_size, options_.block_size));
    }
  }
  const int32_t n = std::min(seq.total_len() - seq.num_computed, budget);
  if (!EnsureBlocks(seq, n)) {
    Release(seq);
    return false;
  }
  if (!seq.admitted_once) {
    seq.cached_prompt_tokens = seq.num_computed;
    seq.admitted_once = true;
    seq.first_scheduled = Clock::now();
    seq.scheduled_once = true;
  }
  seq.admission = admission_counter_++;
  running_.push_back(&seq);
  plan.push_back({&seq, n});
  return true;
}

bool EngineCore::Schedule(std::vector<Planned>& plan) {
  int32_t budget = options_.max_num_batched_tokens;
  bool preempted = false;
  // Running sequences first, oldest admission first, so decodes never starve.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const int32_t pending = seq.total_len() - seq.num_computed;
    // Drafts only ride on a decode, and only as far as the budget goes.
    if (pending != 1) seq.draft.clear();
    if (static_cast<int32_t>(seq.draft.size()) > budget - 1) seq.draft.resize(std::max(0, budget - 1));
    int32_t n = std::min(pending + static_cast<int32_t>(seq.draft.size()), budget);
    bool placed = true;
    while (!EnsureBlocks(seq, n)) {
      if (!seq.draft.empty()) {  // drop the draft before evicting anyone
        seq.draft.clear();
        n = std::min(pending, budget);
        continue;
      }
      // Evict the most recently admitted other running sequence not yet planned.
      Sequence* victim = nullptr;
      for (Sequence* other : running_) {
        if (other == &seq) continue;
        bool planned = std::any_of(plan.begin(), plan.end(), [&](const Planned& p) { return p.seq == other; });
        if (planned) continue;
        if (!victim || other->admission > victim->admission) victim = other;
      }
      preempted = true;
      if (!victim) {
        Preempt(seq);
        placed = false;
        break;
      }
      Preempt(*victim);
    }
    if (!placed) continue;  // running_[i] now holds the next sequence
    plan.push_back({&seq, n});
    budget -= n;
    ++i;
  }
  // Then waiting sequences in FIFO order, unless this step had to preempt.
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    if (!Admit(seq, budget, plan)) break;
    waiting_.pop_front();
    budget -= plan.back().num_tokens;
  }
  return !plan.empty();
}

void EngineCore::ProposeDrafts() {
  if (proposers_.empty() || options_.num_speculative_tokens <= 0) return;
  for (Sequence* seq : running_) seq->draft.clear();  // a draft the budget left unplanned is stale now
  int64_t step_tokens = 0;
  for (const Sequence* seq : running_) step_tokens += seq->total_len() - seq->num_computed;
  for (const Sequence* seq : waiting_) step_tokens += seq->total_len() - seq->num_computed;
  step_tokens = std::min<int64_t>(step_tokens, options_.max_num_batched_tokens);
  spec_batch_.clear();
  spec_seqs_.clear();
  draft_candidates_.clear();
  draft_caps_.clear();
  int emitting = 0;
  for (Sequence* seq : running_) {
    if (seq->total_len() - seq->num_computed != 1) continue;
    ++emitting;
    if (seq->request.speculation.disable) continue;
    // Never draft past max_tokens (at most k+1 tokens come out of a step) or
    // past the context (the last draft's KV slot must be < max_model_len).
    int64_t max_draft = options_.num_speculative_tokens;
    max_draft = std::min<int64_t>(max_draft, seq->request.stop.max_tokens - seq->output_len() - 1);
    max_draft = std::min<int64_t>(max_draft, max_model_len_ - seq->total_len());
    if (max_draft <= 0) continue;
    draft_candidates_.push_back(seq);
    draft_caps_.push_back(static_cast<int>(max_draft));
  }
  draft_stats_.Age(emitting);
  const std::vector<int> lengths =
      PlanDraftLengths(step_tokens, emitting, draft_caps_, draft_stats_,
                       {options_.speculative_token_threshold, options_.speculative_step_overhead_tokens});
  for (size_t c = 0; c < draft_candidates_.size(); ++c) {
    Sequence* seq = draft_candidates_[c];
    const int64_t max_draft = lengths[c];
    if (max_draft <= 0) continue;
    SpecSequence s;
    s.request_id = seq->request.id;
    s.ns = seq->request.speculation.ns;
    s.tokens = seq->tokens;
    s.prompt_len = seq->prompt_len;
    s.max_draft = static_cast<int32_t>(max_draft);
    s.last_hidden = seq->last_hidden;
    spec_batch_.push_back(s);
    spec_seqs_.push_back(seq);
  }
  if (spec_batch_.empty()) return;
  for (size_t p = 0; p < proposers_.size(); ++p) {
    proposals_[p].assign(spec_batch_.size(), DraftProposal{});
    proposers_[p]->Propose(spec_batch_, proposals_[p]);
  }
  for (size_t i = 0; i < spec_seqs_.size(); ++i) {
    Sequence& seq = *spec_seqs_[i];
    const DraftProposal* best = nullptr;
    for (size_t p = 0; p < proposers_.size(); ++p) {
      const DraftProposal& d = proposals_[p][i];
      if (d.tokens.empty() || (best && d.score <= best->score)) continue;
      best = &d;
      seq.draft_source = static_cast<int>(p);
    }
    if (!best) continue;
    AssignDraft(seq, *best, spec_batch_[i].max_draft);
  }
}

void EngineCore::AssignDraft(Sequence& seq, const DraftProposal& proposal, int32_t max_draft) {
  // Drafts are the one input that changes per step and comes from outside
  // (a suffix cache may hold another model's ids): a draft with a token
  // outside the vocabulary is dropped, never run.
  const int32_t vocab = backend_->config().vocab_size;
  for (int32_t t : proposal.tokens) {
    if (t < 0 || t >= vocab) {
      seq.draft.clear();
      seq.draft_parents.clear();
      return;
    }
  }
  const size_t n = std::min<size_t>(proposal.tokens.size(), max_draft);
  seq.draft.assign(proposal.tokens.begin(), proposal.tokens.begin() + n);
  seq.draft_parents.clear();
  const std::vector<int32_t>& parents = proposal.parents;
  if (parents.empty()) return;
  bool chain = true;
  for (size_t i = 0; i < n; ++i) {
    // A malformed tree is a proposer bug: its draft is dropped, never run.
    if (parents.size() != proposal.tokens.size() || parents[i] < -1 || parents[i] >= static_cast<int32_t>(i)) {
      seq.draft.clear();
      return;
    }
    chain = chain && parents[i] == static_cast<int32_t>(i) - 1;
  }
  if (chain) return;  // verified as a causal chain, nothing to compact
  if (tree_verify_) {
    seq.draft_parents.assign(parents.begin(), parents.begin() + n);
    return;
  }
  // First root path: siblings come in the proposer's preference order.
  std::vector<int32_t> path;
  int32_t node = -1;
  for (size_t i = 0; i < n; ++i) {
    if (parents[i] != node) continue;
    path.push_back(seq.draft[i]);
    node = static_cast<int32_t>(i);
  }
  seq.draft = std::move(path);
}

void EngineCore::TrimBlocks(Sequence& seq) {
  const size_t keep = static_cast<size_t>((seq.num_computed + options_.block_size - 1) / options_.block_size);
  if (seq.block_table.size() <= keep) return;
  blocks_->Release(std::span<const int32_t>(seq.block_table).subspan(keep));
  seq.block_table.resize(keep);
}

void EngineCore::RegisterFullBlocks(Sequence& seq) {
  if (!options_.enable_prefix_caching) return;
  const int32_t bs = options_.block_size;
  while ((seq.registered_blocks + 1) * bs <= seq.num_computed) {
    const int32_t b = seq.registered_blocks;
    seq.last_block_hash =
        BlockManager::HashBlock(seq.last_block_hash, std::span<const int32_t>(seq.tokens).subspan(b * bs, bs));
    blocks_->RegisterFullBlock(seq.block_table[b], seq.last_block_hash);
    ++seq.registered_blocks;
  }
}

absl::Status EngineCore::Step() {
  std::vector<Planned> plan;
  ProposeDrafts();
  if (!Schedule(plan)) return absl::OkStatus();

  std::vector<ForwardSequence> batch;
  batch.reserve(plan.size());
  int32_t logit_rows = 0;
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
    }
    logit_rows += f.num_logits;
    batch.push_back(f);
  }
  const size_t vocab = static_cast<size_t>(backend_->config().vocab_size);
  if (logits_.size() < logit_rows * vocab) logits_.resize(logit_rows * vocab);
  absl::Status status = backend_->Forward(batch, logits_.data());
  ++counters_.steps;
  if (!status.ok()) {
    for (const Planned& p : plan) Abort(p.seq->request.id, FinishReason::kAbort, status);
    return status;
  }
  // Hidden states for proposers that read them (a backend that exports none,
  // or not one per logits row, leaves last_hidden empty).
  const size_t hidden_size = static_cast<size_t>(backend_->config().hidden_size);
  std::span<const float> hidden = keep_hidden_ ? backend_->LastHiddenStates() : std::span<const float>();
  if (hidden.size() != logit_rows * hidden_size) hidden = {};
  int32_t row = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& seq = *plan[i].seq;
    if (seq.num_computed < seq.prompt_len) {
      counters_.prompt_tokens_computed += std::min(plan[i].num_tokens, seq.prompt_len - seq.num_computed);
    }
    const int32_t num_rows = batch[i].num_logits;
    float* seq_logits = logits_.data() + static_cast<size_t>(row) * vocab;
    const float* seq_hidden = hidden.empty() ? nullptr : hidden.data() + static_cast<size_t>(row) * hidden_size;
    if (num_rows > 1) {
      // Verification: the KV of the accepted prefix is set by SampleAndEmit.
      SampleAndEmit(seq, seq_logits, seq_hidden, num_rows);
    } else {
      seq.num_computed += plan[i].num_tokens;
      RegisterFullBlocks(seq);
      if (num_rows > 0) SampleAndEmit(seq, seq_logits, seq_hidden, 1);
    }
    row += num_rows;
  }
  counters_.prefix_query_tokens = blocks_->prefix_queries_tokens();
  counters_.prefix_hit_tokens = blocks_->prefix_hit_tokens();
  return absl::OkStatus();
}

int32_t EngineCore::SampleOne(Sequence& seq, float* logits_row, RequestOutput& output) {
  const EngineRequest& request = seq.request;
  const size_t vocab = static_cast<size_t>(backend_->config().vocab_size);
  std::span<float> logits(logits_row, vocab);
  if (request.logprobs) raw_logits_.assign(logits.begin(), logits.end());

  SamplingContext context;
  context.prompt_tokens = std::span<const int32_t>(seq.tokens).first(seq.prompt_len);
  context.output_tokens = std::span<const int32_t>(seq.tokens).subspan(seq.prompt_len);
  context.output_position = seq.output_len();
  if (seq.output_len() < request.stop.min_tokens) context.banned_tokens = seq.banned;
  const int32_t token = Sampler::Sample(request.sampling, context, logits);

  output.new_tokens.push_back(token);
  if (request.logprobs) {
    TopLogprobs lp = Sampler::ComputeLogprobs(raw_logits_, token, request.top_logprobs);
    output.logprobs.push_back({lp.sampled_logprob, std::move(lp.ids), std::move(lp.logprobs)});
  }
  seq.tokens.push_back(token);
  ++counters_.generated_tokens;
  return token;
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

void EngineCore::SampleAndEmit(Sequence& seq, float* logits, const float* hidden, int32_t num_rows) {
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
    const int32_t token = SampleOne(seq, logits + static_cast<size_t>(node) * vocab, output);
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
    draft_stats_.Record(num_drafts, accepted);
    SpeculationCounters& c = counters_.speculation[seq.draft_source];
    ++c.drafts;
    c.draft_tokens += num_drafts;
    c.accepted_tokens += accepted;
    for (int32_t j = 0; j < accepted && j < static_cast<int32_t>(c.accepted_per_position.size()); ++j)
      ++c.accepted_per_position[j];
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
      TrimBlocks(seq);
      RegisterFullBlocks(seq);
    }
  }
  // The request's timeline runs on this one clock: the first token's time
  // is the time of the output that carries it.
  output.time = Clock::now();
  if (!seq.has_first_token && !output.new_tokens.empty()) {
    seq.first_token = output.time;
    seq.has_first_token = true;
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
  for (const auto& proposer : proposers_)
    proposer->Finish(seq.request.id, seq.request.speculation.ns, seq.tokens, seq.prompt_len);
  Release(seq);
  Remove(&seq);  // seq is gone after this line
  if (sink) sink(output);
}

void EngineCore::Remove(Sequence* seq) {
  auto r = std::find(running_.begin(), running_.end(), seq);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
  sequences_.erase(seq->request.id);
}

}  // namespace floe
