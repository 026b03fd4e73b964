// One place resolves a GenerateRequest: its defaults, its limits and the
// context rule. The router calls it before picking a worker (with the limits
// the workers report in ModelInfo) and the worker calls it again for clients
// that reach it directly, so the two can never disagree. What it accepts the
// engine runs without further checks; only what changes per step (drafts) is
// checked per step.
//
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "floe/v1/generate.pb.h"

namespace floe {

struct RequestLimits {
  int32_t vocab_size = 0;
  // Prompt + output tokens of one request (the worker's max_model_len).
  int32_t max_context = 0;
  // The largest stopping.max_tokens a request may ask for (--max-tokens-limit).
  int32_t max_tokens_limit = 0;
  int32_t max_top_logprobs = 20;
  int32_t max_stop_token_ids = 64;
};

// Every client-chosen string of a request, bounded (bytes): labels and
// keys, never echoed or stored beyond these.
inline constexpr int kMaxRequestIdBytes = 128;
inline constexpr int kMaxModelNameBytes = 256;
inline constexpr int kMaxSessionIdBytes = 256;
inline constexpr int kMaxNamespaceBytes = 256;
inline constexpr int kMaxCacheSaltBytes = 256;

// INVALID_ARGUMENT naming the field and its limit when request_id, model,
// session_id or speculation.namespace is longer than allowed. The router
// calls it before any other work (tokenizing); ResolveRequest calls it too.
absl::Status CheckRequestStrings(const floe::v1::GenerateRequest& request);

// Bounds of GenerateRequest.structured_output, the same over gRPC, HTTP and
// the CLI (the worker bounds what compiling one may cost on its own). The
// JSON Schema is counted as the text the request carries (the OpenAI front
// serializes a schema object compactly, its key order kept).
inline constexpr size_t kMaxJsonSchemaBytes = 64 << 10;
inline constexpr size_t kMaxRegexBytes = 4 << 10;
inline constexpr size_t kMaxGrammarBytes = 64 << 10;
inline constexpr int kMaxChoices = 256;
// GenerateRequest.n: choices per request (OpenAI's n; vLLM has no limit).
inline constexpr int kMaxN = 16;
inline constexpr size_t kMaxChoiceBytes = 1024;
// sampling.logit_bias entries (OpenAI's bound).
inline constexpr int kMaxLogitBias = 300;

// The gRPC name of the constraint `output` sets: "structured_output.regex",
// ".json_schema", ...; "structured_output" when it sets none.
std::string StructuredOutputField(const floe::v1::StructuredOutput& output);

// INVALID_ARGUMENT unless `output` sets exactly one kind within its bounds:
// json_schema (1..kMaxJsonSchemaBytes), json_object (true), regex
// (1..kMaxRegexBytes), grammar (1..kMaxGrammarBytes) or choice
// (1..kMaxChoices strings of 1..kMaxChoiceBytes each); and `strict` only
// with json_schema. The message starts with `field`, the name of the
// constraint's value in the caller's API (gRPC: StructuredOutputField;
// OpenAI: "response_format.json_schema.schema", "guided_regex", ...; the CLI:
// its flag), and states the limit. Checks bounds only: whether the schema,
// regex or grammar compiles is the worker's answer.
absl::Status CheckStructuredOutput(const floe::v1::StructuredOutput& output, absl::string_view field);

// The limits a worker reports (ModelInfo.vocab_size, max_context,
// max_tokens_limit); a worker that reports no max_tokens_limit (older)
// allows up to its context.
RequestLimits LimitsOf(const floe::v1::ModelInfo& info);
void WriteLimits(const RequestLimits& limits, floe::v1::ModelInfo* info);

// Checks `request`, whose prompt must be token ids (the router tokenizes text
// first), against `limits` and fills its defaults in place:
// - its strings (CheckRequestStrings);
// - structured_output, when set: CheckStructuredOutput, named as over gRPC;
// - the prompt: 1 .. max_context - 1 ids, each in [0, vocab_size);
// - stopping.max_tokens: unset means min(max_tokens_limit, max_context -
//   prompt); set, it must be > 0, prompt + max_tokens must fit the context
//   and max_tokens <= max_tokens_limit (OUT_OF_RANGE, never a silent cut);
// - min_tokens in [0, max_tokens]; stop_token_ids and forced_output_ids in
//   the vocabulary; logprobs.top_n in [0, max_top_logprobs];
// - sampling values in their ranges; repetition_penalty 0 (unset) becomes 1.
// Errors are INVALID_ARGUMENT or OUT_OF_RANGE and name the field and the limit.
absl::Status ResolveRequest(const RequestLimits& limits, floe::v1::GenerateRequest& request);

}  // namespace floe
