#include "services/request/resolve_request.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

using floe::v1::GenerateRequest;

template <typename Ids>
absl::Status CheckVocabulary(const char* field, const Ids& ids, int32_t vocab) {
  for (int i = 0; i < static_cast<int>(ids.size()); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
  }
  return absl::OkStatus();
}

absl::Status ResolveSampling(floe::v1::SamplingParams& s) {
  if (!(s.temperature() >= 0.0f) || std::isinf(s.temperature()))
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature must be >= 0 and finite, got ", s.temperature()));
  if (s.top_k() < 0)
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_k must be >= 0 (0 disables), got ", s.top_k()));
  if (s.has_top_p() && !(s.top_p() > 0.0f && s.top_p() <= 1.0f))
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_p must be in (0, 1], got ", s.top_p()));
  if (!(s.min_p() >= 0.0f && s.min_p() < 1.0f))
    return absl::InvalidArgumentError(absl::StrCat("sampling.min_p must be in [0, 1), got ", s.min_p()));
  if (s.repetition_penalty() == 0.0f) s.set_repetition_penalty(1.0f);
  // Logits are divided or multiplied by it: outside [0.01, 100] they leave
  // any useful range (1e-45 would turn every logit into infinity).
  if (!(s.repetition_penalty() >= 0.01f && s.repetition_penalty() <= 100.0f))
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.repetition_penalty must be in [0.01, 100] (1 or unset: off), got ", s.repetition_penalty()));
  if (!(std::fabs(s.presence_penalty()) <= 2.0f))
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.presence_penalty must be in [-2, 2], got ", s.presence_penalty()));
  if (!(std::fabs(s.frequency_penalty()) <= 2.0f))
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.frequency_penalty must be in [-2, 2], got ", s.frequency_penalty()));
  if (s.logit_bias_size() > kMaxLogitBias)
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.logit_bias has ", s.logit_bias_size(), " entries; the limit is ", kMaxLogitBias));
  for (const auto& [id, bias] : s.logit_bias()) {
    if (!(std::fabs(bias) <= 100.0f))
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.logit_bias[", id, "] must be in [-100, 100], got ", bias));
  }
  return absl::OkStatus();
}

absl::Status CheckText(absl::string_view field, const std::string& text, size_t limit) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (text.size() > limit)
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", text.size(), " bytes; the limit is ", limit));
  return absl::OkStatus();
}

absl::Status CheckChoices(absl::string_view field, const floe::v1::ChoiceList& list) {
  if (list.choices_size() == 0) return absl::InvalidArgumentError(absl::StrCat(field, " holds no choices"));
  if (list.choices_size() > kMaxChoices)
    return absl::InvalidArgumentError(
        absl::StrCat(field, " holds ", list.choices_size(), " choices; the limit is ", kMaxChoices));
  for (int i = 0; i < list.choices_size(); ++i) {
    const size_t bytes = list.choices(i).size();
    if (bytes == 0 || bytes > kMaxChoiceBytes)
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] has ", bytes,
                                                     " bytes; each choice must have 1 to ", kMaxChoiceBytes));
  }
  return absl::OkStatus();
}

}  // namespace

std::string StructuredOutputField(const floe::v1::StructuredOutput& output) {
  using K = floe::v1::StructuredOutput;
  switch (output.kind_case()) {
    case K::kJsonSchema: return "structured_output.json_schema";
    case K::kJsonObject: return "structured_output.json_object";
    case K::kRegex: return "structured_output.regex";
    case K::kChoice: return "structured_output.choice";
    case K::kGrammar: return "structured_output.grammar";
    case K::KIND_NOT_SET: break;
  }
  return "structured_output";
}

absl::Status CheckStructuredOutput(const floe::v1::StructuredOutput& output, absl::string_view field) {
  using K = floe::v1::StructuredOutput;
  // strict closes a schema's objects; on anything else it would be a no-op
  // the client believes in.
  if (output.strict() && output.kind_case() != K::kJsonSchema)
    return absl::InvalidArgumentError("structured_output.strict applies to json_schema only");
  switch (output.kind_case()) {
    case K::kJsonSchema: return CheckText(field, output.json_schema(), kMaxJsonSchemaBytes);
    case K::kRegex: return CheckText(field, output.regex(), kMaxRegexBytes);
    case K::kGrammar: return CheckText(field, output.grammar(), kMaxGrammarBytes);
    case K::kChoice: return CheckChoices(field, output.choice());
    case K::kJsonObject:
      if (!output.json_object())
        return absl::InvalidArgumentError(
            absl::StrCat(field, " is false: set it true, or leave structured_output unset for no constraint"));
      return absl::OkStatus();
    case K::KIND_NOT_SET: break;
  }
  return absl::InvalidArgumentError(
      "structured_output sets no constraint: set one of json_schema, json_object, regex, choice, grammar");
}

RequestLimits LimitsOf(const floe::v1::ModelInfo& info) {
  RequestLimits limits;
  limits.vocab_size = info.vocab_size();
  limits.max_context = info.max_context();
  limits.max_tokens_limit = info.max_tokens_limit() > 0 ? info.max_tokens_limit() : info.max_context();
  return limits;
}

