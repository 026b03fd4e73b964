// What speculative verification costs and what it buys, on the CPU backend.
//
// Part 1 (step cost): engine step time (median ms over decode steps) as a
// function of batch size (--batches, default 1,4,16) and draft tokens per
// request (--drafts, default 0,4,8,16,32),
// with a proposer that always drafts k tokens (a random model rejects them,
// so every step verifies k+1 positions and the shapes stay fixed). Dummy bf16
// weights in the shape of --model: "llama-3.2-1b", or "mid" (8 layers,
// hidden 1024, 16/4 heads, MLP 2816, vocab 32000: about 0.13B parameters)
// when the 1B shape is too slow for the machine.
// With --tree-branching B (>= 2) every draft length k > 0 is also run as a
// tree of k nodes (see BestFirstTree), and the time to copy a tree's deepest
// path into its chain slots (Backend::CopyKvSlots, what accepting it costs on
// top) is measured as well. --repeats N measures the whole grid N times,
// round by round, so that every cell samples the same machine conditions.
// Part 2 (benefit): the tiny random checkpoint (f32) on repetitive prompts,
// greedy, batch of 8 and alone: tokens per step and wall-clock speedup of the
// ngram and suffix proposers over plain decoding, plus a second suffix pass
// (same prompts, new ids) that drafts from the first pass's responses in the
// global tree. Output is checked to be identical to plain decoding.
// JSON on stdout; progress on stderr.
//
// Usage: bench_verify_cost --help.
// The grid can be split over several runs (one batch size each) on a busy
// machine; rows carry batch and draft length, so the JSON files concatenate.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "services/worker/engine/draft_budget.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/engine/dummy_model.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/engine/engine_core.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/suffix_proposer.h"

namespace floe {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Die(const absl::Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::exit(1);
}

// Lets several engines share one packed backend (one at a time).
class BorrowedBackend final : public Backend {
 public:
  explicit BorrowedBackend(Backend& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  size_t KvBytesPerBlock(int block_size) const override { return inner_.KvBytesPerBlock(block_size); }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override {
    return inner_.AllocateKvCache(num_blocks, block_size);
  }
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override {
    return inner_.Forward(batch, logits);
  }
  absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) override { return inner_.CopyKvSlots(copies); }

 private:
  Backend& inner_;
};

// The parents of a tree draft of k nodes shaped as the suffix tree's
// (SuffixTree::TreeDraft): the k nodes of highest path probability, best
// first, where every node has `branching` continuations taking 1/2, 1/4, ...
// of its probability (the last two the same), so one likely path and rarer
// alternatives at every node. No min_token_prob cut, so there are always k
// nodes (as many tokens as the chain it is compared with).
std::vector<int32_t> BestFirstTree(int k, int branching) {
  struct Item {
    double prob;
    int64_t order;  // ties: the earlier pushed (a parent before its children)
    int32_t parent;
    bool operator<(const Item& o) const { return prob != o.prob ? prob < o.prob : order > o.order; }
  };
  std::priority_queue<Item> heap;
  int64_t pushed = 0;
  auto push_children = [&](double prob, int32_t parent) {
    double share = 0.5;
    for (int c = 0; c < branching; ++c, share /= 2) {
      heap.push({prob * (c + 1 < branching ? share : 2 * share), pushed++, parent});
    }
  };
  std::vector<int32_t> parents;
  push_children(1.0, -1);
  while (static_cast<int>(parents.size()) < k) {
    const Item item = heap.top();
    heap.pop();
    parents.push_back(item.parent);
    push_children(item.prob, static_cast<int32_t>(parents.size()) - 1);
  }
  return parents;
}

int TreeDepth(const std::vector<int32_t>& parents) {
  std::vector<int> depth(parents.size());
  int deepest = 0;
  for (size_t i = 0; i < parents.size(); ++i) {
    depth[i] = parents[i] < 0 ? 1 : depth[parents[i]] + 1;
    deepest = std::max(deepest, depth[i]);
  }
  return deepest;
}

// Always drafts max_draft copies of one token: a chain, or a tree shaped by
// BestFirstTree (tree_branching >= 2).
class FixedDraftProposer final : public Proposer {
 public:
  explicit FixedDraftProposer(int tree_branching = 0) : tree_branching_(tree_branching) {}
  std::string_view name() const override { return "fixed"; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      out[i].tokens.assign(batch[i].max_draft, 13);
      if (tree_branching_ >= 2) out[i].parents = BestFirstTree(batch[i].max_draft, tree_branching_);
    }
  }

