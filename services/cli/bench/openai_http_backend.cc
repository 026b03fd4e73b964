#include "services/cli/bench/openai_http_backend.h"

#include <chrono>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/http/client.h"

namespace floe::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

// A blocking Beast operation bounded by `timeout_s` (common/http/client.h).
template <typename Start>
beast::error_code Run(asio::io_context& io, beast::tcp_stream& stream, double timeout_s, Start start) {
  return http::RunFor(io, stream,
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(timeout_s)),
                      std::move(start));
}

absl::Status Connect(const std::string& host, const std::string& port, double timeout_s, asio::io_context& io,
                     beast::tcp_stream& stream) {
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(host, port, ec);
  if (!ec) ec = Run(io, stream, timeout_s, [&](auto done) {
    stream.async_connect(endpoints, [done](beast::error_code e, const tcp::endpoint&) { done(e); });
  });
  if (ec) return absl::UnavailableError(absl::StrCat("connect ", host, ":", port, ": ", ec.message()));
  stream.socket().set_option(tcp::no_delay(true), ec);
  return absl::OkStatus();
}

}  // namespace

OpenAiHttpBackend::OpenAiHttpBackend(OpenAiHttpBackendOptions options) : options_(std::move(options)) {
  const size_t colon = options_.addr.rfind(':');
  host_ = options_.addr.substr(0, colon);
  port_ = colon == std::string::npos ? "80" : options_.addr.substr(colon + 1);
}

