// ResolveRequest, table-driven: each bad field is answered with its status,
// its name and its limit; defaults are filled; the context rule is one rule.
#include "services/request/resolve_request.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace floe {
namespace {

using floe::v1::GenerateRequest;

constexpr RequestLimits kLimits{.vocab_size = 1000, .max_context = 64, .max_tokens_limit = 40};

GenerateRequest Prompt(int n) {
  GenerateRequest r;
  for (int i = 0; i < n; ++i) r.mutable_token_ids()->add_ids(1 + i);
  return r;
}

struct Case {
  const char* name;
  std::function<void(GenerateRequest&)> mutate;
  absl::StatusCode code;
  const char* needle;  // the field, then the limit, in the message
  const char* limit;
};

TEST(ResolveRequestTest, EachBadFieldIsNamedWithItsLimit) {
  using C = absl::StatusCode;
  const Case cases[] = {
      {"no prompt", [](GenerateRequest& r) { r.clear_prompt(); }, C::kInvalidArgument, "prompt is empty", ""},
      {"text prompt", [](GenerateRequest& r) { r.set_text("hi"); }, C::kInvalidArgument, "token_ids", ""},
      {"prompt fills the context", [](GenerateRequest& r) { r = Prompt(64); }, C::kInvalidArgument, "context", "63"},
      {"id past the vocabulary", [](GenerateRequest& r) { r.mutable_token_ids()->set_ids(2, 1000); },
       C::kInvalidArgument, "token_ids[2] = 1000", "[0, 1000)"},
      {"negative id", [](GenerateRequest& r) { r.mutable_token_ids()->set_ids(0, -1); }, C::kInvalidArgument,
       "token_ids[0]", "[0, 1000)"},
      {"forced id past the vocabulary", [](GenerateRequest& r) { r.add_forced_output_ids(5000); },
       C::kInvalidArgument, "forced_output_ids[0]", "1000"},
      {"max_tokens zero", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(0); }, C::kInvalidArgument,
       "stopping.max_tokens", "> 0"},
      {"max_tokens past the context", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(60); },
       C::kOutOfRange, "stopping.max_tokens = 60", "context of 64"},
      {"max_tokens past the server limit",
       [](GenerateRequest& r) {
         r = Prompt(2);
         r.mutable_stopping()->set_max_tokens(41);
       },
       C::kOutOfRange, "stopping.max_tokens = 41", "limit of 40"},
      {"min_tokens past max_tokens",
       [](GenerateRequest& r) {
         r.mutable_stopping()->set_max_tokens(5);
         r.mutable_stopping()->set_min_tokens(6);
       },
       C::kInvalidArgument, "stopping.min_tokens", "max_tokens = 5"},
      {"request_id past its limit", [](GenerateRequest& r) { r.set_request_id(std::string(129, 'r')); },
       C::kInvalidArgument, "request_id has 129 bytes", "limit is 128"},
      {"model past its limit", [](GenerateRequest& r) { r.set_model(std::string(257, 'm')); }, C::kInvalidArgument,
       "model has 257 bytes", "limit is 256"},
      {"session_id past its limit", [](GenerateRequest& r) { r.set_session_id(std::string(257, 's')); },
       C::kInvalidArgument, "session_id has 257 bytes", "limit is 256"},
      {"namespace past its limit",
       [](GenerateRequest& r) { r.mutable_speculation()->set_namespace_(std::string(257, 'n')); },
       C::kInvalidArgument, "speculation.namespace has 257 bytes", "limit is 256"},
      {"stop id past the vocabulary", [](GenerateRequest& r) { r.mutable_stopping()->add_stop_token_ids(1000); },
       C::kInvalidArgument, "stopping.stop_token_ids[0]", "1000"},
      {"too many stop ids",
       [](GenerateRequest& r) {
         for (int i = 0; i < 65; ++i) r.mutable_stopping()->add_stop_token_ids(1);
       },
       C::kInvalidArgument, "stopping.stop_token_ids has 65", "limit is 64"},
      {"top_n too large", [](GenerateRequest& r) { r.mutable_logprobs()->set_top_n(21); }, C::kInvalidArgument,
       "logprobs.top_n", "[0, 20]"},
      {"temperature negative", [](GenerateRequest& r) { r.mutable_sampling()->set_temperature(-1); },
       C::kInvalidArgument, "sampling.temperature", ">= 0"},
      {"top_p zero", [](GenerateRequest& r) { r.mutable_sampling()->set_top_p(0); }, C::kInvalidArgument,
       "sampling.top_p", "(0, 1]"},
      {"min_p one", [](GenerateRequest& r) { r.mutable_sampling()->set_min_p(1); }, C::kInvalidArgument,
       "sampling.min_p", "[0, 1)"},
      {"top_k negative", [](GenerateRequest& r) { r.mutable_sampling()->set_top_k(-2); }, C::kInvalidArgument,
       "sampling.top_k", ">= 0"},
      {"repetition penalty negative", [](GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(-1); },
       C::kInvalidArgument, "sampling.repetition_penalty", "[0.01, 100]"},
      {"repetition penalty denormal", [](GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(1e-45f); },
       C::kInvalidArgument, "sampling.repetition_penalty", "[0.01, 100]"},
      {"repetition penalty huge", [](GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(1e6f); },
       C::kInvalidArgument, "sampling.repetition_penalty", "[0.01, 100]"},
      {"presence penalty", [](GenerateRequest& r) { r.mutable_sampling()->set_presence_penalty(3); },
       C::kInvalidArgument, "sampling.presence_penalty", "[-2, 2]"},
      {"frequency penalty", [](GenerateRequest& r) { r.mutable_sampling()->set_frequency_penalty(-3); },
       C::kInvalidArgument, "sampling.frequency_penalty", "[-2, 2]"},
      {"logit bias too strong", [](GenerateRequest& r) { (*r.mutable_sampling()->mutable_logit_bias())[5] = 101; },
       C::kInvalidArgument, "sampling.logit_bias[5]", "[-100, 100]"},
      {"logit bias outside the vocabulary",
       [](GenerateRequest& r) { (*r.mutable_sampling()->mutable_logit_bias())[1 << 30] = 1; },
       C::kInvalidArgument, "sampling.logit_bias names token 1073741824", "outside the vocabulary"},
      {"logit bias too long",
       [](GenerateRequest& r) {
         for (int i = 0; i <= kMaxLogitBias; ++i) (*r.mutable_sampling()->mutable_logit_bias())[i] = 1;
       },
       C::kInvalidArgument, "sampling.logit_bias has 301 entries", "limit is 300"},
      {"schema past its limit",
       [](GenerateRequest& r) { r.mutable_structured_output()->set_json_schema(std::string(kMaxJsonSchemaBytes + 1, ' ')); },
       C::kInvalidArgument, "structured_output.json_schema has 65537 bytes", "limit is 65536"},
      {"empty schema", [](GenerateRequest& r) { r.mutable_structured_output()->set_json_schema(""); },
       C::kInvalidArgument, "structured_output.json_schema is empty", ""},
      {"regex past its limit",
       [](GenerateRequest& r) { r.mutable_structured_output()->set_regex(std::string(kMaxRegexBytes + 1, 'a')); },
       C::kInvalidArgument, "structured_output.regex has 4097 bytes", "limit is 4096"},
      {"grammar past its limit",
       [](GenerateRequest& r) { r.mutable_structured_output()->set_grammar(std::string(kMaxGrammarBytes + 1, 'a')); },
       C::kInvalidArgument, "structured_output.grammar has 65537 bytes", "limit is 65536"},
      {"too many choices",
       [](GenerateRequest& r) {
         for (int i = 0; i <= kMaxChoices; ++i) r.mutable_structured_output()->mutable_choice()->add_choices("c");
       },
       C::kInvalidArgument, "structured_output.choice holds 257 choices", "limit is 256"},
      {"no choices", [](GenerateRequest& r) { r.mutable_structured_output()->mutable_choice(); }, C::kInvalidArgument,
       "structured_output.choice holds no choices", ""},
      {"empty choice",
       [](GenerateRequest& r) {
         r.mutable_structured_output()->mutable_choice()->add_choices("yes");
         r.mutable_structured_output()->mutable_choice()->add_choices("");
       },
       C::kInvalidArgument, "structured_output.choice[1] has 0 bytes", "1 to 1024"},
      {"choice past its limit",
       [](GenerateRequest& r) {
         r.mutable_structured_output()->mutable_choice()->add_choices(std::string(kMaxChoiceBytes + 1, 'c'));
       },
       C::kInvalidArgument, "structured_output.choice[0] has 1025 bytes", "1 to 1024"},
      {"json_object false", [](GenerateRequest& r) { r.mutable_structured_output()->set_json_object(false); },
       C::kInvalidArgument, "structured_output.json_object is false", "unset"},
      {"no kind", [](GenerateRequest& r) { r.mutable_structured_output(); }, C::kInvalidArgument,
       "structured_output sets no constraint", "json_schema, json_object, regex, choice, grammar"},
      {"strict without a schema",
       [](GenerateRequest& r) {
         r.mutable_structured_output()->set_regex("a+");
         r.mutable_structured_output()->set_strict(true);
       },
       C::kInvalidArgument, "structured_output.strict", "json_schema only"},
  };
  for (const Case& c : cases) {
    GenerateRequest r = Prompt(10);
    c.mutate(r);
    const absl::Status s = ResolveRequest(kLimits, r);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.needle), absl::string_view::npos) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.limit), absl::string_view::npos) << c.name << ": " << s;
  }
}