 private:
  int tree_branching_;
};

EngineRequest Request(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.seeded = true;
  return r;
}

struct Options {
  std::string model = "mid";
  int threads = 2;
  int steps = 6;
  int k = 8;
  std::string only;
  std::vector<int> batches = {1, 4, 16};
  std::vector<int> drafts = {0, 4, 8, 16, 32};
  int tree_branching = 0;  // >= 2: a tree of the same token count beside every chain
  int repeats = 1;         // rounds over the whole grid (samples per cell = steps x repeats)
  std::string write_curve;  // the worker's --speculative-cost-curve file, from the chain rows
};

// "1,4,16" -> {1, 4, 16}; empty when an item is not a number >= minimum.
std::vector<int> ParseList(const std::string& text, int minimum) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(item, &value) || value < minimum) return {};
    out.push_back(value);
  }
  return out;
}

ModelConfig MidConfig() {
  auto c = PresetConfig("llama-3.2-1b");
  if (!c.ok()) Die(c.status());
  c->num_layers = 8;
  c->hidden_size = 1024;
  c->num_heads = 16;
  c->num_kv_heads = 4;
  c->head_dim = 64;
  c->intermediate_size = 2816;
  c->vocab_size = 32000;
  c->tie_word_embeddings = true;
  return *c;
}

// What accepting a tree path costs beyond a chain: its rows copied into
// their chain slots, every layer (the deepest path of each draft length, each
// row moved; rows as JSON).
std::string KvCopyCost(Backend& backend, const Options& opt) {
  constexpr int kBlockSize = 16, kRepeats = 50;
  int longest = 1;
  for (int k : opt.drafts) longest = std::max(longest, k);
  if (auto s = backend.AllocateKvCache(2 * ((longest + kBlockSize) / kBlockSize + 1), kBlockSize); !s.ok()) Die(s);
  std::string rows;
  for (int k : opt.drafts) {
    if (k == 0) continue;
    const int depth = TreeDepth(BestFirstTree(k, opt.tree_branching));
    std::vector<KvSlotCopy> copies;
    for (int d = 0; d < depth; ++d) {
      const int from = 1 + k - depth + d, to = 1 + d;  // the worst case: every row moves
      copies.push_back({from / kBlockSize, from % kBlockSize, to / kBlockSize, to % kBlockSize});
    }
    std::vector<double> ms;
    for (int rep = 0; rep < kRepeats; ++rep) {
      const double t0 = Now();
      if (auto s = backend.CopyKvSlots(copies); !s.ok()) Die(s);
      ms.push_back((Now() - t0) * 1e3);
    }
    std::fprintf(stderr, "  kv copy of a %d-row path (k %d): median %.3f ms\n", depth, k, Median(ms));
    absl::StrAppend(&rows, rows.empty() ? "" : ",\n", "    {\"kv_copy_rows\": ", depth, ", \"draft_tokens\": ", k,
                    ", \"tree_branching\": ", opt.tree_branching, ", \"median_copy_ms\": ", Median(ms), "}");
  }
  return rows;
}