void WriteLimits(const RequestLimits& limits, floe::v1::ModelInfo* info) {
  info->set_vocab_size(limits.vocab_size);
  info->set_max_context(limits.max_context);
  info->set_max_tokens_limit(limits.max_tokens_limit);
}

absl::Status CheckRequestStrings(const GenerateRequest& request) {
  const std::pair<const char*, std::pair<size_t, int>> fields[] = {
      {"request_id", {request.request_id().size(), kMaxRequestIdBytes}},
      {"model", {request.model().size(), kMaxModelNameBytes}},
      {"session_id", {request.session_id().size(), kMaxSessionIdBytes}},
      {"speculation.namespace", {request.speculation().namespace_().size(), kMaxNamespaceBytes}},
      {"cache_salt", {request.cache_salt().size(), kMaxCacheSaltBytes}}};
  for (const auto& [name, size_limit] : fields) {
    if (size_limit.first > static_cast<size_t>(size_limit.second))
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has ", size_limit.first, " bytes; the limit is ", size_limit.second));
  }
  return absl::OkStatus();
}

absl::Status ResolveRequest(const RequestLimits& limits, GenerateRequest& request) {
  if (absl::Status s = CheckRequestStrings(request); !s.ok()) return s;
  if (request.has_structured_output()) {
    const floe::v1::StructuredOutput& output = request.structured_output();
    if (absl::Status s = CheckStructuredOutput(output, StructuredOutputField(output)); !s.ok()) return s;
  }
  if (request.prompt_case() == GenerateRequest::kText)
    return absl::InvalidArgumentError("the prompt must be token_ids here (text is tokenized by the router)");
  const auto& ids = request.token_ids().ids();
  const int32_t prompt = ids.size();
  if (prompt == 0) return absl::InvalidArgumentError("prompt is empty: set text or token_ids");
  if (prompt >= limits.max_context)
    return absl::InvalidArgumentError(absl::StrCat("prompt has ", prompt, " tokens; the model's context is ",
                                                   limits.max_context, " tokens (max prompt ",
                                                   limits.max_context - 1, ")"));
  if (absl::Status s = CheckVocabulary("token_ids", ids, limits.vocab_size); !s.ok()) return s;
  // Forced decoding (benchmarks): whether it is allowed at all is the worker's call.
  if (absl::Status s = CheckVocabulary("forced_output_ids", request.forced_output_ids(), limits.vocab_size); !s.ok())
    return s;
  for (const auto& [id, bias] : request.sampling().logit_bias()) {
    if (id < 0 || id >= limits.vocab_size)
      return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias names token ", id,
                                                     ", outside the vocabulary [0, ", limits.vocab_size, ")"));
  }

  if (request.n() < 0 || request.n() > kMaxN)
    return absl::InvalidArgumentError(absl::StrCat("n must be in [1, ", kMaxN, "], got ", request.n()));

  floe::v1::StoppingParams& stop = *request.mutable_stopping();
  if (!stop.has_max_tokens()) {
    stop.set_max_tokens(std::min(limits.max_tokens_limit, limits.max_context - prompt));
  } else if (stop.max_tokens() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("stopping.max_tokens must be > 0, got ", stop.max_tokens()));
  } else if (int64_t{prompt} + stop.max_tokens() > limits.max_context) {
    return absl::OutOfRangeError(absl::StrCat("stopping.max_tokens = ", stop.max_tokens(), " with a ", prompt,
                                              "-token prompt exceeds the model's context of ", limits.max_context,
                                              " tokens"));
  } else if (stop.max_tokens() > limits.max_tokens_limit) {
    return absl::OutOfRangeError(absl::StrCat("stopping.max_tokens = ", stop.max_tokens(),
                                              " exceeds the server limit of ", limits.max_tokens_limit));
  }
  if (stop.min_tokens() < 0 || stop.min_tokens() > stop.max_tokens())
    return absl::InvalidArgumentError(absl::StrCat("stopping.min_tokens must be in [0, max_tokens = ",
                                                   stop.max_tokens(), "], got ", stop.min_tokens()));
  if (stop.stop_token_ids_size() > limits.max_stop_token_ids)
    return absl::InvalidArgumentError(absl::StrCat("stopping.stop_token_ids has ", stop.stop_token_ids_size(),
                                                   " ids; the limit is ", limits.max_stop_token_ids));
  if (absl::Status s = CheckVocabulary("stopping.stop_token_ids", stop.stop_token_ids(), limits.vocab_size); !s.ok())
    return s;
  if (request.logprobs().has_prompt_top_n()) {
    const int32_t prompt_top_n = request.logprobs().prompt_top_n();
    if (prompt_top_n < 0 || prompt_top_n > limits.max_top_logprobs)
      return absl::InvalidArgumentError(absl::StrCat("logprobs.prompt_top_n must be in [0, ", limits.max_top_logprobs,
                                                     "], got ", prompt_top_n));
  }
  const int32_t top_n = request.logprobs().top_n();
  if (top_n < 0 || top_n > limits.max_top_logprobs)
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs.top_n must be in [0, ", limits.max_top_logprobs, "], got ", top_n));
  return ResolveSampling(*request.mutable_sampling());
}

}  // namespace floe
