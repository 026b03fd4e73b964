#include "services/router/openai/openai_frontend.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "services/router/openai/openai_response.h"

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

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One request's relay state; sink callbacks are serialized by GenerateCall.
struct Relay {
  std::shared_ptr<http::Exchange> exchange;
  ResponseHeader header;
  const Tokenizer* tokenizer = nullptr;
  bool stream = false;
  bool include_usage = false;
  bool first = true;
  bool started = false;  // the 200 and the event-stream header went out
  bool completed = false;
  // Non-streamed: the whole answer.
  std::string text;
  std::vector<int32_t> token_ids;
  google::protobuf::RepeatedPtrField<floe::v1::TokenLogprob> logprobs;
  floe::v1::Complete complete;
};

// Response ids: unique per router process, never a client's.
std::string NextId() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t instance = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return absl::StrCat(absl::Hex(instance, absl::kZeroPad16), "-", counter.fetch_add(1));
}

}  // namespace

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

Frontend::Frontend(RouterService* service, const ChatTemplate* chat_template, std::function<bool()> ready)
    : service_(service), chat_template_(chat_template), ready_(std::move(ready)) {}

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
  if (path == "/v1/models") {
    if (request.method != "GET") return not_allowed("GET");
    return Models(exchange);
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
  if (auto info = service_->model_info()) {
    data.push_back({{"id", info->name()},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "floe"},
                    {"max_model_len", info->max_context()},
                    {"vocab_size", info->vocab_size()}});
  }
  exchange->Reply(JsonResponse(200, {{"object", "list"}, {"data", data}}));
}

void Frontend::Generate(Endpoint endpoint, const http::Request& request, std::shared_ptr<http::Exchange> exchange) {
  RequestContext context;
  context.chat_template = chat_template_;
  context.session_header = std::string(request.Header("x-session-id"));
  context.request_id_header = std::string(request.Header("x-request-id"));
  auto relay = std::make_shared<Relay>();
  ParsedRequest parsed;
  if (auto error = Parse(endpoint, request.body, context, &parsed)) return exchange->Reply(ErrorResponse(*error));

  relay->exchange = exchange;
  relay->tokenizer = &service_->tokenizer();
  relay->stream = parsed.stream;
  relay->include_usage = parsed.include_usage;
  relay->header.endpoint = endpoint;
  relay->header.created = UnixNow();
  relay->header.logprobs = parsed.logprobs;
  relay->header.return_token_ids = parsed.return_token_ids;
  relay->header.id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", NextId());
  if (auto info = service_->model_info()) relay->header.model = info->name();

  GenerateCall::Sink sink;
  sink.on_events = [relay](GenerateCall& call, std::vector<GenerateResponse> events) {
    if (!relay->stream) {
      for (const GenerateResponse& e : events) {
        if (e.has_chunk()) {
          relay->text += e.chunk().text();
          relay->token_ids.insert(relay->token_ids.end(), e.chunk().token_ids().begin(), e.chunk().token_ids().end());
          relay->logprobs.MergeFrom(e.chunk().logprobs());
        } else if (e.has_complete()) {
          relay->complete = e.complete();
          relay->completed = true;
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
      if (e.has_chunk()) {
        data += Sse(StreamChunk(relay->header, *relay->tokenizer, &e.chunk(), nullptr, relay->first,
                                relay->include_usage));
        relay->first = false;
      } else if (e.has_complete()) {
        relay->completed = true;
        data += Sse(StreamChunk(relay->header, *relay->tokenizer, nullptr, &e.complete(), relay->first,
                                relay->include_usage));
        relay->first = false;
        if (relay->include_usage) data += Sse(UsageChunk(relay->header, e.complete().usage()));
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
      if (status.ok() && relay->completed) {
        relay->exchange->Reply(JsonResponse(
            200, FullResponse(relay->header, *relay->tokenizer, relay->text, relay->token_ids, relay->logprobs, relay->complete)));
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