absl::StatusOr<floe::v1::ModelInfo> OpenAiHttpBackend::GetModelInfo(double timeout_s) {
  asio::io_context io;
  auto stream = std::make_unique<beast::tcp_stream>(io);
  // The server may still be starting: retry the connection until the deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  absl::Status connected;
  while (!(connected = Connect(host_, port_, timeout_s, io, *stream)).ok()) {
    if (std::chrono::steady_clock::now() > deadline) return connected;
    stream = std::make_unique<beast::tcp_stream>(io);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bhttp::request<bhttp::empty_body> request(bhttp::verb::get, "/v1/models", 11);
  request.set(bhttp::field::host, host_);
  if (!options_.api_key.empty()) request.set(bhttp::field::authorization, "Bearer " + options_.api_key);
  beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  beast::error_code ec = Run(io, *stream, timeout_s, [&](auto done) { bhttp::async_write(*stream, request, done); });
  if (!ec) ec = Run(io, *stream, timeout_s, [&](auto done) { bhttp::async_read(*stream, buffer, response, done); });
  if (ec) return absl::UnavailableError(absl::StrCat("GET /v1/models on ", options_.addr, ": ", ec.message()));
  const json body = json::parse(response.body(), nullptr, false);
  if (response.result_int() != 200 || !body.contains("data") || body["data"].empty())
    return absl::UnavailableError(absl::StrCat("GET /v1/models on ", options_.addr, ": HTTP ", response.result_int(),
                                               " ", response.body().substr(0, 200)));
  const json& model = body["data"][0];
  floe::v1::ModelInfo info;
  info.set_name(model.value("id", ""));
  info.set_max_context(model.value("max_model_len", 0));
  info.set_vocab_size(model.value("vocab_size", 0));
  return info;
}

void OpenAiHttpBackend::Send(const TurnRequest& turn, RequestRecord* record, std::vector<int32_t>* output) {
  const auto sent = std::chrono::steady_clock::now();
  auto since_send_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
  };
  auto fail = [&](int code, std::string error) {
    record->status_code = code;
    record->error = std::move(error);
    record->e2e_ms = since_send_ms();
    record->ok = false;
  };
  json body = {{"prompt", turn.prompt},
               {"max_tokens", turn.max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"ignore_eos", options_.ignore_eos},
               {"return_token_ids", true}};
  if (!options_.model.empty()) body["model"] = options_.model;
  if (!turn.session_id.empty()) body["session_id"] = turn.session_id;

  // One deadline for the whole request, as the gRPC backend's.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
  auto left_s = [&] { return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count(); };
  asio::io_context io;
  beast::tcp_stream stream(io);
  if (absl::Status s = Connect(host_, port_, options_.timeout_s, io, stream); !s.ok())
    return fail(14 /*UNAVAILABLE*/, std::string(s.message()));
  bhttp::request<bhttp::string_body> request(bhttp::verb::post, "/v1/completions", 11);
  request.set(bhttp::field::host, host_);
  request.set(bhttp::field::content_type, "application/json");
  if (!options_.api_key.empty()) request.set(bhttp::field::authorization, "Bearer " + options_.api_key);
  request.body() = body.dump();
  request.prepare_payload();
  beast::error_code ec = Run(io, stream, left_s(), [&](auto done) { bhttp::async_write(stream, request, done); });
  if (ec) return fail(14, absl::StrCat("POST /v1/completions: ", ec.message()));

  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  ec = Run(io, stream, left_s(), [&](auto done) { bhttp::async_read_header(stream, buffer, parser, done); });
  if (ec == bhttp::error::need_buffer) ec = {};  // body bytes came with the header
  if (ec) return fail(14, absl::StrCat("reading the response: ", ec.message()));
  const int http_status = parser.get().result_int();
  http::SseParser events;
  bool completed = false;
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") return;
    const json event = json::parse(data, nullptr, false);
    if (event.is_discarded()) return;
    if (event.contains("error")) {
      record->status_code = 13;
      record->error = event["error"].value("message", "error event");
      return;
    }
    if (event.contains("usage") && event["usage"].is_object()) {
      record->usage_prompt_tokens = event["usage"].value("prompt_tokens", 0);
      record->usage_completion_tokens = event["usage"].value("completion_tokens", 0);
      if (event["usage"].contains("prompt_tokens_details"))
        record->usage_cached_tokens = event["usage"]["prompt_tokens_details"].value("cached_tokens", 0);
    }
    if (!event.contains("choices") || event["choices"].empty()) return;
    const json& choice = event["choices"][0];
    if (choice.contains("token_ids")) {
      const auto ids = choice["token_ids"].get<std::vector<int32_t>>();
      const double t = since_send_ms();
      if (!ids.empty() && record->ttft_ms < 0) record->ttft_ms = t;
      if (!ids.empty()) record->chunks.push_back({t, static_cast<int>(ids.size())});
      record->output_tokens += static_cast<int>(ids.size());
      output->insert(output->end(), ids.begin(), ids.end());
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      completed = true;
      record->finish_reason = choice["finish_reason"].get<std::string>();
    }
  };
  std::string error_body;
  while (!parser.is_done()) {
    char chunk[16384];
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    // read_some: return as soon as bytes arrive, so each event is timed when it lands.
    ec = Run(io, stream, left_s(), [&](auto done) { bhttp::async_read_some(stream, buffer, parser, done); });
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec == beast::error::timeout) return fail(4 /*DEADLINE_EXCEEDED*/, "deadline exceeded");
    if (ec) return fail(14, absl::StrCat("reading the stream: ", ec.message()));
    const size_t n = sizeof chunk - parser.get().body().size;
    if (http_status != 200) {
      error_body.append(chunk, n);
      continue;
    }
    events.Feed(std::string_view(chunk, n));
    for (std::string data; events.Next(&data);) on_event(data);
  }
  record->e2e_ms = since_send_ms();
  if (http_status != 200) {
    const json error = json::parse(error_body, nullptr, false);
    const std::string message =
        error.is_object() && error.contains("error") ? error["error"].value("message", error_body) : error_body;
    return fail(http_status == 429 ? 8 : http_status == 503 ? 14 : 3, absl::StrCat("HTTP ", http_status, ": ", message));
  }
  if (record->status_code == 0 && !completed) {
    record->status_code = 13;
    record->error = "stream ended without a finish_reason";
  }
  record->ok = record->status_code == 0;
}

}  // namespace floe::bench
