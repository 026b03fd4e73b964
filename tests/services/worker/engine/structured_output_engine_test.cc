// Structured outputs through the engine on the tiny random-weight model,
// which writes garbage unless the mask holds: for every kind of constraint
// and several seeds at temperature 1 (with and without truncation), an
// output that ends with stop is, byte for byte, a sentence of the grammar,
// and one cut by max_tokens is a prefix of one. The judge is an Earley
// recognizer over the grammar IR (tests/common/grammar/grammar_oracle.h),
// sharing no code with the matcher. Where the mask leaves nothing (ignore_eos
// or min_tokens against a complete output) the request ends with stop.
#include "common/grammar/matcher.h"
#include "services/worker/structured/structured_output_compiler.h"
#include "tests/common/grammar/grammar_oracle.h"
#include "tests/services/worker/engine/engine_test_harness.h"
#include "tests/services/worker/structured/structured_test_util.h"

namespace floe {
namespace {

using structured_testing::Constraints;
using structured_testing::NamedConstraint;
using structured_testing::Spelled;

bool IsEos(int32_t t) { return t == 128001 || t == 128009; }

class StructuredOutputEngineTest : public EngineHarness {
 protected:
  // Without the vocabulary (its reference files missing) nothing compiles.
  void SetUp() override { ASSERT_NE(structured_testing::Llama3Vocab(), nullptr); }
  struct Constrained {
    std::string name;
    grammar::Grammar ir;  // what the oracle judges by
    std::shared_ptr<const grammar::CompiledGrammar> compiled;
  };
  static std::vector<Constrained> CompileAll(std::vector<NamedConstraint> constraints) {
    StructuredOutputCompiler compiler(structured_testing::Llama3Vocab(), {});
    std::vector<Constrained> out;
    for (const NamedConstraint& c : constraints) {
      auto ir = GrammarOf(GrammarKeyOf(c.output));
      EXPECT_TRUE(ir.ok()) << c.name << ": " << ir.status();
      auto compiled = compiler.Compile(c.output);
      EXPECT_TRUE(compiled.ok()) << c.name << ": " << compiled.status();
      if (ir.ok() && compiled.ok()) out.push_back({c.name, *std::move(ir), compiled->grammar});
    }
    return out;
  }

  // Sampling at temperature 1 over the whole vocabulary, or through the
  // truncating stages.
  static EngineRequest ConstrainedRequest(const std::string& id, const Constrained& c, uint64_t seed, bool truncate,
                                          int max_tokens) {
    std::mt19937 rng(seed);
    EngineRequest r = MakeRequest(id, RandomPrompt(rng, 5 + static_cast<int>(seed % 7)), max_tokens);
    r.stop.ignore_eos = false;
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = truncate ? 0.97f : 1.0f;
    r.sampling.top_k = truncate ? 200 : 0;
    r.sampling.seed = seed;
    r.seeded = true;
    r.grammar = c.compiled;
    return r;
  }