TEST(ResolveRequestTest, StringsAtTheirLimitsPass) {
  GenerateRequest r = Prompt(3);
  r.set_request_id(std::string(kMaxRequestIdBytes, 'r'));
  r.set_model(std::string(kMaxModelNameBytes, 'm'));
  r.set_session_id(std::string(kMaxSessionIdBytes, 's'));
  r.mutable_speculation()->set_namespace_(std::string(kMaxNamespaceBytes, 'n'));
  EXPECT_TRUE(ResolveRequest(kLimits, r).ok());
}

TEST(ResolveRequestTest, StructuredOutputsAtTheirLimitsPassUnchanged) {
  std::vector<floe::v1::StructuredOutput> outputs(5);
  outputs[0].set_json_schema(std::string(kMaxJsonSchemaBytes, ' '));
  outputs[0].set_strict(true);
  outputs[1].set_json_object(true);
  outputs[2].set_regex(std::string(kMaxRegexBytes, 'a'));
  outputs[3].set_grammar(std::string(kMaxGrammarBytes, 'a'));
  for (int i = 0; i < kMaxChoices; ++i) outputs[4].mutable_choice()->add_choices(std::string(kMaxChoiceBytes, 'c'));
  for (const floe::v1::StructuredOutput& output : outputs) {
    GenerateRequest r = Prompt(3);
    *r.mutable_structured_output() = output;
    const absl::Status s = ResolveRequest(kLimits, r);
    EXPECT_TRUE(s.ok()) << StructuredOutputField(output) << ": " << s;
    EXPECT_EQ(r.structured_output().SerializeAsString(), output.SerializeAsString());
  }
}

