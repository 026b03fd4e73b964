// floe generate: one streaming request to a router; text to stdout as it
// arrives, a one-line summary (TTFT, tokens/s) to stderr.
#include <chrono>
#include <cstdio>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"
#include "common/rpc/tls.h"
#include "floe/v1/router.grpc.pb.h"
#include "services/cli/commands.h"
#include "services/cli/finish_reason_name.h"
#include "services/cli/structured_output_flags.h"

namespace floe {
namespace {

}  // namespace

int RunGenerate(int argc, char** argv) {
  std::string addr, prompt, prompt_ids, session, model, stop;
  int max_tokens = 0, top_k = 0, timeout_s = 600, min_tokens = 0;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t seed = -1;
  bool json = false, ignore_eos = false;
  ArgParser parser(
      "floe generate --addr HOST:PORT (--prompt TEXT | --prompt-ids 1,2,3) [options]",
      "Sends one Generate request to a router and streams the text to stdout; a summary line\n"
      "(TTFT, tokens/s, finish reason) goes to stderr. --json prints one object instead.\n"
      "At most one of --json-schema, --json-object, --regex, --choice, --grammar constrains the output\n"
      "(structured outputs: every token is masked to what it allows).");
  parser.AddString("addr", &addr, "router address HOST:PORT");
  parser.AddString("prompt", &prompt, "prompt text");
  parser.AddString("prompt-ids", &prompt_ids, "prompt as comma-separated token ids");
  parser.AddInt("max-tokens", &max_tokens, "tokens to generate (0: server default)");
  parser.AddInt("min-tokens", &min_tokens, "tokens before EOS/stop may end the output");
  parser.AddFloat("temperature", &temperature, "0: greedy");
  parser.AddFloat("top-p", &top_p, "nucleus sampling mass, (0, 1]");
  parser.AddInt("top-k", &top_k, "0: off");
  parser.AddInt64("seed", &seed, "sampling seed (-1: none)");
  parser.AddString("stop", &stop, "stop string (repeat with | between several)");
  parser.AddBool("ignore-eos", &ignore_eos, "keep generating past EOS");
  parser.AddString("session", &session, "agent session id (worker affinity, suffix caching)");
  std::string api_key, request_id;
  parser.AddString("request-id", &request_id, "the request's label in logs and responses (default: the router's)");
  parser.AddString("api-key", &api_key, "sent as \"authorization: Bearer KEY\" (routers with --api-key-file)");
  parser.AddString("model", &model, "model name (default: the served one)");
  TlsOptions tls;
  parser.AddString("tls-ca", &tls.ca_file, "CA (PEM) that verifies the router's certificate: TLS");
  parser.AddString("tls-cert", &tls.cert_file, "client certificate (PEM), for routers that require one (mTLS)");
  parser.AddString("tls-key", &tls.key_file, "private key (PEM) of --tls-cert");
  parser.AddInt("timeout-s", &timeout_s, "deadline of the request");
  parser.AddBool("json", &json, "print {token_ids, text, finish_reason, usage} instead of streaming");
  StructuredOutputFlags structured;
  structured.Register(parser);
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe generate")) return *exit_code;
  if (addr.empty() || (prompt.empty() == prompt_ids.empty())) {
    std::fprintf(stderr, "floe generate: need --addr and exactly one of --prompt / --prompt-ids (see --help)\n");
    return 2;
  }
  floe::v1::GenerateRequest request;
  if (!prompt.empty()) {
    request.set_text(prompt);
  } else {
    for (absl::string_view piece : absl::StrSplit(prompt_ids, ',', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(piece, &id)) {
        std::fprintf(stderr, "floe generate: --prompt-ids: not an integer: %s\n", std::string(piece).c_str());
        return 2;
      }
      request.mutable_token_ids()->add_ids(id);
    }
  }
  request.set_model(model);
  request.set_session_id(session);
  request.set_request_id(request_id);
  auto* sampling = request.mutable_sampling();
  sampling->set_temperature(temperature);
  sampling->set_top_p(top_p);
  sampling->set_top_k(top_k);
  if (seed >= 0) sampling->set_seed(static_cast<uint64_t>(seed));
  auto* stopping = request.mutable_stopping();
  if (max_tokens != 0) stopping->set_max_tokens(max_tokens);
  stopping->set_min_tokens(min_tokens);
  stopping->set_ignore_eos(ignore_eos);
  if (!stop.empty()) {
    for (absl::string_view s : absl::StrSplit(stop, '|')) stopping->add_stop(std::string(s));
  }
  if (absl::Status s = structured.Apply(&request); !s.ok()) {
    std::fprintf(stderr, "floe generate: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  auto credentials = MakeChannelCredentials(tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "floe generate: %s\n", std::string(credentials.status().message()).c_str());
    return 2;
  }
  auto channel = grpc::CreateChannel(addr, *credentials);
  auto stub = floe::v1::Floe::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  const auto start = std::chrono::steady_clock::now();
  auto reader = stub->Generate(&context, request);
  floe::v1::GenerateResponse response;
  std::vector<int32_t> token_ids;
  std::string text;
  floe::v1::Complete complete;
  double ttft_ms = -1;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      if (ttft_ms < 0 && response.chunk().token_ids_size() > 0)
        ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      token_ids.insert(token_ids.end(), response.chunk().token_ids().begin(), response.chunk().token_ids().end());
      text += response.chunk().text();
      if (!json) {
        std::fwrite(response.chunk().text().data(), 1, response.chunk().text().size(), stdout);
        std::fflush(stdout);
      }
    } else if (response.has_complete()) {
      complete = response.complete();
    }
  }
  grpc::Status status = reader->Finish();
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    std::fprintf(stderr, "%sfloe generate: %s: %s\n", json ? "" : "\n",
                 absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())).c_str(), status.error_message().c_str());
    return 1;
  }
  if (json) {
    nlohmann::json out = {{"token_ids", token_ids},
                          {"text", text},
                          {"finish_reason", FinishReasonName(complete.finish_reason())},
                          {"stop_reason", complete.stop_reason()},
                          {"usage",
                           {{"prompt_tokens", complete.usage().prompt_tokens()},
                            {"completion_tokens", complete.usage().completion_tokens()},
                            {"cached_prompt_tokens", complete.usage().cached_prompt_tokens()}}},
                          {"ttft_ms", ttft_ms},
                          {"e2e_ms", total_s * 1000}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    const double decode_s = total_s - ttft_ms / 1000.0;
    const double tokens_per_s = token_ids.size() > 1 && decode_s > 0 ? (token_ids.size() - 1) / decode_s : 0.0;
    std::fprintf(stderr, "\n[floe] %zu tokens, TTFT %.1f ms, %.1f tokens/s, finish: %s, prompt %d tokens (%d cached)\n",
                 token_ids.size(), ttft_ms, tokens_per_s, FinishReasonName(complete.finish_reason()),
                 complete.usage().prompt_tokens(), complete.usage().cached_prompt_tokens());
  }
  return 0;
}

}  // namespace floe
