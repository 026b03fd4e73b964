// The invariants of a request ResolveRequest accepted (its header's
// promises), shared by the resolve_request and openai_request fuzzers.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "floe/v1/generate.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "services/request/resolve_request.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe {
namespace fuzz_internal {

template <typename Ids>
inline bool InVocabulary(const Ids& ids, int32_t vocab) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) return false;
  }
  return true;
}

inline bool Within(const std::string& text, size_t max_bytes) { return !text.empty() && text.size() <= max_bytes; }

inline std::string Serialize(const floe::v1::GenerateRequest& r) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  r.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

}  // namespace fuzz_internal

// Strings bounded, structured_output one kind within its bounds (strict only
// with a schema), prompt 1..max_context-1 ids in the vocabulary,
// 1 <= max_tokens <= limit, prompt + max_tokens <= context, min_tokens in
// [0, max_tokens], stop ids bounded and in the vocabulary, top_n in range,
// sampling values in range (not NaN); resolving again changes nothing.
inline void CheckResolved(const RequestLimits& limits, const floe::v1::GenerateRequest& r) {
  FUZZ_CHECK(CheckRequestStrings(r).ok(), "strings over their limits");
  FUZZ_CHECK(r.request_id().size() <= kMaxRequestIdBytes && r.model().size() <= kMaxModelNameBytes &&
                 r.session_id().size() <= kMaxSessionIdBytes &&
                 r.speculation().namespace_().size() <= kMaxNamespaceBytes &&
                 r.cache_salt().size() <= kMaxCacheSaltBytes,
             "a string over its limit");
  FUZZ_CHECK(r.prompt_case() == floe::v1::GenerateRequest::kTokenIds, "prompt is not token ids");
  const int prompt = r.token_ids().ids_size();
  FUZZ_CHECK(prompt >= 1 && prompt < limits.max_context, "prompt of %d tokens, context %d", prompt,
             limits.max_context);
  FUZZ_CHECK(fuzz_internal::InVocabulary(r.token_ids().ids(), limits.vocab_size), "prompt id outside the vocabulary");
  FUZZ_CHECK(fuzz_internal::InVocabulary(r.forced_output_ids(), limits.vocab_size), "forced id outside the vocabulary");
  const auto& s = r.stopping();
  FUZZ_CHECK(s.has_max_tokens() && s.max_tokens() >= 1 && s.max_tokens() <= limits.max_tokens_limit &&
                 int64_t{prompt} + s.max_tokens() <= limits.max_context,
             "max_tokens %d (prompt %d, context %d, limit %d)", s.max_tokens(), prompt, limits.max_context,
             limits.max_tokens_limit);
  FUZZ_CHECK(s.min_tokens() >= 0 && s.min_tokens() <= s.max_tokens(), "min_tokens %d", s.min_tokens());
  FUZZ_CHECK(s.stop_token_ids_size() <= limits.max_stop_token_ids &&
                 fuzz_internal::InVocabulary(s.stop_token_ids(), limits.vocab_size),
             "stop_token_ids");
  FUZZ_CHECK(r.logprobs().top_n() >= 0 && r.logprobs().top_n() <= limits.max_top_logprobs, "top_n %d",
             r.logprobs().top_n());
  if (r.has_structured_output()) {
    // Checked here on its own terms, not by calling CheckStructuredOutput.
    const auto& o = r.structured_output();
    using K = floe::v1::StructuredOutput;
    using fuzz_internal::Within;
    const bool text_ok = (o.kind_case() == K::kJsonSchema && Within(o.json_schema(), kMaxJsonSchemaBytes)) ||
                         (o.kind_case() == K::kRegex && Within(o.regex(), kMaxRegexBytes)) ||
                         (o.kind_case() == K::kGrammar && Within(o.grammar(), kMaxGrammarBytes));
    bool choices_ok = o.kind_case() == K::kChoice && o.choice().choices_size() >= 1 &&
                      o.choice().choices_size() <= kMaxChoices;
    for (int i = 0; choices_ok && i < o.choice().choices_size(); ++i)
      choices_ok = Within(o.choice().choices(i), kMaxChoiceBytes);
    FUZZ_CHECK(text_ok || choices_ok || (o.kind_case() == K::kJsonObject && o.json_object()),
               "structured_output kind %d out of bounds", static_cast<int>(o.kind_case()));
    FUZZ_CHECK(!o.strict() || o.kind_case() == K::kJsonSchema, "strict without a json_schema");
  }
  const auto& p = r.sampling();
  FUZZ_CHECK(std::isfinite(p.temperature()) && p.temperature() >= 0, "temperature %g", p.temperature());
  FUZZ_CHECK(p.top_k() >= 0, "top_k %d", p.top_k());
  FUZZ_CHECK(!p.has_top_p() || (p.top_p() > 0 && p.top_p() <= 1), "top_p %g", p.top_p());
  FUZZ_CHECK(p.min_p() >= 0 && p.min_p() < 1, "min_p %g", p.min_p());
  FUZZ_CHECK(p.repetition_penalty() >= 0.01f && p.repetition_penalty() <= 100, "repetition_penalty %g",
             p.repetition_penalty());
  FUZZ_CHECK(std::fabs(p.presence_penalty()) <= 2 && std::fabs(p.frequency_penalty()) <= 2, "penalties %g %g",
             p.presence_penalty(), p.frequency_penalty());
  floe::v1::GenerateRequest again = r;
  const absl::Status status = ResolveRequest(limits, again);
  FUZZ_CHECK(status.ok(), "resolving a resolved request failed: %s", status.ToString().c_str());
  FUZZ_CHECK(fuzz_internal::Serialize(again) == fuzz_internal::Serialize(r), "resolving a resolved request changed it");
}

}  // namespace floe