std::string StepCost(const Options& opt) {
  const double t0 = Now();
  auto model = opt.model == "mid" ? BuildModel(MidConfig()) : BuildModel(opt.model);
  if (!model) std::exit(1);
  auto backend = CpuBackend::Create(model->config, model->weights, {.num_threads = opt.threads});
  if (!backend.ok()) Die(backend.status());
  std::fprintf(stderr, "%s: built and packed in %.1f s\n", opt.model.c_str(), Now() - t0);
  const int vocab = model->config.vocab_size;
  // One engine with its requests prefilled and one decode step behind it;
  // then `steps` timed steps, appended to `ms`.
  struct Shape {
    const char* name;
    int tree_branching;
    std::vector<double> ms;
  };
  auto measure = [&](int batch, int k, Shape& shape) {
    EngineOptions eo;
    eo.block_size = 16;
    eo.num_blocks = batch * ((64 + (opt.steps + 2) * (k + 1) + 16) / 16 + 2);
    eo.max_num_batched_tokens = 8192;
    eo.num_speculative_tokens = k;
    eo.speculative_token_threshold = 1 << 20;
    eo.speculative_step_overhead_tokens = -1;  // always verify k (a random model rejects them all)
    std::vector<std::unique_ptr<Proposer>> proposers;
    proposers.push_back(std::make_unique<FixedDraftProposer>(shape.tree_branching));
    auto core = EngineCore::Create(std::make_unique<BorrowedBackend>(**backend), eo, std::move(proposers));
    if (!core.ok()) Die(core.status());
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 64; ++i) prompt.push_back((s * 7919 + i * 131) % vocab);
      EngineRequest r = Request(absl::StrCat("b", s), prompt, opt.steps + 64);  // drafts never capped by max_tokens
      (*core)->Add(std::move(r));
    }
    if (auto s = (*core)->Step(); !s.ok()) Die(s);  // prefill
    if (auto s = (*core)->Step(); !s.ok()) Die(s);  // warm-up decode
    for (int step = 0; step < opt.steps; ++step) {
      const double ts = Now();
      if (auto s = (*core)->Step(); !s.ok()) Die(s);
      shape.ms.push_back((Now() - ts) * 1e3);
    }
  };
  // Cells (batch, draft length, chain or tree) in output order. Every cell is
  // measured once per round, --repeats rounds: the host's slow phases (its
  // memory bandwidth moves between samples) then spread over all cells
  // instead of biasing the ratios between them.
  struct Cell {
    int batch, k;
    Shape shape;
  };
  std::vector<Cell> cells;
  for (int batch : opt.batches) {
    for (int k : opt.drafts) {
      cells.push_back({batch, k, {"chain", 0, {}}});
      if (opt.tree_branching >= 2 && k > 0) cells.push_back({batch, k, {"tree", opt.tree_branching, {}}});
    }
  }
  for (int rep = 0; rep < opt.repeats; ++rep) {
    if (opt.repeats > 1) std::fprintf(stderr, "  round %d of %d\n", rep + 1, opt.repeats);
    for (Cell& cell : cells) measure(cell.batch, cell.k, cell.shape);
  }
  std::string rows;
  double chain_median = 0;
  for (const Cell& cell : cells) {
    const Shape& shape = cell.shape;
    // The machine is shared: the minimum is the least disturbed estimate.
    const double med = Median(shape.ms), best = *std::min_element(shape.ms.begin(), shape.ms.end());
    std::fprintf(stderr, "  batch %2d k %2d %-5s: median %.1f min %.1f ms/step\n", cell.batch, cell.k, shape.name,
                 med, best);
    std::string tree_fields;
    if (shape.tree_branching > 0) {
      const std::vector<int32_t> parents = BestFirstTree(cell.k, shape.tree_branching);
      absl::StrAppend(&tree_fields, ", \"tree_branching\": ", shape.tree_branching, ", \"tree_depth\": ",
                      TreeDepth(parents), ", \"tree_over_chain\": ", med / chain_median);
    } else {
      chain_median = med;
    }
    absl::StrAppend(&rows, rows.empty() ? "" : ",\n", "    {\"batch\": ", cell.batch, ", \"draft_tokens\": ", cell.k,
                    ", \"shape\": \"", shape.name, "\", \"tokens_per_step\": ", cell.batch * (cell.k + 1),
                    ", \"median_step_ms\": ", med, ", \"min_step_ms\": ", best, ", \"samples\": ",
                    shape.ms.size(), tree_fields, "}");
  }
  if (opt.tree_branching >= 2) absl::StrAppend(&rows, ",\n", KvCopyCost(**backend, opt));
  return absl::StrCat("  \"step_cost\": {\"model\": \"", opt.model, "\", \"threads\": ", opt.threads,
                      ", \"prompt_tokens\": 64, \"steps\": ", opt.steps, ", \"repeats\": ", opt.repeats,
                      ", \"rows\": [\n", rows, "\n  ]}");
}

struct RunStats {
  std::map<std::string, std::vector<int32_t>> outputs;
  int64_t steps = 0, tokens = 0, draft_tokens = 0, accepted = 0;
  double seconds = 0;
};

