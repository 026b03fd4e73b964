// OpenAI response objects built from floe.v1 events: completion and chat
// completion bodies, their streamed chunks, usage and logprobs, and the
// mapping of a gRPC status onto OpenAI's HTTP error. Pure functions.
#pragma once

#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "floe/v1/generate.pb.h"
#include "services/router/openai/openai_request.h"
#include "services/router/tools/tool_call_stream.h"

namespace floe::openai {

// What every object of one response shares.
struct ResponseHeader {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<int> logprobs;  // as requested
  bool return_token_ids = false;
  bool prompt_logprobs = false;  // vLLM's prompt_logprobs field was asked for
  bool echo = false;             // completions: the prompt comes first (its logprobs too)
};

// "stop" or "length" (OpenAI has no other reason Floe produces).
std::string FinishReason(floe::v1::FinishReason reason);
nlohmann::json Usage(const floe::v1::Usage& usage);
// The logprobs object of a choice for these tokens (format by endpoint).
nlohmann::json Logprobs(const ResponseHeader& header, const Tokenizer& tokenizer,
                        const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& logprobs);

// vLLM's prompt_logprobs: null for the first token, then per prompt token
// {"<id>": {"logprob", "rank", "decoded_token"}} for it and its top
// alternatives.
nlohmann::json PromptLogprobs(const Tokenizer& tokenizer,
                              const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& prompt);
// Completions with echo and logprobs: the prompt's tokens put before the
// completion's in `logprobs` (tokens, token_logprobs and top_logprobs; null
// for the first token, as OpenAI).
void PrependPromptLogprobs(nlohmann::json& logprobs, const Tokenizer& tokenizer,
                           const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& prompt);

// One streamed chunk: text (and logprobs) of one event, or the finish.
nlohmann::json StreamChunk(const ResponseHeader& header, const Tokenizer& tokenizer, const floe::v1::Chunk* chunk,
                           const floe::v1::Complete* complete, bool first, bool include_usage);
// The final usage-only chunk (stream_options.include_usage).
nlohmann::json UsageChunk(const ResponseHeader& header, const floe::v1::Usage& usage);
// The whole (non-streamed) response.
nlohmann::json FullResponse(const ResponseHeader& header, const Tokenizer& tokenizer, const std::string& text,
                            const std::vector<int32_t>& token_ids,
                            const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& logprobs,
                            const floe::v1::Complete& complete);

// Tool calls: a stream delta's "tool_calls" (index, then id, type and name
// once, then argument fragments), and a whole chat response's message made
// of the stream's calls (content null when none; finish_reason
// "tool_calls" when a call was made and the output was not cut).
nlohmann::json ToolCallsDelta(const tools::ToolCallDelta& delta);
void WithToolCalls(nlohmann::json& response, const tools::ToolCallStream& calls);

// gRPC status -> OpenAI error (429 for overload, 503 unavailable, 404 model).
ApiError FromStatus(const grpc::Status& status, Endpoint endpoint);

}  // namespace floe::openai
