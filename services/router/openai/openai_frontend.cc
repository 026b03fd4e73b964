#include "services/router/openai/openai_frontend.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/rpc/status_conversion.h"
#include "services/router/openai/openai_response.h"
#include "services/router/openai/tokenize_request.h"

namespace floe::openai {
namespace {

using floe::v1::GenerateResponse;
using nlohmann::json;

http::Response JsonResponse(int status, const json& body) {
  http::Response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

std::string Sse(const json& data) {
  return absl::StrCat("data: ", data.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}


// One choice's share of a relay (GenerateRequest.n choices, by index).
struct ChoiceRelay {
  bool first = true;  // streamed: nothing of this choice sent yet
  bool completed = false;
  // Non-streamed: the whole answer.
  std::string text;
  std::vector<int32_t> token_ids;
  google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob> logprobs;
  google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob> prompt_logprobs;
  floe::v1::Complete complete;
  // Chat with tools: the output read for calls (null: plain text).
  std::unique_ptr<tools::ToolCallStream> tools;
};

// One request's relay state; sink callbacks are serialized by GenerateCall.
struct Relay {
  std::shared_ptr<http::Exchange> exchange;
  ResponseHeader header;
  const Tokenizer* tokenizer = nullptr;
  bool stream = false;
  bool include_usage = false;
  bool started = false;  // the 200 and the event-stream header went out
  std::vector<ChoiceRelay> choices;
  int completed = 0;
  // Completions with echo: the prompt, sent before each choice's completion.
  std::string echo;

  ChoiceRelay* choice(int index) {
    return index >= 0 && index < static_cast<int>(choices.size()) ? &choices[index] : nullptr;
  }
  // OpenAI's usage of n choices: the prompt once, every choice's completion.
  floe::v1::Usage TotalUsage() const {
    floe::v1::Usage total = choices[0].complete.usage();
    for (size_t i = 1; i < choices.size(); ++i)
      total.set_completion_tokens(total.completion_tokens() + choices[i].complete.usage().completion_tokens());
    return total;
  }
};

// A streamed chunk as choice `index`'s.
json AtIndex(json chunk, int index) {
  chunk["choices"][0]["index"] = index;
  return chunk;
}

// A streamed chat chunk whose delta is what the tool-call reader let
// through: content and call pieces instead of the raw text.
json WithToolDelta(json chunk, const tools::ToolCallDelta& delta) {
  json& d = chunk["choices"][0]["delta"];
  d.erase("content");
  if (!delta.content.empty()) d["content"] = delta.content;
  if (!delta.calls.empty()) d["tool_calls"] = ToolCallsDelta(delta);
  return chunk;
}

json ModelJson(const floe::v1::ModelInfo& info) {
  return {{"id", info.name()},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "floe"},
          {"max_model_len", info.max_context()},
          {"vocab_size", info.vocab_size()}};
}

}  // namespace

std::string NextId() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t instance = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return absl::StrCat(absl::Hex(instance, absl::kZeroPad16), "-", counter.fetch_add(1));
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

http::Response ErrorResponse(const ApiError& error) {
  http::Response r = JsonResponse(error.status, ErrorJson(error));
  if (error.status == 429) {
    // A rate limit says when ("retry in 2.50 s"); overload retries in a second.
    int seconds = 1;
    if (const size_t at = error.message.find("retry in "); at != std::string::npos)
      seconds = std::max(1, static_cast<int>(std::ceil(std::atof(error.message.c_str() + at + 9))));
    r.headers.emplace_back("Retry-After", std::to_string(seconds));
  }
  if (error.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

Frontend::Frontend(RouterService* service, const ChatTemplate* chat_template, std::function<bool()> ready,
                   FrontendOptions options)
    : service_(service), chat_template_(chat_template), ready_(std::move(ready)), options_(options) {}

void Frontend::Handle(http::Request request, std::shared_ptr<http::Exchange> exchange) {
  auto not_allowed = [&](const char* allowed) {
    ApiError e;
    e.status = 405;
    e.message = absl::StrCat(request.method.substr(0, 16), " is not allowed on ", request.path.substr(0, 128),
                             " (use ", allowed, ")");
    http::Response r = ErrorResponse(e);
    r.headers.emplace_back("Allow", allowed);
    exchange->Reply(std::move(r));
  };
  const std::string& path = request.path;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (request.method != "POST") return not_allowed("POST");
    return Generate(path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat, request, exchange);
  }
  if (path == "/v1/responses") {
    if (request.method != "POST") return not_allowed("POST");
    return Responses(request, exchange);
  }
  if (path == "/v1/models") {
    if (request.method != "GET") return not_allowed("GET");
    return Models(exchange);
  }
  if (path.rfind("/v1/models/", 0) == 0) {
    if (request.method != "GET") return not_allowed("GET");
    return Model(std::string_view(path).substr(11), exchange);
  }
  if (path == "/tokenize") {
    if (request.method != "POST") return not_allowed("POST");
    return Tokenize(request, exchange);
  }
  if (path == "/detokenize") {
    if (request.method != "POST") return not_allowed("POST");
    return Detokenize(request, exchange);
  }
  if (path == "/health") {
    if (request.method != "GET") return not_allowed("GET");
    return exchange->Reply(JsonResponse(200, {{"status", "ok"}}));
  }
  if (path == "/ready") {
    if (request.method != "GET") return not_allowed("GET");
    const bool ready = ready_();
    return exchange->Reply(JsonResponse(ready ? 200 : 503, {{"status", ready ? "ready" : "not ready"}}));
  }
  ApiError e;
  e.status = 404;
  e.message = absl::StrCat("no such endpoint: ", request.method.substr(0, 16), " ", path.substr(0, 128));
  exchange->Reply(ErrorResponse(e));
}

void Frontend::Models(const std::shared_ptr<http::Exchange>& exchange) {
  json data = json::array();
  if (auto info = service_->model_info()) data.push_back(ModelJson(*info));
  exchange->Reply(JsonResponse(200, {{"object", "list"}, {"data", data}}));
}

namespace {

// %XX escapes of a path segment (clients escape "/" in model names).
std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

void Frontend::Model(std::string_view id, const std::shared_ptr<http::Exchange>& exchange) {
  const std::string name = PercentDecode(id.substr(0, 1024));
  auto info = service_->model_info();
  if (info && name == info->name()) return exchange->Reply(JsonResponse(200, ModelJson(*info)));
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = absl::StrCat("the model \"", name.substr(0, 256), "\" does not exist",
                           info ? absl::StrCat(" (serving \"", info->name(), "\")") : "");
  exchange->Reply(ErrorResponse(e));
}

std::optional<ApiError> Frontend::Admit(const http::Request& request, const std::string& model) const {
  if (auto tenant = service_->Authenticate(request.Header("authorization")); !tenant.ok())
    return FromStatus(ToGrpcStatus(tenant.status()), Endpoint::kCompletions);
  if (grpc::Status s = service_->CheckModel(model); !s.ok()) return FromStatus(s, Endpoint::kCompletions);
  if (!service_->model_info()) {
    return FromStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker has reported its model yet"),
                      Endpoint::kCompletions);
  }
  return std::nullopt;
}

void Frontend::Tokenize(const http::Request& request, const std::shared_ptr<http::Exchange>& exchange) {
  RequestContext context;
  context.chat_template = chat_template_;
  context.strict_fields = options_.strict_fields;
  TokenizeRequest parsed;
  if (auto error = ParseTokenize(request.body, context, &parsed)) return exchange->Reply(ErrorResponse(*error));
  if (auto error = Admit(request, parsed.model)) return exchange->Reply(ErrorResponse(*error));
  std::vector<int32_t> ids = std::move(parsed.ids);
  if (parsed.text) {
    auto encoded = service_->tokenizer().Encode(*parsed.text, parsed.add_special_tokens);
    if (!encoded.ok()) {
      return exchange->Reply(ErrorResponse(FromStatus(ToGrpcStatus(encoded.status()), Endpoint::kCompletions)));
    }
    ids = *std::move(encoded);
  } else if (absl::Status valid = service_->tokenizer().ValidateIds(ids); !valid.ok()) {
    return exchange->Reply(ErrorResponse(FromStatus(ToGrpcStatus(valid), Endpoint::kCompletions)));
  }
  const auto info = service_->model_info();
  exchange->Reply(JsonResponse(200, {{"count", ids.size()},
                                     {"max_model_len", info ? info->max_context() : 0},
                                     {"tokens", ids},
                                     {"token_strs", nullptr}}));
}

void Frontend::Detokenize(const http::Request& request, const std::shared_ptr<http::Exchange>& exchange) {
  DetokenizeRequest parsed;
  if (auto error = ParseDetokenize(request.body, &parsed)) return exchange->Reply(ErrorResponse(*error));
  if (auto error = Admit(request, parsed.model)) return exchange->Reply(ErrorResponse(*error));
  // As vLLM: special tokens are written out.
  auto text = service_->tokenizer().Decode(parsed.ids, /*skip_special_tokens=*/false);
  if (!text.ok()) {
    ApiError e = FromStatus(ToGrpcStatus(text.status()), Endpoint::kCompletions);
    e.param = "tokens";
    return exchange->Reply(ErrorResponse(e));
  }
  exchange->Reply(JsonResponse(200, {{"prompt", *std::move(text)}}));
}

const tools::ToolCallFormat* Frontend::ToolFormat(const ParsedRequest& parsed) const {
  switch (parsed.tool_choice) {
    case ParsedRequest::ToolChoice::kNone: return nullptr;
    case ParsedRequest::ToolChoice::kAuto: return options_.tool_call_format;
    case ParsedRequest::ToolChoice::kRequired: return &tools::RequiredFormat();
    case ParsedRequest::ToolChoice::kNamed: return &tools::NamedFormat();
  }
  return nullptr;
}

void Frontend::ReportIgnored(const std::vector<std::string>& fields) {
  for (const std::string& field : fields) {
    if (RouterMetrics* metrics = service_->metrics()) metrics->ObserveIgnoredField(field);
    std::lock_guard<std::mutex> lock(logged_mu_);
    if (!logged_.insert(field).second) continue;
    const IgnoredField* known = FindIgnoredField(field, Endpoint::kCompletions);
    LogEvent(LogLevel::kInfo, "router", "ignored_field",
             {{"field", field},
              {"why", std::string(known ? known->why : "not used by Floe")},
              {"note", std::string("logged once; floe_http_ignored_fields_total counts every request")}});
  }
}

std::unique_ptr<tools::ToolCallStream> Frontend::ToolReader(ParsedRequest& parsed, const char* id_prefix) const {
  const tools::ToolCallFormat* format = ToolFormat(parsed);
  if (!format) return nullptr;
  // Markers that are special tokens must reach the parser (vLLM does the
  // same for Mistral); the parser removes them.
  if (format->keeps_special && !parsed.generate.has_skip_special_tokens())
    parsed.generate.set_skip_special_tokens(false);
  return std::make_unique<tools::ToolCallStream>(*format, parsed.tool_name, parsed.parallel_tool_calls,
                                                 [id_prefix] { return absl::StrCat(id_prefix, NextId()); });
}

RequestContext Frontend::Context(const http::Request& request) const {
  RequestContext context;
  context.chat_template = chat_template_;
  context.session_header = std::string(request.Header("x-session-id"));
  context.request_id_header = std::string(request.Header("x-request-id"));
  context.strict_fields = options_.strict_fields;
  return context;
}

void Frontend::Generate(Endpoint endpoint, const http::Request& request, std::shared_ptr<http::Exchange> exchange) {
  const RequestContext context = Context(request);
  auto relay = std::make_shared<Relay>();
  ParsedRequest parsed;
  if (auto error = Parse(endpoint, request.body, context, &parsed)) return exchange->Reply(ErrorResponse(*error));
  ReportIgnored(parsed.ignored_fields);

  relay->exchange = exchange;
  relay->tokenizer = &service_->tokenizer();
  relay->stream = parsed.stream;
  relay->include_usage = parsed.include_usage;
  relay->header.endpoint = endpoint;
  relay->header.created = UnixNow();
  relay->header.logprobs = parsed.logprobs;
  relay->header.return_token_ids = parsed.return_token_ids;
  relay->header.prompt_logprobs = parsed.prompt_logprobs.has_value();
  relay->header.echo = parsed.echo;
  relay->header.id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", NextId());
  if (auto info = service_->model_info()) relay->header.model = info->name();
  if (parsed.echo) {
    const auto& g = parsed.generate;
    if (g.has_token_ids()) {
      std::vector<int32_t> ids(g.token_ids().ids().begin(), g.token_ids().ids().end());
      auto text = service_->tokenizer().Decode(ids, /*skip_special_tokens=*/false);
      if (!text.ok()) {
        ApiError e = FromStatus(ToGrpcStatus(text.status()), endpoint);
        e.param = "prompt";
        return exchange->Reply(ErrorResponse(e));
      }
      relay->echo = *std::move(text);
    } else {
      relay->echo = g.text();
    }
  }
  relay->choices.resize(std::max(1, parsed.generate.n()));
  for (ChoiceRelay& choice : relay->choices) choice.tools = ToolReader(parsed, "chatcmpl-tool-");

  GenerateCall::Sink sink;
  sink.on_events = [relay](GenerateCall& call, std::vector<GenerateResponse> events) {
    if (!relay->stream) {
      for (const GenerateResponse& e : events) {
        if (e.has_chunk()) {
          ChoiceRelay* c = relay->choice(e.chunk().index());
          if (!c) continue;
          c->text += e.chunk().text();
          c->token_ids.insert(c->token_ids.end(), e.chunk().token_ids().begin(), e.chunk().token_ids().end());
          c->logprobs.MergeFrom(e.chunk().logprobs());
          c->prompt_logprobs.MergeFrom(e.chunk().prompt_logprobs());
        } else if (e.has_complete()) {
          ChoiceRelay* c = relay->choice(e.complete().index());
          if (!c || c->completed) continue;
          c->complete = e.complete();
          c->completed = true;
          ++relay->completed;
        }
      }
      call.Resume();
      return;
    }
    if (!relay->started) {
      // The stream starts with the first event, so that a refusal before it
      // (overload, no worker) is still an HTTP status, 429 or 503.
      relay->started = true;
      relay->exchange->StartStream(200, "text/event-stream");
    }
    std::string data;
    for (const GenerateResponse& e : events) {
      const int index = e.has_chunk() ? e.chunk().index() : e.complete().index();
      ChoiceRelay* c = relay->choice(index);
      if (!c || c->completed) continue;
      if (c->first && !relay->echo.empty()) {
        floe::v1::Chunk prompt;
        prompt.set_text(relay->echo);
        json chunk = StreamChunk(relay->header, *relay->tokenizer, &prompt, nullptr, true, relay->include_usage);
        if (relay->header.logprobs && e.has_chunk() && e.chunk().prompt_logprobs_size() > 0) {
          json logprobs;
          PrependPromptLogprobs(logprobs, *relay->tokenizer, e.chunk().prompt_logprobs());
          chunk["choices"][0]["logprobs"] = std::move(logprobs);
        }
        data += Sse(AtIndex(std::move(chunk), index));
        c->first = false;
      }
      if (e.has_chunk()) {
        json chunk = StreamChunk(relay->header, *relay->tokenizer, &e.chunk(), nullptr, c->first, relay->include_usage);
        if (c->tools) chunk = WithToolDelta(std::move(chunk), c->tools->Feed(e.chunk().text()));
        data += Sse(AtIndex(std::move(chunk), index));
        c->first = false;
      } else if (e.has_complete()) {
        c->completed = true;
        c->complete = e.complete();
        ++relay->completed;
        if (c->tools) {
          // What the reader held back (a possible marker), then the finish.
          const tools::ToolCallDelta rest = c->tools->Finish();
          if (!rest.empty()) {
            floe::v1::Chunk empty;
            data += Sse(AtIndex(
                WithToolDelta(StreamChunk(relay->header, *relay->tokenizer, &empty, nullptr, c->first,
                                          relay->include_usage),
                              rest),
                index));
            c->first = false;
          }
        }
        json finish = StreamChunk(relay->header, *relay->tokenizer, nullptr, &e.complete(), c->first,
                                  relay->include_usage);
        if (c->tools && c->tools->called() && finish["choices"][0]["finish_reason"] == "stop")
          finish["choices"][0]["finish_reason"] = "tool_calls";
        data += Sse(AtIndex(std::move(finish), index));
        c->first = false;
        if (relay->include_usage && relay->completed == static_cast<int>(relay->choices.size()))
          data += Sse(UsageChunk(relay->header, relay->TotalUsage()));
      }
    }
    // The next worker message is read once this one is on the wire.
    relay->exchange->Send(std::move(data), [call = call.shared_from_this()](bool written) {
      if (written) {
        call->Resume();
      } else {
        call->Cancel();
      }
    });
  };
  sink.on_done = [relay, endpoint](const grpc::Status& status) {
    if (!relay->stream || !relay->started) {
      if (status.ok() && relay->completed == static_cast<int>(relay->choices.size())) {
        json response;
        for (size_t i = 0; i < relay->choices.size(); ++i) {
          ChoiceRelay& c = relay->choices[i];
          json one = FullResponse(relay->header, *relay->tokenizer, relay->echo + c.text, c.token_ids, c.logprobs,
                                  c.complete);
          if (relay->header.echo && relay->header.logprobs)
            PrependPromptLogprobs(one["choices"][0]["logprobs"], *relay->tokenizer, c.prompt_logprobs);
          if (relay->header.prompt_logprobs) {
            json prompt = PromptLogprobs(*relay->tokenizer, c.prompt_logprobs);
            if (endpoint == Endpoint::kChat) {
              if (i == 0) one["prompt_logprobs"] = std::move(prompt);
            } else {
              one["choices"][0]["prompt_logprobs"] = std::move(prompt);
            }
          }
          if (c.tools) {
            c.tools->Feed(c.text);
            c.tools->Finish();
            WithToolCalls(one, *c.tools);
          }
          one["choices"][0]["index"] = i;
          if (i == 0) {
            response = std::move(one);
          } else {
            response["choices"].push_back(std::move(one["choices"][0]));
          }
        }
        response["usage"] = Usage(relay->TotalUsage());
        relay->exchange->Reply(JsonResponse(200, response));
      } else {
        relay->exchange->Reply(ErrorResponse(FromStatus(
            status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "stream ended early") : status, endpoint)));
      }
      return;
    }
    if (!status.ok()) relay->exchange->Send(Sse(ErrorJson(FromStatus(status, endpoint))), nullptr);
    relay->exchange->Send("data: [DONE]\n\n", nullptr);
    relay->exchange->End();
  };

  // Streams start once the request is accepted, so that a refusal is still an
  // HTTP error status rather than an event.
  auto call = service_->StartGenerate(
      parsed.generate, request.Header("authorization"), [] { return std::make_shared<grpc::ClientContext>(); }, std::move(sink));
  if (!call.ok()) {
    const grpc::Status status(static_cast<grpc::StatusCode>(call.status().code()), std::string(call.status().message()));
    return exchange->Reply(ErrorResponse(FromStatus(status, endpoint)));
  }
  exchange->OnClientGone([c = *call] { c->Cancel(); });
}

}  // namespace floe::openai
