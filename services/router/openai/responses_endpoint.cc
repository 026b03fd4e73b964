// POST /v1/responses: the request translated to chat (responses_request.h),
// generated through StartGenerate like every other request, the output read
// for tool calls as chat's is, and answered as responses_stream.h builds it.
#include "absl/strings/str_cat.h"
#include "common/rpc/status_conversion.h"
#include "services/router/openai/openai_frontend.h"
#include "services/router/openai/openai_response.h"
#include "services/router/openai/responses_request.h"
#include "services/router/openai/responses_stream.h"

namespace floe::openai {
namespace {

using floe::v1::GenerateResponse;
using nlohmann::ordered_json;

struct ResponsesRelay {
  std::shared_ptr<http::Exchange> exchange;
  std::unique_ptr<tools::ToolCallStream> tools;
  std::unique_ptr<ResponsesStream> builder;
  bool stream = false;
  bool started = false;
  bool completed = false;
  std::string text;  // non-streamed: the whole output
  floe::v1::Complete complete;

  tools::ToolCallDelta Read(const std::string& piece) {
    if (tools) return tools->Feed(piece);
    tools::ToolCallDelta delta;
    delta.content = piece;
    return delta;
  }
};

// Responses streams name each event (OpenAI sends no [DONE]).
std::string Sse(const std::vector<ordered_json>& events) {
  std::string out;
  for (const ordered_json& e : events)
    absl::StrAppend(&out, "event: ", e["type"].get<std::string>(), "\ndata: ",
                    e.dump(-1, ' ', false, ordered_json::error_handler_t::replace), "\n\n");
  return out;
}

}  // namespace

void Frontend::Responses(const http::Request& request, std::shared_ptr<http::Exchange> exchange) {
  ordered_json body;
  if (auto error = ParseBody(request.body, &body)) return exchange->Reply(ErrorResponse(*error));
  ResponsesRequest responses;
  if (auto error = ParseResponsesRequest(body, options_.strict_fields, &responses))
    return exchange->Reply(ErrorResponse(*error));
  ParsedRequest parsed;
  if (auto error = ParseFields(Endpoint::kChat, responses.chat, Context(request), &parsed))
    return exchange->Reply(ErrorResponse(AsResponsesError(*error)));
  ReportIgnored(responses.ignored);
  ReportIgnored(parsed.ignored_fields);

  auto relay = std::make_shared<ResponsesRelay>();
  relay->exchange = exchange;
  relay->stream = parsed.stream;
  relay->tools = ToolReader(parsed, "call_");
  ordered_json fixed = {{"id", absl::StrCat("resp_", NextId())},
                        {"created_at", UnixNow()},
                        {"model", parsed.model}};
  if (auto info = service_->model_info()) fixed["model"] = info->name();
  fixed["instructions"] = responses.instructions;
  fixed["tools"] = responses.tools;
  fixed["tool_choice"] = responses.tool_choice;
  fixed["parallel_tool_calls"] = responses.parallel_tool_calls;
  fixed["temperature"] = responses.temperature;
  fixed["top_p"] = responses.top_p;
  fixed["max_output_tokens"] = responses.max_output_tokens;
  fixed["text"] = responses.text;
  fixed["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  fixed["truncation"] = "disabled";
  fixed["store"] = false;
  fixed["previous_response_id"] = nullptr;
  fixed["metadata"] = ordered_json::object();
  relay->builder = std::make_unique<ResponsesStream>(
      std::move(fixed), [](const char* prefix) { return absl::StrCat(prefix, NextId()); });

  GenerateCall::Sink sink;
  sink.on_events = [relay](GenerateCall& call, std::vector<GenerateResponse> events) {
    if (!relay->stream) {
      for (const GenerateResponse& e : events) {
        if (e.has_chunk()) relay->text += e.chunk().text();
        if (e.has_complete()) {
          relay->complete = e.complete();
          relay->completed = true;
        }
      }
      call.Resume();
      return;
    }
    std::string data;
    if (!relay->started) {
      // As chat: the stream starts with the first event, so that a refusal
      // before it is still an HTTP status.
      relay->started = true;
      relay->exchange->StartStream(200, "text/event-stream");
      data += Sse(relay->builder->Start());
    }
    for (const GenerateResponse& e : events) {
      if (e.has_chunk()) data += Sse(relay->builder->Add(relay->Read(e.chunk().text())));
      if (e.has_complete()) {
        relay->completed = true;
        if (relay->tools) data += Sse(relay->builder->Add(relay->tools->Finish()));
        data += Sse(relay->builder->Finish(e.complete()));
      }
    }
    relay->exchange->Send(std::move(data), [call = call.shared_from_this()](bool written) {
      if (written) {
        call->Resume();
      } else {
        call->Cancel();
      }
    });
  };
  sink.on_done = [relay](const grpc::Status& status) {
    if (!relay->stream || !relay->started) {
      if (status.ok() && relay->completed) {
        ResponsesStream& b = *relay->builder;
        b.Start();
        b.Add(relay->Read(relay->text));
        if (relay->tools) b.Add(relay->tools->Finish());
        b.Finish(relay->complete);
        http::Response r;
        r.status = 200;
        r.body = b.response().dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        relay->exchange->Reply(std::move(r));
      } else {
        relay->exchange->Reply(ErrorResponse(FromStatus(
            status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "stream ended early") : status, Endpoint::kChat)));
      }
      return;
    }
    if (!status.ok()) {
      const ApiError e = FromStatus(status, Endpoint::kChat);
      ordered_json error = {{"type", "error"},
                            {"code", e.code.empty() ? ordered_json(nullptr) : ordered_json(e.code)},
                            {"message", e.message},
                            {"param", e.param.empty() ? ordered_json(nullptr) : ordered_json(e.param)}};
      relay->exchange->Send(Sse({error}), nullptr);
    }
    relay->exchange->End();
  };

  auto call = service_->StartGenerate(
      parsed.generate, request.Header("authorization"), [] { return std::make_shared<grpc::ClientContext>(); },
      std::move(sink));
  if (!call.ok()) {
    const grpc::Status status(static_cast<grpc::StatusCode>(call.status().code()), std::string(call.status().message()));
    return exchange->Reply(ErrorResponse(FromStatus(status, Endpoint::kChat)));
  }
  exchange->OnClientGone([c = *call] { c->Cancel(); });
}

}  // namespace floe::openai
