// The router's OpenAI HTTP API through real processes on loopback (tiny
// checkpoint, real Llama 3.1 tokenizer and chat template), with a client
// independent of the server code: the same tokens as gRPC, errors in OpenAI's
// shape, overload, unavailability, hang-ups that abort the worker's request,
// and 256 concurrent streams beside a stalled reader.
#include <sys/resource.h>
#include <sys/wait.h>

#include <fstream>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"
#include "gtest/gtest.h"
#include "tests/common/http/http_test_client.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using nlohmann::json;

std::string HttpAddress(Subprocess& router) {
  for (const std::string& line : router.lines())
    if (line.rfind("http bound to ", 0) == 0) return line.substr(14);
  return "";
}

bool WorkerIdle(LocalCluster& cluster, int timeout_ms = 5000) {
  auto stub = cluster.WorkerStub(0);
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    grpc::ClientContext context;
    floe::v1::LoadReport load;
    if (stub->GetLoad(&context, floe::v1::LoadRequest(), &load).ok() && load.running() == 0 && load.waiting() == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// /proc/<pid>/status field, e.g. "Threads" or "VmRSS" (kB).
long ProcStatus(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

class OpenAiHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster(1, {"--max-tokens-limit", "4096"}, {"--http-port", "0", "--max-in-flight", "512"});
    ASSERT_TRUE(cluster_->ok());
    http_ = new std::string(HttpAddress(cluster_->router()));
    ASSERT_FALSE(http_->empty()) << "the router printed no 'http bound to' line";
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete http_;
  }
  static LocalCluster* cluster_;
  static std::string* http_;
};
LocalCluster* OpenAiHttpTest::cluster_ = nullptr;
std::string* OpenAiHttpTest::http_ = nullptr;

TEST_F(OpenAiHttpTest, SameTokensAsGrpcGreedyAndSeeded) {
  auto stub = cluster_->RouterStub();
  for (const bool seeded : {false, true}) {
    floe::v1::GenerateRequest grpc_request;
    grpc_request.set_text("The capital of France is");
    grpc_request.mutable_stopping()->set_max_tokens(24);
    grpc_request.mutable_stopping()->set_ignore_eos(true);
    json body = {{"prompt", "The capital of France is"}, {"max_tokens", 24}, {"ignore_eos", true},
                 {"return_token_ids", true}, {"temperature", 0}};
    if (seeded) {
      grpc_request.mutable_sampling()->set_temperature(0.9f);
      grpc_request.mutable_sampling()->set_seed(1234);
      body["temperature"] = 0.9;
      body["seed"] = 1234;
    }
    Generation g = Generate(*stub, grpc_request);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    HttpResult r = HttpRequest(*http_, "POST", "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json response = json::parse(r.body);
    EXPECT_EQ(response["choices"][0]["token_ids"].get<std::vector<int32_t>>(), g.token_ids) << "seeded=" << seeded;
    EXPECT_EQ(response["choices"][0]["text"].get<std::string>(), g.text);
    EXPECT_EQ(response["usage"]["completion_tokens"], 24);

    // Streamed: the same tokens, chunk by chunk, then usage and [DONE].
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    SseStream stream(*http_, "/v1/completions", body.dump());
    ASSERT_EQ(stream.status(), 200);
    std::vector<int32_t> ids;
    std::string text, data;
    bool usage = false, done = false;
    while (stream.Next(&data)) {
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      const json event = json::parse(data);
      if (event["choices"].empty()) {
        usage = event["usage"]["completion_tokens"] == 24;
        continue;
      }
      const json& choice = event["choices"][0];
      text += choice["text"].get<std::string>();
      if (choice.contains("token_ids"))
        for (int32_t id : choice["token_ids"]) ids.push_back(id);
    }
    EXPECT_EQ(ids, g.token_ids);
    EXPECT_EQ(text, g.text);
    EXPECT_TRUE(usage);
    EXPECT_TRUE(done);
  }
}

TEST_F(OpenAiHttpTest, EventsArriveAsTokensAreMade) {
  // Not buffered to the end: the first token's event lands long before the last.
  const json body = {{"prompt", "Tick"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}};
  const auto start = std::chrono::steady_clock::now();
  SseStream stream(*http_, "/v1/completions", body.dump());
  ASSERT_EQ(stream.status(), 200);
  std::string data;
  ASSERT_TRUE(stream.Next(&data));
  const auto first = std::chrono::steady_clock::now() - start;
  int events = 1;
  while (stream.Next(&data)) ++events;
  const auto total = std::chrono::steady_clock::now() - start;
  EXPECT_GT(events, 20);
  EXPECT_LT(first * 4, total) << "first event after " << std::chrono::duration<double>(first).count() << " s of "
                              << std::chrono::duration<double>(total).count() << " s";
}

TEST_F(OpenAiHttpTest, BadFieldsAre400NamingTheField) {
  struct Case {
    json body;
    std::string param;
  } cases[] = {
      {{{"prompt", "hi"}, {"temprature", 1}}, "temprature"},
      {{{"prompt", "hi"}, {"temperature", 7}}, "temperature"},
      {{{"prompt", "hi"}, {"top_p", 0}}, "top_p"},
      {{{"prompt", "hi"}, {"n", 17}}, "n"},
      {{{"prompt", "hi"}, {"max_tokens", "ten"}}, "max_tokens"},
      {{{"prompt", "hi"}, {"max_tokens", 1000000}}, "max_tokens"},
      {{{"prompt", "hi"}, {"stop", json::array({"a", 3})}}, "stop"},
      {{{"prompt", json::array({"a", "b"})}}, "prompt"},
      {{{"max_tokens", 3}}, "prompt"},
      {{{"prompt", ""}}, "prompt"},
      {{{"prompt", "hi"}, {"session_id", std::string(300, 's')}}, "session_id"},
      {{{"prompt", "hi"}, {"logprobs", 21}}, "logprobs"},
  };
  for (const Case& c : cases) {
    HttpResult r = HttpRequest(*http_, "POST", "/v1/completions", c.body.dump());
    EXPECT_EQ(r.status, 400) << c.body.dump() << " -> " << r.body;
    const json error = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(error.contains("error")) << r.body;
    EXPECT_EQ(error["error"]["param"], c.param) << r.body;
    EXPECT_EQ(error["error"]["type"], "invalid_request_error");
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty());
  }
  HttpResult not_json = HttpRequest(*http_, "POST", "/v1/chat/completions", "{\"messages\": [");
  EXPECT_EQ(not_json.status, 400);
  HttpResult role = HttpRequest(*http_, "POST", "/v1/chat/completions",
                                R"({"messages": [{"role": "wizard", "content": "hi"}]})");
  EXPECT_EQ(role.status, 400);
  EXPECT_EQ(json::parse(role.body)["error"]["param"], "messages[0].role");
  HttpResult model = HttpRequest(*http_, "POST", "/v1/completions", R"({"prompt": "hi", "model": "gpt-7"})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(json::parse(model.body)["error"]["code"], "model_not_found");
  EXPECT_EQ(HttpRequest(*http_, "GET", "/v1/completions").status, 405);
  EXPECT_EQ(HttpRequest(*http_, "GET", "/v2/nothing").status, 404);
  HttpResult big = HttpRequest(*http_, "POST", "/v1/completions", std::string(8 << 20, ' '));
  EXPECT_TRUE(big.status == 413 || big.status == 0) << big.status;
  // Still serving.
  EXPECT_EQ(HttpRequest(*http_, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})").status, 200);
}

TEST_F(OpenAiHttpTest, ModelsHealthAndReady) {
  HttpResult models = HttpRequest(*http_, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  auto stub = cluster_->RouterStub();
  grpc::ClientContext context;
  floe::v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], info.name());
  EXPECT_EQ(HttpRequest(*http_, "GET", "/health").status, 200);
  EXPECT_EQ(HttpRequest(*http_, "GET", "/ready").status, 200);
}

TEST_F(OpenAiHttpTest, ChatUsesTheModelsTemplate) {
  const json body = {{"messages", json::array({json{{"role", "system"}, {"content", "Be brief."}},
                                               json{{"role", "user"}, {"content", "Hello"}}})},
                     {"max_tokens", 8}, {"ignore_eos", true}, {"return_token_ids", true}};
  HttpResult r = HttpRequest(*http_, "POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json response = json::parse(r.body);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["choices"][0]["message"]["role"], "assistant");
  // The Llama 3.1 template: BOS, two headed turns, the assistant header.
  auto stub = cluster_->RouterStub();
  grpc::ClientContext context;
  floe::v1::TokenizeRequest tokenize;
  tokenize.set_text(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  tokenize.set_add_special_tokens(false);
  floe::v1::TokenizeResponse ids;
  ASSERT_TRUE(stub->Tokenize(&context, tokenize, &ids).ok());
  EXPECT_EQ(response["usage"]["prompt_tokens"], ids.ids_size());
}

// Requests the worker finished as aborted (a hang-up), from its /metrics.
double Aborted(LocalCluster& cluster) {
  auto body = HttpGet(MetricsUrl(cluster.worker(0)));
  if (!body.ok()) return -1;
  return SumByLabels(ParsePrometheusText(*body), "floe_request_success_total", {"finished_reason=\"abort\""});
}

// What SDKs send by default is accepted (200), counted by field on the
// router's /metrics, and changes nothing generated.
TEST_F(OpenAiHttpTest, FieldsFloeIgnoresAreAcceptedAndCounted) {
  auto ignored = [&](const std::string& field) {
    auto body = HttpGet(MetricsUrl(cluster_->router()));
    if (!body.ok()) return -1.0;
    return SumByLabels(ParsePrometheusText(*body), "floe_http_ignored_fields_total", {"field=\"" + field + "\""});
  };
  const double before = std::max(0.0, ignored("store"));
  const json plain = {{"prompt", "The sky is"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  json sdk = plain;
  sdk["store"] = false;
  sdk["metadata"] = {{"agent", "a1"}};
  sdk["service_tier"] = "auto";
  sdk["prompt_cache_key"] = "k";
  sdk["safety_identifier"] = "u1";
  HttpResult a = HttpRequest(*http_, "POST", "/v1/completions", plain.dump());
  HttpResult b = HttpRequest(*http_, "POST", "/v1/completions", sdk.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(json::parse(a.body)["choices"][0]["text"], json::parse(b.body)["choices"][0]["text"]);
  EXPECT_EQ(ignored("store"), before + 1);
  EXPECT_GE(ignored("safety_identifier"), 1);
  // Unknown names are still refused, naming them.
  json typo = plain;
  typo["stroe"] = false;
  HttpResult c = HttpRequest(*http_, "POST", "/v1/completions", typo.dump());
  EXPECT_EQ(c.status, 400);
  EXPECT_EQ(json::parse(c.body)["error"]["param"], "stroe");
}

TEST_F(OpenAiHttpTest, ModelByIdTokenizeAndDetokenize) {
  const json models = json::parse(HttpRequest(*http_, "GET", "/v1/models").body);
  const std::string id = models["data"][0]["id"];
  HttpResult model = HttpRequest(*http_, "GET", "/v1/models/" + id);
  ASSERT_EQ(model.status, 200) << model.body;
  EXPECT_EQ(json::parse(model.body), models["data"][0]);
  HttpResult missing = HttpRequest(*http_, "GET", "/v1/models/gpt-7%2Fturbo");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "model_not_found");
  EXPECT_NE(json::parse(missing.body)["error"]["message"].get<std::string>().find("gpt-7/turbo"), std::string::npos);
  EXPECT_EQ(HttpRequest(*http_, "POST", "/v1/models/" + id).status, 405);

  // A prompt: the ids generation counts (usage.prompt_tokens), with BOS.
  const std::string text = "Tokenize me, twice: tokenize me.";
  HttpResult tokenized = HttpRequest(*http_, "POST", "/tokenize", json({{"model", id}, {"prompt", text}}).dump());
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;
  const json t = json::parse(tokenized.body);
  const std::vector<int32_t> ids = t["tokens"];
  EXPECT_EQ(t["count"], ids.size());
  EXPECT_EQ(t["max_model_len"], models["data"][0]["max_model_len"]);
  EXPECT_TRUE(t["token_strs"].is_null());
  HttpResult completion = HttpRequest(*http_, "POST", "/v1/completions",
                                      json({{"prompt", text}, {"max_tokens", 1}, {"return_token_ids", true}}).dump());
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(json::parse(completion.body)["usage"]["prompt_tokens"], ids.size());
  HttpResult text_back = HttpRequest(*http_, "POST", "/detokenize", json({{"tokens", ids}}).dump());
  ASSERT_EQ(text_back.status, 200) << text_back.body;
  const std::string decoded = json::parse(text_back.body)["prompt"];
  EXPECT_EQ(decoded, "<|begin_of_text|>" + text);  // special tokens written out, as vLLM

  // Messages: rendered as /v1/chat/completions renders them.
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}};
  HttpResult chat_ids = HttpRequest(*http_, "POST", "/tokenize", json({{"messages", messages}}).dump());
  ASSERT_EQ(chat_ids.status, 200) << chat_ids.body;
  HttpResult chat = HttpRequest(*http_, "POST", "/v1/chat/completions",
                                json({{"messages", messages}, {"max_tokens", 1}}).dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(json::parse(chat.body)["usage"]["prompt_tokens"], json::parse(chat_ids.body)["count"]);

  // Refusals name their field.
  HttpResult bad_id = HttpRequest(*http_, "POST", "/detokenize", R"({"tokens": [1, 99999999]})");
  EXPECT_EQ(bad_id.status, 400);
  EXPECT_EQ(json::parse(bad_id.body)["error"]["param"], "tokens");
  HttpResult other = HttpRequest(*http_, "POST", "/tokenize", R"({"prompt": "x", "model": "gpt-7"})");
  EXPECT_EQ(other.status, 404);
  HttpResult extra = HttpRequest(*http_, "POST", "/tokenize", R"({"prompt": "x", "max_tokens": 2})");
  EXPECT_EQ(extra.status, 400);
  EXPECT_EQ(json::parse(extra.body)["error"]["param"], "max_tokens");
  EXPECT_EQ(HttpRequest(*http_, "GET", "/tokenize").status, 405);
}

// Long enough to outlive the test's steps; big events (20 alternatives per
// token) so that a reader that stops reading backs the stream up.
json LongStream(const std::string& prompt) {
  return {{"prompt", prompt}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true}, {"logprobs", 20}};
}

TEST_F(OpenAiHttpTest, HangUpAbortsTheWorkersRequest) {
  const double aborted_before = Aborted(*cluster_);
  {
    SseStream stream(*http_, "/v1/completions", LongStream("Count forever:").dump(), /*receive_buffer_bytes=*/2048);
    ASSERT_EQ(stream.status(), 200);
    std::string data;
    ASSERT_TRUE(stream.Next(&data));
    stream.Close();
  }
  EXPECT_TRUE(WorkerIdle(*cluster_, 5000)) << "the worker still runs the request of a client that hung up";
  EXPECT_TRUE(WaitFor([&] { return Aborted(*cluster_) == aborted_before + 1; }, std::chrono::milliseconds(5000)))
      << "the request ran to its end instead of being aborted";
  // Hang-up before the first token was sent back.
  {
    SseStream stream(*http_, "/v1/completions", LongStream("Count again:").dump());
    stream.Close();
  }
  EXPECT_TRUE(WorkerIdle(*cluster_, 5000));
}

TEST_F(OpenAiHttpTest, ManyConcurrentStreamsBesideAStalledReader) {
  const int router_pid = cluster_->router().pid();
  const long threads_before = ProcStatus(router_pid, "Threads");
  // A reader that never reads, with a tiny receive buffer: its stream backs up
  // to the router and the worker while everyone else streams on.
  SseStream stalled(*http_, "/v1/completions", LongStream("Stall:").dump(), /*receive_buffer_bytes=*/2048);
  ASSERT_EQ(stalled.status(), 200);

  constexpr int kStreams = 256;
  std::atomic<long> peak_threads{0}, peak_rss_kb{0};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      peak_threads = std::max(peak_threads.load(), ProcStatus(router_pid, "Threads"));
      peak_rss_kb = std::max(peak_rss_kb.load(), ProcStatus(router_pid, "VmRSS"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::future<int>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::async(std::launch::async, [i] {
      const json body = {{"messages", json::array({json{{"role", "user"}, {"content", "Request " + std::to_string(i)}}})},
                         {"max_tokens", 16}, {"ignore_eos", true}, {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
      SseStream stream(*http_, "/v1/chat/completions", body.dump(), 0, 120000);
      if (stream.status() != 200) return -stream.status();
      std::string data;
      int completion_tokens = -1;
      bool done = false;
      while (stream.Next(&data)) {
        if (data == "[DONE]") {
          done = true;
          continue;
        }
        const json event = json::parse(data, nullptr, false);
        if (event.contains("usage") && event["usage"].is_object())
          completion_tokens = event["usage"]["completion_tokens"];
      }
      return done ? completion_tokens : -1;
    }));
  }
  int complete = 0;
  for (auto& s : streams) complete += s.get() == 16;
  sampling = false;
  sampler.join();
  EXPECT_EQ(complete, kStreams) << "streams lost";
  std::printf("[openai_http] %d concurrent streams: router threads %ld before, peak %ld; peak RSS %.1f MiB\n",
              kStreams, threads_before, peak_threads.load(), peak_rss_kb.load() / 1024.0);
  // The HTTP front holds no thread per stream: threads stay near the
  // baseline (gRPC's own pollers may add a few).
  EXPECT_LT(peak_threads.load(), threads_before + 32);
  stalled.Close();
  EXPECT_TRUE(WorkerIdle(*cluster_, 10000));
}

TEST(OpenAiHttpOverload, FullRouterAnswers429WithRetryAfter) {
  LocalCluster cluster(1, {"--max-tokens-limit", "4096"},
                       {"--http-port", "0", "--max-in-flight", "1", "--max-queued", "0"});
  ASSERT_TRUE(cluster.ok());
  const std::string http = HttpAddress(cluster.router());
  const json body = {{"prompt", "Busy:"}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true},
                     {"logprobs", 20}};
  // It stops reading after one event, so it stays in flight, backed up.
  SseStream busy(http, "/v1/completions", body.dump(), /*receive_buffer_bytes=*/2048);
  ASSERT_EQ(busy.status(), 200);
  std::string data;
  ASSERT_TRUE(busy.Next(&data));
  HttpResult r = HttpRequest(http, "POST", "/v1/completions", R"({"prompt": "me too", "max_tokens": 2})");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.Header("retry-after"), "1");
  busy.Close();
  EXPECT_TRUE(WaitFor([&] {
    return HttpRequest(http, "POST", "/v1/completions", R"({"prompt": "now", "max_tokens": 2})").status == 200;
  }, std::chrono::milliseconds(5000)));
}

TEST(OpenAiHttpUnavailable, NoWorkerIs503AndNotReady) {
  auto router = Subprocess::Spawn({BinaryPath("floe-router"), "--workers", "127.0.0.1:1", "--tokenizer",
                                   TinyModelDir(), "--port", "0", "--http-port", "0", "--metrics-port", "-1"});
  ASSERT_TRUE(router.ok());
  ASSERT_TRUE((*router)->WaitForLine("router bound to ", std::chrono::seconds(30)).ok());
  const std::string http = HttpAddress(**router);
  EXPECT_EQ(HttpRequest(http, "GET", "/health").status, 200);
  EXPECT_EQ(HttpRequest(http, "GET", "/ready").status, 503);
  HttpResult r = HttpRequest(http, "POST", "/v1/completions", R"({"prompt": "anyone?"})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "service_unavailable");
}

}  // namespace
}  // namespace floe::testing

namespace floe::testing {
namespace {

TEST(OpenAiHttpStartup, TemplateOutsideTheSubsetIsAStartupError) {
  const std::string path = ::testing::TempDir() + "/unsupported.jinja";
  {
    std::ofstream out(path);
    out << "{% for m in messages %}{{ m.content | wordwrap(20) }}{% endfor %}";
  }
  const std::string err = ::testing::TempDir() + "/router.err";
  const std::string command = "timeout 20 '" + BinaryPath("floe-router") + "' --workers 127.0.0.1:1 --tokenizer '" +
                              TinyModelDir() + "' --port 0 --http-port 0 --metrics-port -1 --chat-template '" + path +
                              "' >/dev/null 2>'" + err + "'";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << "the router must refuse to start (124: it started and ran)";
  std::ifstream in(err);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("unsupported filter 'wordwrap' (line 1)"), std::string::npos) << log;
}

}  // namespace
}  // namespace floe::testing
