// WorkerService under internal trust, over real gRPC on loopback: a tiny
// random checkpoint on the CPU backend, served by ServerRunner as the binary
// serves it. With the internal key on, every call the router makes
// (Generate, GetLoad, GetModelInfo) needs the key; Abort needs an admin key,
// else the internal key; without a trust nothing changes. The worker's own
// calls to a suffix cache that requires the key carry it: its Steps are
// served and its responses reach the cache (lifecycle thread).
#include "services/worker/worker_service.h"

#include <unistd.h>

#include <thread>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "common/rpc/server_runner.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_cache_service.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/speculation/make_proposers.h"
#include "tests/services/worker/engine/engine_test_harness.h"
#include "tests/services/worker/structured/structured_test_util.h"

namespace floe {
namespace {

constexpr char kKey[] = "worker-test-internal-key-0123456789";

// The engine tests' tiny random checkpoint, once per suite.
class WorkerServiceTest : public EngineHarness {
 protected:
  static std::shared_ptr<const InternalTrust> Trust(const std::string& key = kKey) {
    auto trust = InternalTrust::FromKey(key);
    EXPECT_TRUE(trust.ok()) << trust.status();
    return *trust;
  }

  // A worker as floe-worker builds one: engine, service, ServerRunner.
  struct Worker {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<WorkerService> service;
    std::unique_ptr<ServerRunner> runner;
    std::unique_ptr<floe::v1::Worker::Stub> stub;
    ~Worker() {
      if (runner) runner->Shutdown(std::chrono::milliseconds(100));
      if (engine) engine->Stop();
    }
  };
  static std::unique_ptr<Worker> StartWorker(std::shared_ptr<const InternalTrust> trust,
                                             const ApiKeys* admin_keys = nullptr,
                                             std::vector<std::unique_ptr<Proposer>> proposers = {},
                                             std::shared_ptr<StructuredOutputCompiler> structured_output = nullptr) {
    auto worker = std::make_unique<Worker>();
    auto backend = CpuBackend::Create(checkpoint_->config(), checkpoint_->weights(), {.num_threads = 1});
    EXPECT_TRUE(backend.ok()) << backend.status();
    EngineOptions options;
    options.max_model_len = 256;
    options.kv_cache_bytes = 8 << 20;
    options.num_speculative_tokens = proposers.empty() ? 0 : 4;
    options.eos_token_ids = {128001, 128009};  // the tiny model's (Llama 3.1's)
    auto engine = Engine::Create(std::move(backend).value(), options, std::move(proposers));
    EXPECT_TRUE(engine.ok()) << engine.status();
    worker->engine = std::move(engine).value();
    worker->service = std::make_unique<WorkerService>(std::move(trust));
    if (admin_keys) worker->service->SetAdminKeys(admin_keys);
    WorkerServiceOptions description;
    description.model_name = "tiny";
    description.limits = {.vocab_size = static_cast<int32_t>(checkpoint_->config().vocab_size),
                          .max_context = worker->engine->max_model_len(),
                          .max_tokens_limit = 64};
    description.structured_output = std::move(structured_output);
    worker->service->AttachEngine(worker->engine.get(), std::move(description));
    auto runner = ServerRunner::Start({}, {worker->service.get()});
    EXPECT_TRUE(runner.ok()) << runner.status();
    worker->runner = std::move(runner).value();
    worker->runner->SetServing(true);
    worker->stub = floe::v1::Worker::NewStub(
        grpc::CreateChannel(worker->runner->address(), grpc::InsecureChannelCredentials()));
    return worker;
  }

  static std::unique_ptr<grpc::ClientContext> Context(const InternalTrust* sender, const std::string& literal = "") {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (sender) sender->Attach(context.get());
    if (!literal.empty()) context->AddMetadata("authorization", literal);
    return context;
  }

  static floe::v1::GenerateRequest Request(const std::string& ns = "", const std::string& salt = "") {
    floe::v1::GenerateRequest request;
    for (int32_t id : {128000, 9906, 11, 1917, 0, 9906, 11, 1917, 0, 9906, 11})
      request.mutable_token_ids()->add_ids(id);
    request.mutable_stopping()->set_max_tokens(12);
    request.mutable_stopping()->set_ignore_eos(true);
    request.mutable_speculation()->set_namespace_(ns);
    request.set_cache_salt(salt);
    return request;
  }