RunStats RunAll(EngineCore& core, const std::vector<EngineRequest>& requests, bool together) {
  RunStats st;
  const int64_t steps0 = core.counters().steps, tokens0 = core.counters().generated_tokens;
  const double t0 = Now();
  auto submit = [&](const EngineRequest& proto) {
    EngineRequest r = proto;
    std::vector<int32_t>* out = &st.outputs[r.id];
    r.sink = [out](const RequestOutput& o) { out->insert(out->end(), o.new_tokens.begin(), o.new_tokens.end()); };
    core.Add(std::move(r));
  };
  auto drain = [&] {
    while (core.HasWork())
      if (auto s = core.Step(); !s.ok()) Die(s);
  };
  for (const EngineRequest& r : requests) {
    submit(r);
    if (!together) drain();
  }
  drain();
  st.seconds = Now() - t0;
  st.steps = core.counters().steps - steps0;
  st.tokens = core.counters().generated_tokens - tokens0;
  for (const SpeculationCounters& c : core.counters().speculation) {
    st.draft_tokens += c.draft_tokens;
    st.accepted += c.accepted_tokens;
  }
  return st;
}

std::string Benefit(const Options& opt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("floe_bench_verify_" + std::to_string(getpid()));
  CheckpointSpec spec;
  spec.preset = "tiny";
  spec.dtype = DType::kF32;
  spec.seed = 3;
  if (auto s = WriteRandomCheckpoint(spec, dir.string()); !s.ok()) Die(s);
  auto checkpoint = Checkpoint::Load(dir.string(), {});
  if (!checkpoint.ok()) Die(checkpoint.status());
  auto backend = CpuBackend::Create((*checkpoint)->config(), (*checkpoint)->weights(), {.num_threads = opt.threads});
  if (!backend.ok()) Die(backend.status());

  std::mt19937 rng(7);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> motif(4 + i % 5), prompt;
    for (int32_t& t : motif) t = static_cast<int32_t>(rng() % 128000);
    for (int rep = 0; rep < 6; ++rep) prompt.insert(prompt.end(), motif.begin(), motif.end());
    requests.push_back(Request(absl::StrCat("p", i), prompt, 64));
  }
  std::string rows;
  for (bool together : {true, false}) {
    std::map<std::string, std::vector<int32_t>> reference;
    double base_seconds = 0, base_steps = 0;
    for (const std::string mode : {"off", "ngram", "suffix", "suffix-second-pass"}) {
      EngineOptions eo;
      eo.block_size = 16;
      eo.num_blocks = 512;
      eo.max_model_len = 2048;
      eo.num_speculative_tokens = mode == "off" ? 0 : opt.k;
      std::vector<std::unique_ptr<Proposer>> proposers;
      if (mode == "ngram") proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{1, 4, opt.k}));
      if (mode.starts_with("suffix")) proposers.push_back(std::make_unique<SuffixProposer>(SuffixProposerOptions{}));
      auto core = EngineCore::Create(std::make_unique<BorrowedBackend>(**backend), eo, std::move(proposers));
      if (!core.ok()) Die(core.status());
      RunStats st;
      if (mode == "suffix-second-pass") {
        RunAll(**core, requests, together);  // fills the global tree
        std::vector<EngineRequest> again = requests;
        for (EngineRequest& r : again) r.id += "-again";
        st = RunAll(**core, again, together);
        std::map<std::string, std::vector<int32_t>> renamed;
        for (auto& [id, out] : st.outputs) renamed[id.substr(0, id.size() - 6)] = std::move(out);
        st.outputs = std::move(renamed);
      } else {
        st = RunAll(**core, requests, together);
      }
      if (mode == "off") {
        reference = st.outputs;
        base_seconds = st.seconds;
        base_steps = static_cast<double>(st.steps);
      }
      const bool same = st.outputs == reference;
      std::fprintf(stderr, "  %s %s: %lld steps, %lld tokens, %.2f s%s\n", together ? "batch 8" : "alone",
                   mode.c_str(), static_cast<long long>(st.steps), static_cast<long long>(st.tokens), st.seconds,
                   same ? "" : " OUTPUT DIFFERS");
      absl::StrAppend(&rows, rows.empty() ? "" : ",\n", "    {\"batch\": \"", together ? "8 together" : "1 at a time",
                      "\", \"mode\": \"", mode, "\", \"steps\": ", st.steps, ", \"tokens\": ", st.tokens,
                      ", \"tokens_per_step\": ", static_cast<double>(st.tokens) / st.steps,
                      ", \"accepted_of_drafted\": ", st.draft_tokens ? 1.0 * st.accepted / st.draft_tokens : 0,
                      ", \"seconds\": ", st.seconds, ", \"speedup\": ", base_seconds / st.seconds,
                      ", \"step_reduction\": ", base_steps / st.steps, ", \"identical_to_off\": ",
                      same ? "true" : "false", "}");
    }
  }
  fs::remove_all(dir);
  return absl::StrCat("  \"benefit\": {\"model\": \"tiny (random, f32)\", \"k\": ", opt.k,
                      ", \"prompts\": \"8 motifs of 4-8 tokens repeated 6x\", \"max_tokens\": 64, \"rows\": [\n",
                      rows, "\n  ]}");
}