// The OpenAI front and the CLI name the value in their own terms.
TEST(ResolveRequestTest, StructuredOutputErrorsNameTheCallersField) {
  floe::v1::StructuredOutput output;
  output.set_regex(std::string(kMaxRegexBytes + 1, 'a'));
  EXPECT_EQ(CheckStructuredOutput(output, "guided_regex").message(), "guided_regex has 4097 bytes; the limit is 4096");
  EXPECT_EQ(StructuredOutputField(output), "structured_output.regex");
  EXPECT_EQ(StructuredOutputField(floe::v1::StructuredOutput()), "structured_output");
}

TEST(ResolveRequestTest, DefaultsAreFilled) {
  GenerateRequest r = Prompt(10);
  ASSERT_TRUE(ResolveRequest(kLimits, r).ok());
  EXPECT_EQ(r.stopping().max_tokens(), 40);  // the server limit: 10 + 40 fit 64
  EXPECT_EQ(r.sampling().repetition_penalty(), 1.0f);
  GenerateRequest near_end = Prompt(50);
  ASSERT_TRUE(ResolveRequest(kLimits, near_end).ok());
  EXPECT_EQ(near_end.stopping().max_tokens(), 14);  // what the context leaves
}

TEST(ResolveRequestTest, TheContextRuleAtItsEdge) {
  GenerateRequest fits = Prompt(30);
  fits.mutable_stopping()->set_max_tokens(34);  // 30 + 34 = 64: exactly the context
  RequestLimits wide = kLimits;
  wide.max_tokens_limit = 100;
  EXPECT_TRUE(ResolveRequest(wide, fits).ok());
  GenerateRequest over = Prompt(30);
  over.mutable_stopping()->set_max_tokens(35);
  EXPECT_EQ(ResolveRequest(wide, over).code(), absl::StatusCode::kOutOfRange);
  GenerateRequest longest = Prompt(63);  // one token of room left
  ASSERT_TRUE(ResolveRequest(wide, longest).ok());
  EXPECT_EQ(longest.stopping().max_tokens(), 1);
}

TEST(ResolveRequestTest, LimitsTravelInModelInfo) {
  floe::v1::ModelInfo info;
  WriteLimits(kLimits, &info);
  const RequestLimits back = LimitsOf(info);
  EXPECT_EQ(back.vocab_size, 1000);
  EXPECT_EQ(back.max_context, 64);
  EXPECT_EQ(back.max_tokens_limit, 40);
  info.clear_max_tokens_limit();  // a worker that does not report it
  EXPECT_EQ(LimitsOf(info).max_tokens_limit, 64);
}

}  // namespace
}  // namespace floe