  // The judgement on one output: a sentence when it stopped (EOS last), a
  // prefix of one otherwise. Returns whether it stopped.
  static bool ExpectWithinGrammar(const Constrained& c, const Result& result, const std::string& id) {
    const auto vocab = structured_testing::Llama3Vocab();
    const std::string bytes = Spelled(*vocab, result.tokens);
    EXPECT_TRUE(result.status.ok()) << id << ": " << result.status;
    if (result.reason == FinishReason::kStop) {
      EXPECT_FALSE(result.tokens.empty()) << id;
      if (!result.tokens.empty()) EXPECT_TRUE(IsEos(result.tokens.back())) << id;
      EXPECT_TRUE(grammar::testing::OracleAccepts(c.ir, bytes)) << id << " wrote \"" << bytes << "\"";
      return true;
    }
    EXPECT_EQ(result.reason, FinishReason::kLength) << id;
    EXPECT_TRUE(grammar::testing::OracleIsPrefix(c.ir, bytes)) << id << " wrote \"" << bytes << "\"";
    return false;
  }
};

TEST_F(StructuredOutputEngineTest, SampledOutputsAreSentencesOfTheGrammarOrPrefixesWhenCut) {
  auto constraints = Constraints();
  constraints.push_back({"json_object", structured_testing::JsonObject()});
  const std::vector<Constrained> compiled = CompileAll(constraints);
  ASSERT_EQ(compiled.size(), constraints.size());
  std::vector<EngineRequest> requests;
  std::map<std::string, const Constrained*> of;
  for (const Constrained& c : compiled) {
    for (uint64_t seed : {1, 2, 3, 4}) {
      const std::string id = c.name + "/" + std::to_string(seed);
      requests.push_back(ConstrainedRequest(id, c, seed, /*truncate=*/seed == 4, 64));
      of[id] = &c;
    }
  }
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 2048;
  auto core = MakeEngine(options);
  const auto results = Run(*core, requests);
  std::map<std::string, int> stopped;
  for (const auto& [id, result] : results) {
    if (ExpectWithinGrammar(*of.at(id), result, id)) ++stopped[of.at(id)->name];
  }
  // Finite languages of at most 20 bytes end inside 64 tokens, whatever
  // the model picks; the others end when it happens to pick the end.
  for (const char* name : {"regex", "choice", "gbnf"}) EXPECT_EQ(stopped[name], 4) << name;
  for (const auto& [name, n] : stopped) RecordProperty("stopped_" + name, n);
  const StructuredOutputCounters& c = core->counters().structured_output;
  EXPECT_GT(c.masks, 0);
  EXPECT_GT(c.mask_seconds_count, 0);
  EXPECT_EQ(c.dead_ends, 0);
}

TEST_F(StructuredOutputEngineTest, BatchedOutputsEqualEachRequestAloneAndUnconstrainedOnesAreUntouched) {
  const std::vector<Constrained> compiled = CompileAll(Constraints());
  std::vector<EngineRequest> requests;
  for (const Constrained& c : compiled) requests.push_back(ConstrainedRequest(c.name, c, 9, false, 40));
  // Unconstrained requests beside them sample exactly as without them.
  std::mt19937 rng(5);
  std::vector<EngineRequest> plain;
  for (int i = 0; i < 3; ++i) {
    EngineRequest r = MakeRequest("plain" + std::to_string(i), RandomPrompt(rng, 9), 20);
    MakeSeeded(r, 40 + i);
    plain.push_back(r);
    requests.push_back(r);
  }
  auto core = MakeEngine(SpeculationOptions(0));
  const auto batched = Run(*core, requests);
  ExpectSameTokens(batched, RunAlone(requests));
  auto plain_core = MakeEngine(SpeculationOptions(0));
  const auto without = Run(*plain_core, plain);
  for (const auto& [id, result] : without) EXPECT_EQ(batched.at(id).tokens, result.tokens) << id;
  EXPECT_EQ(plain_core->counters().structured_output.masks, 0);
}

TEST_F(StructuredOutputEngineTest, WhereTheMaskLeavesNothingTheRequestStops) {
  const std::vector<Constrained> compiled = CompileAll({{"choice", structured_testing::Choice({"yes", "no"})}});
  ASSERT_EQ(compiled.size(), 1u);
  // Complete after one token, but EOS may not end it: ignore_eos, or
  // min_tokens still ahead.
  EngineRequest ignoring = ConstrainedRequest("ignore_eos", compiled[0], 1, false, 30);
  ignoring.stop.ignore_eos = true;
  EngineRequest early = ConstrainedRequest("min_tokens", compiled[0], 2, false, 30);
  early.stop.min_tokens = 10;
  auto core = MakeEngine(SpeculationOptions(0));
  const auto results = Run(*core, {ignoring, early});
  const auto vocab = structured_testing::Llama3Vocab();
  for (const auto& [id, result] : results) {
    EXPECT_EQ(result.reason, FinishReason::kStop) << id;
    EXPECT_TRUE(result.status.ok()) << id;
    const std::string text = Spelled(*vocab, result.tokens);
    EXPECT_TRUE(text == "yes" || text == "no") << id << ": " << text;
    for (int32_t t : result.tokens) EXPECT_FALSE(IsEos(t)) << id;
  }
  EXPECT_EQ(core->counters().structured_output.dead_ends, 2);
}

TEST_F(StructuredOutputEngineTest, ForcedTokensThatLeaveTheGrammarEndTheConstraintNotTheRequest) {
  const std::vector<Constrained> compiled = CompileAll({{"choice", structured_testing::Choice({"yes", "no"})}});
  ASSERT_EQ(compiled.size(), 1u);
  EngineRequest r = ConstrainedRequest("forced", compiled[0], 3, false, 6);
  r.stop.ignore_eos = true;
  r.sampling.forced_tokens = {9906, 11};  // "Hello", ",": not a choice
  auto core = MakeEngine(SpeculationOptions(0));
  const auto results = Run(*core, {r});
  const Result& result = results.at("forced");
  EXPECT_EQ(result.reason, FinishReason::kLength);
  ASSERT_EQ(result.tokens.size(), 6u);
  EXPECT_EQ(result.tokens[0], 9906);
  EXPECT_EQ(result.tokens[1], 11);
}

}  // namespace
}  // namespace floe