constexpr char kUsage[] =
    "Usage: bench_verify_cost [--model mid|llama-3.2-1b] [--threads N] [--steps N] [--k N]\n"
    "                         [--only cost|benefit] [--batches 1,4,16] [--drafts 0,4,8,16,32]\n"
    "                         [--tree-branching B] [--repeats N] [--write-curve FILE]\n"
    "Step cost of verifying draft tokens (per batch size and draft length; with --tree-branching also as\n"
    "trees of the same token count) and the benefit of the proposers on the tiny model. JSON on stdout.\n"
    "--write-curve FILE: also writes the step cost curve (tokens run -> median ms, chain rows; the\n"
    "lowest time per token count, made non-decreasing) for floe-worker --speculative-cost-curve FILE.\n";

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "every flag takes a value\n%s", kUsage);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model") opt.model = argv[i + 1];
    else if (flag == "--threads") opt.threads = std::atoi(argv[i + 1]);
    else if (flag == "--steps") opt.steps = std::atoi(argv[i + 1]);
    else if (flag == "--k") opt.k = std::atoi(argv[i + 1]);
    else if (flag == "--only") opt.only = argv[i + 1];
    else if (flag == "--write-curve") opt.write_curve = argv[i + 1];
    else if (flag == "--batches") opt.batches = ParseList(argv[i + 1], 1);
    else if (flag == "--drafts") opt.drafts = ParseList(argv[i + 1], 0);
    else if (flag == "--tree-branching" || flag == "--repeats") {
      const std::vector<int> value = ParseList(argv[i + 1], flag == "--repeats" ? 1 : 2);
      if (value.size() != 1) {
        std::fprintf(stderr, "%s takes one number >= %d\n", flag.c_str(), flag == "--repeats" ? 1 : 2);
        return 2;
      }
      (flag == "--repeats" ? opt.repeats : opt.tree_branching) = value[0];
    }
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (opt.batches.empty() || opt.drafts.empty()) {
    std::fprintf(stderr, "--batches takes numbers >= 1 and --drafts numbers >= 0, comma-separated\n");
    return 2;
  }
  std::vector<std::string> parts;
  if (opt.only.empty() || opt.only == "benefit") parts.push_back(Benefit(opt));
  if (opt.only.empty() || opt.only == "cost") parts.push_back(StepCost(opt));
  std::string out = "{\n";
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&out, parts[i], i + 1 < parts.size() ? ",\n" : "\n");
  out += "}\n";
  std::fputs(out.c_str(), stdout);
  if (!opt.write_curve.empty()) {
    const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("step_cost")) {
      std::fprintf(stderr, "--write-curve needs the cost part (not --only benefit)\n");
      return 2;
    }
    // Several (batch, draft) cells may run the same token count: the step
    // runs them at the lower time (the curve is what a step of N tokens costs
    // at best; its shape, not its batch, is what the planner compares).
    std::map<int, double> by_tokens;
    for (const nlohmann::json& row : j["step_cost"]["rows"]) {
      if (!row.contains("shape") || row["shape"] != "chain") continue;
      const int tokens = row["tokens_per_step"].get<int>();
      const double ms = row["median_step_ms"].get<double>();
      auto [it, fresh] = by_tokens.emplace(tokens, ms);
      if (!fresh) it->second = std::min(it->second, ms);
    }
    std::vector<std::pair<int, double>> points;
    for (const auto& [tokens, ms] : by_tokens)
      points.emplace_back(tokens, std::max(ms, points.empty() ? 0.0 : points.back().second));
    auto curve = StepCostCurve::FromPoints(std::move(points));
    if (!curve.ok()) Die(curve.status());
    std::ofstream(opt.write_curve) << curve->ToJson() << "\n";
    std::fprintf(stderr, "step cost curve written to %s\n", opt.write_curve.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