  struct Outcome {
    grpc::Status status;
    int tokens = 0;
    bool complete = false;
    std::vector<int32_t> token_ids;
    floe::v1::FinishReason finish_reason = floe::v1::FINISH_REASON_UNSPECIFIED;
  };
  static Outcome Generate(floe::v1::Worker::Stub& stub, const InternalTrust* sender,
                          const floe::v1::GenerateRequest& request, const std::string& literal = "") {
    auto context = Context(sender, literal);
    auto reader = stub.Generate(context.get(), request);
    Outcome out;
    floe::v1::GenerateResponse response;
    while (reader->Read(&response)) {
      out.tokens += response.chunk().token_ids_size();
      out.token_ids.insert(out.token_ids.end(), response.chunk().token_ids().begin(),
                           response.chunk().token_ids().end());
      out.complete = out.complete || response.has_complete();
      if (response.has_complete()) out.finish_reason = response.complete().finish_reason();
    }
    out.status = reader->Finish();
    return out;
  }

};


TEST_F(WorkerServiceTest, EveryCallTheRouterMakesNeedsTheInternalKey) {
  auto trust = Trust();
  auto worker = StartWorker(trust);
  auto& stub = *worker->stub;

  const Outcome refused = Generate(stub, nullptr, Request());
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(refused.status.error_message().find("Worker.Generate"), std::string::npos)
      << refused.status.error_message();
  EXPECT_EQ(refused.tokens, 0);
  auto other = Trust("some-other-clusters-key-42");
  EXPECT_EQ(Generate(stub, other.get(), Request()).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  floe::v1::LoadReport load;
  grpc::Status s = stub.GetLoad(Context(nullptr).get(), floe::v1::LoadRequest(), &load);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("Worker.GetLoad"), std::string::npos) << s.error_message();
  floe::v1::ModelInfo info;
  s = stub.GetModelInfo(Context(nullptr).get(), floe::v1::GetModelInfoRequest(), &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("Worker.GetModelInfo"), std::string::npos) << s.error_message();
  EXPECT_TRUE(info.name().empty()) << "nothing about the model leaks";

  const Outcome served = Generate(stub, trust.get(), Request());
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, 12);
  EXPECT_TRUE(served.complete);
  EXPECT_TRUE(stub.GetLoad(Context(trust.get()).get(), floe::v1::LoadRequest(), &load).ok());
  ASSERT_TRUE(stub.GetModelInfo(Context(trust.get()).get(), floe::v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.name(), "tiny");

  // Abort: no --admin-key-file, so the internal key.
  floe::v1::AbortRequest abort;
  abort.set_request_id("nobody");
  floe::v1::AbortResponse aborted;
  EXPECT_EQ(stub.Abort(Context(nullptr).get(), abort, &aborted).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub.Abort(Context(trust.get()).get(), abort, &aborted).ok());
}

TEST_F(WorkerServiceTest, AbortNeedsAnAdminKeyWhenTheFileIsGiven) {
  auto keys = ApiKeys::Parse(Sha256Hex("root-key") + " ops admin\n" + Sha256Hex("user-key") + " team-a\n");
  ASSERT_TRUE(keys.ok());
  auto trust = Trust();
  auto worker = StartWorker(trust, &*keys);
  floe::v1::AbortRequest abort;
  abort.set_request_id("nobody");
  floe::v1::AbortResponse aborted;
  EXPECT_TRUE(worker->stub->Abort(Context(nullptr, "Bearer root-key").get(), abort, &aborted).ok());
  EXPECT_EQ(worker->stub->Abort(Context(nullptr, "Bearer user-key").get(), abort, &aborted).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // The internal key is the engine's credential, not an admin's.
  EXPECT_EQ(worker->stub->Abort(Context(trust.get()).get(), abort, &aborted).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // And an admin key opens no engine call.
  EXPECT_EQ(Generate(*worker->stub, nullptr, Request(), "Bearer root-key").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(WorkerServiceTest, WithoutATrustNothingChanges) {
  auto worker = StartWorker(nullptr);
  const Outcome served = Generate(*worker->stub, nullptr, Request());
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, 12);
  floe::v1::ModelInfo info;
  EXPECT_TRUE(worker->stub->GetModelInfo(Context(nullptr).get(), floe::v1::GetModelInfoRequest(), &info).ok());
}

// Structured outputs over gRPC: the worker compiles the constraint against
// its tokenizer and the engine masks every token to it; a constraint that
// does not compile is INVALID_ARGUMENT naming its field; a worker without a
// tokenizer refuses constraints rather than ignore them.
TEST_F(WorkerServiceTest, StructuredOutputsConstrainWhatTheWorkerWrites) {
  const auto vocab = structured_testing::Llama3Vocab();
  ASSERT_NE(vocab, nullptr);
  auto worker = StartWorker(nullptr, nullptr, {}, std::make_shared<StructuredOutputCompiler>(vocab, StructuredOutputOptions{}));
  auto constrained = [](floe::v1::StructuredOutput output, int max_tokens) {
    floe::v1::GenerateRequest request = Request();
    request.mutable_stopping()->set_ignore_eos(false);
    request.mutable_stopping()->set_max_tokens(max_tokens);
    request.mutable_sampling()->set_temperature(1.0f);
    request.mutable_sampling()->set_seed(11);
    *request.mutable_structured_output() = std::move(output);
    return request;
  };
  for (int round = 0; round < 2; ++round) {  // compiled, then from the cache
    const Outcome choice = Generate(*worker->stub, nullptr, constrained(structured_testing::Choice({"yes", "no way"}), 40));
    ASSERT_TRUE(choice.status.ok()) << choice.status.error_message();
    EXPECT_EQ(choice.finish_reason, floe::v1::FINISH_REASON_STOP);
    const std::string text = structured_testing::Spelled(*vocab, choice.token_ids);
    EXPECT_TRUE(text == "yes" || text == "no way") << text;
  }
  const Outcome json = Generate(
      *worker->stub, nullptr,
      constrained(structured_testing::JsonSchema(
                      R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})"),
                  64));
  ASSERT_TRUE(json.status.ok()) << json.status.error_message();
  const std::string document = structured_testing::Spelled(*vocab, json.token_ids);
  if (json.finish_reason == floe::v1::FINISH_REASON_STOP) {
    const auto parsed = nlohmann::json::parse(document, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(parsed.is_discarded()) << document;
    EXPECT_TRUE(parsed.at("ok").is_boolean()) << document;
    EXPECT_EQ(parsed.size(), 1u) << document;
  } else {
    EXPECT_EQ(document.rfind("{", 0), 0u) << document;
  }

  const Outcome bad = Generate(*worker->stub, nullptr,
                               constrained(structured_testing::JsonSchema(R"({"type": "object", "not": {}})"), 8));
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.status.error_message().rfind("structured_output.json_schema: ", 0), 0u) << bad.status.error_message();
  EXPECT_NE(bad.status.error_message().find("'not'"), std::string::npos) << bad.status.error_message();
  EXPECT_EQ(bad.tokens, 0);
  const Outcome bad_regex = Generate(*worker->stub, nullptr, constrained(structured_testing::Regex("(a"), 8));
  EXPECT_EQ(bad_regex.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_regex.status.error_message().rfind("structured_output.regex: ", 0), 0u)
      << bad_regex.status.error_message();

  auto without = StartWorker(nullptr);
  const Outcome refused = Generate(*without->stub, nullptr, constrained(structured_testing::Choice({"yes"}), 8));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.status.error_message().find("tokenizer"), std::string::npos) << refused.status.error_message();
}

// The worker -> suffix-cache leg: the cache requires the key, the worker's
// client sends it on the lifecycle calls (the response is cached) and on
// Step (counted only once authorized).
TEST_F(WorkerServiceTest, ItsSuffixCacheCallsCarryTheKey) {
  auto trust = Trust();
  suffix_cache::SuffixCacheStore store(suffix_cache::StoreOptions{});
  suffix_cache::SuffixCacheService cache(&store, suffix_cache::ServiceLimits{}, trust);
  auto cache_runner = ServerRunner::Start({}, {&cache});
  ASSERT_TRUE(cache_runner.ok()) << cache_runner.status();
  cache.SetAccepting(true);
  auto cache_stub = floe::v1::SuffixCache::NewStub(
      grpc::CreateChannel((*cache_runner)->address(), grpc::InsecureChannelCredentials()));
  auto stats = [&](const InternalTrust* sender, floe::v1::SuffixStats* out) {
    return cache_stub->GetStats(Context(sender).get(), floe::v1::SuffixStatsRequest(), out);
  };

  SpeculationConfig config;
  config.method = "suffix";
  config.num_tokens = 4;
  config.suffix_cache_addresses = {(*cache_runner)->address()};
  config.suffix_cache_deadline_ms = 1000;  // generous: this test is about credentials, not latency
  config.internal_trust = trust;
  auto proposers = MakeProposers(config);
  ASSERT_TRUE(proposers.ok()) << proposers.status();
  {
    auto worker = StartWorker(trust, nullptr, std::move(proposers).value());
    const Outcome served = Generate(*worker->stub, trust.get(), Request("team-a"));
    ASSERT_TRUE(served.status.ok()) << served.status.error_message();
    // EndRequest goes out on the lifecycle thread after the response: wait
    // for it (bounded), the count is what proves the key went with it.
    floe::v1::SuffixStats s;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      ASSERT_TRUE(stats(trust.get(), &s).ok());
      if (s.cached_responses() >= 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(s.cached_responses(), 1) << s.DebugString();
    ASSERT_EQ(s.namespaces_size(), 1);
    EXPECT_EQ(s.namespaces(0).namespace_(), "team-a");
    EXPECT_GT(s.namespaces(0).cached_tokens(), 0);
    EXPECT_GT(s.steps_total(), 0) << "the engine's Steps were accepted";
  }
  floe::v1::SuffixStats s;
  const grpc::Status outside = stats(nullptr, &s);
  EXPECT_EQ(outside.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.namespaces_size(), 0);
  (*cache_runner)->Shutdown(std::chrono::milliseconds(100));
}

}  // namespace
}  // namespace floe
