#include "services/router/openai/openai_response.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace floe::openai {
namespace {

using nlohmann::json;

std::string TokenText(const Tokenizer& tokenizer, int32_t id) {
  int32_t ids[1] = {id};
  auto text = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
  return text.ok() ? *text : std::string();
}

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

json Base(const ResponseHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

std::string FinishReason(floe::v1::FinishReason reason) {
  switch (reason) {
    case floe::v1::FINISH_REASON_LENGTH:
    case floe::v1::FINISH_REASON_CONTEXT:
      return "length";
    case floe::v1::FINISH_REASON_ABORT:
      return "abort";
    case floe::v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "stop";
  }
}

json Usage(const floe::v1::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens()},
          {"completion_tokens", u.completion_tokens()},
          {"total_tokens", u.prompt_tokens() + u.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens()}}}};
}

json Logprobs(const ResponseHeader& header, const Tokenizer& tokenizer,
              const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& logprobs) {
  if (header.endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const auto& lp : logprobs) {
      const std::string token = TokenText(tokenizer, lp.token_id());
      json top = json::array();
      for (int i = 0; i < lp.top_ids_size() && i < lp.top_logprobs_size(); ++i) {
        const std::string alt = TokenText(tokenizer, lp.top_ids(i));
        top.push_back({{"token", alt}, {"logprob", lp.top_logprobs(i)}, {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", token}, {"logprob", lp.logprob()}, {"bytes", Bytes(token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array();
  for (const auto& lp : logprobs) {
    tokens.push_back(TokenText(tokenizer, lp.token_id()));
    token_logprobs.push_back(lp.logprob());
    json top = json::object();
    for (int i = 0; i < lp.top_ids_size() && i < lp.top_logprobs_size(); ++i)
      top[TokenText(tokenizer, lp.top_ids(i))] = lp.top_logprobs(i);
    top_logprobs.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}};
}

json PromptLogprobs(const Tokenizer& tokenizer, const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& prompt) {
  json out = json::array();
  for (const floe::v1::TokenLogprob& lp : prompt) {
    if (lp.rank() == 0) {  // the first token: nothing predicts it
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    entry[std::to_string(lp.token_id())] = {
        {"logprob", lp.logprob()}, {"rank", lp.rank()}, {"decoded_token", TokenText(tokenizer, lp.token_id())}};
    for (int i = 0; i < lp.top_ids_size() && i < lp.top_logprobs_size(); ++i) {
      const std::string key = std::to_string(lp.top_ids(i));
      if (entry.contains(key)) continue;
      entry[key] = {{"logprob", lp.top_logprobs(i)}, {"rank", i + 1}, {"decoded_token", TokenText(tokenizer, lp.top_ids(i))}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

void PrependPromptLogprobs(json& logprobs, const Tokenizer& tokenizer,
                           const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& prompt) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array();
  for (const floe::v1::TokenLogprob& lp : prompt) {
    tokens.push_back(TokenText(tokenizer, lp.token_id()));
    if (lp.rank() == 0) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(lp.logprob());
    json top = json::object();
    for (int i = 0; i < lp.top_ids_size() && i < lp.top_logprobs_size(); ++i)
      top[TokenText(tokenizer, lp.top_ids(i))] = lp.top_logprobs(i);
    top_logprobs.push_back(std::move(top));
  }
  if (!logprobs.is_object()) logprobs = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
  const std::pair<const char*, json*> parts[] = {
      {"tokens", &tokens}, {"token_logprobs", &token_logprobs}, {"top_logprobs", &top_logprobs}};
  for (const auto& [key, head] : parts) {
    json& rest = logprobs[key];
    head->insert(head->end(), rest.begin(), rest.end());
    rest = std::move(*head);
  }
}

json StreamChunk(const ResponseHeader& h, const Tokenizer& tokenizer, const floe::v1::Chunk* chunk,
                 const floe::v1::Complete* complete, bool first, bool include_usage) {
  const bool chat = h.endpoint == Endpoint::kChat;
  json choice = {{"index", 0}};
  const std::string text = chunk ? chunk->text() : "";
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (chunk) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = (h.logprobs && chunk && chunk->logprobs_size() > 0) ? Logprobs(h, tokenizer, chunk->logprobs())
                                                                           : json(nullptr);
  choice["finish_reason"] = complete ? json(FinishReason(complete->finish_reason())) : json(nullptr);
  if (h.return_token_ids && chunk) choice["token_ids"] = std::vector<int32_t>(chunk->token_ids().begin(), chunk->token_ids().end());
  if (complete && !complete->stop_reason().empty()) choice["stop_reason"] = complete->stop_reason();
  json out = Base(h, chat ? "chat.completion.chunk" : "text_completion");
  if (h.prompt_logprobs && chunk && chunk->prompt_logprobs_size() > 0)
    (chat ? out : choice)["prompt_logprobs"] = PromptLogprobs(tokenizer, chunk->prompt_logprobs());
  out["choices"] = json::array({choice});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json UsageChunk(const ResponseHeader& h, const floe::v1::Usage& usage) {
  json out = Base(h, h.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = Usage(usage);
  return out;
}

json FullResponse(const ResponseHeader& h, const Tokenizer& tokenizer, const std::string& text,
                  const std::vector<int32_t>& token_ids,
                  const google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob>& logprobs,
                  const floe::v1::Complete& complete) {
  const bool chat = h.endpoint == Endpoint::kChat;
  json choice = {{"index", 0}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = h.logprobs ? Logprobs(h, tokenizer, logprobs) : json(nullptr);
  choice["finish_reason"] = FinishReason(complete.finish_reason());
  if (!complete.stop_reason().empty()) choice["stop_reason"] = complete.stop_reason();
  if (h.return_token_ids) choice["token_ids"] = token_ids;
  json out = Base(h, chat ? "chat.completion" : "text_completion");
  out["choices"] = json::array({choice});
  out["usage"] = Usage(complete.usage());
  return out;
}

json ToolCallsDelta(const tools::ToolCallDelta& delta) {
  json calls = json::array();
  for (const tools::ToolCallDelta::Call& c : delta.calls) {
    json call = {{"index", c.index}};
    json function = json::object();
    if (!c.id.empty()) {
      call["id"] = c.id;
      call["type"] = "function";
      function["name"] = c.name;
    }
    function["arguments"] = c.arguments;
    call["function"] = std::move(function);
    calls.push_back(std::move(call));
  }
  return calls;
}

void WithToolCalls(json& response, const tools::ToolCallStream& stream) {
  json& choice = response["choices"][0];
  json& message = choice["message"];
  message["content"] = stream.content().empty() ? json(nullptr) : json(stream.content());
  const std::vector<tools::ReportedCall> calls = stream.calls();
  if (calls.empty()) return;
  json out = json::array();
  for (const tools::ReportedCall& c : calls)
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  message["tool_calls"] = std::move(out);
  // An output cut by max_tokens stays "length": the client must know.
  if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
}

ApiError FromStatus(const grpc::Status& status, Endpoint endpoint) {
  ApiError e;
  e.message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: {
      e.status = 400;
      // Our messages start with the field they refuse; name it as OpenAI does.
      std::string field = e.message.substr(0, e.message.find_first_of(" :"));
      for (const char* prefix : {"sampling.", "stopping.", "logprobs."})
        if (absl::StartsWith(field, prefix)) field = field.substr(std::string(prefix).size());
      if (field == "text" || field == "token_ids" || field == "prompt")
        field = endpoint == Endpoint::kChat ? "messages" : "prompt";
      const bool identifier = !field.empty() && field.find_first_not_of("abcdefghijklmnopqrstuvwxyz_.[]0123456789") == std::string::npos;
      if (identifier) e.param = field;
      break;
    }
    case grpc::StatusCode::UNAUTHENTICATED:
      e.status = 401;
      e.code = "invalid_api_key";
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      e.status = 403;
      break;
    case grpc::StatusCode::NOT_FOUND:
      e.status = 404;
      e.param = "model";
      e.code = "model_not_found";
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      e.status = 429;
      e.type = e.message.find("rate limit") != std::string::npos ? "rate_limit_exceeded" : "server_overloaded";
      break;
    case grpc::StatusCode::UNAVAILABLE:
      e.status = 503;
      e.type = "service_unavailable";
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      e.status = 504;
      e.type = "timeout";
      break;
    case grpc::StatusCode::CANCELLED:
      e.status = 499;
      e.type = "cancelled";
      break;
    default:
      e.status = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

}  // namespace floe::openai
