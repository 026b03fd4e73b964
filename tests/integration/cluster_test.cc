// End to end through real processes on loopback: client -> floe-router ->
// floe-worker -> engine -> back, on the tiny checkpoint with the real Llama
// 3.1 tokenizer. Bad input, cancellation, deadlines, overload, worker loss,
// session affinity and drain, each against the running services.
#include <signal.h>
#include <sys/wait.h>

#include <future>
#include <thread>

#include <grpcpp/generic/generic_stub.h>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using floe::v1::GenerateRequest;

GenerateRequest TextRequest(const std::string& text, int max_tokens) {
  GenerateRequest r;
  r.set_text(text);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

// Waits until the worker reports no running request and no KV in use.
bool WorkerIdle(LocalCluster& cluster, int worker, int timeout_ms = 5000) {
  auto stub = cluster.WorkerStub(worker);
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    grpc::ClientContext context;
    floe::v1::LoadReport load;
    if (stub->GetLoad(&context, floe::v1::LoadRequest(), &load).ok() && load.running() == 0 &&
        load.waiting() == 0 && load.kv_usage() == 0.0f)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster(1, {"--max-tokens-limit", "512"}, {"--max-message-bytes", "1048576"});
    ASSERT_TRUE(cluster_->ok());
  }
  static void TearDownTestSuite() { delete cluster_; }
  static LocalCluster* cluster_;
};
LocalCluster* ClusterTest::cluster_ = nullptr;

TEST_F(ClusterTest, StreamsTextThatDetokenizesTheIds) {
  auto stub = cluster_->RouterStub();
  Generation g = Generate(*stub, TextRequest("Hello, Floe! Tell me a story about", 24));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.token_ids.size(), 24u);
  EXPECT_EQ(g.complete.finish_reason(), floe::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(g.complete.usage().completion_tokens(), 24);
  auto tokenizer = Tokenizer::Load(TinyModelDir());
  ASSERT_TRUE(tokenizer.ok());
  auto prompt_ids = (*tokenizer)->Encode("Hello, Floe! Tell me a story about", true);
  EXPECT_EQ(g.complete.usage().prompt_tokens(), static_cast<int>(prompt_ids->size()));
  EXPECT_EQ(g.text, *(*tokenizer)->Decode(g.token_ids, /*skip_special_tokens=*/true));
  EXPECT_GE(g.chunks, 24);
}

TEST_F(ClusterTest, GreedyIsIdenticalAloneAndUnderConcurrency) {
  auto stub = cluster_->RouterStub();
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(TextRequest("Prompt number " + std::to_string(i) + " is here", 16 + i));
  std::vector<Generation> alone;
  for (const auto& r : requests) alone.push_back(Generate(*stub, r));
  std::vector<std::future<Generation>> together;
  for (const auto& r : requests) together.push_back(std::async(std::launch::async, [&, r] { return Generate(*stub, r); }));
  for (size_t i = 0; i < requests.size(); ++i) {
    Generation g = together[i].get();
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    EXPECT_EQ(g.token_ids, alone[i].token_ids) << "request " << i;
    EXPECT_EQ(g.text, alone[i].text) << "request " << i;
  }
}

TEST_F(ClusterTest, SeededSamplingIsReproducible) {
  auto stub = cluster_->RouterStub();
  GenerateRequest r = TextRequest("Once upon a time", 20);
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_top_p(0.9f);
  r.mutable_sampling()->set_seed(42);
  Generation a = Generate(*stub, r), b = Generate(*stub, r);
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.token_ids, b.token_ids);
}

TEST_F(ClusterTest, StopStringEndsTheTextBeforeIt) {
  auto stub = cluster_->RouterStub();
  Generation full = Generate(*stub, TextRequest("The quick brown fox", 40));
  ASSERT_TRUE(full.status.ok());
  ASSERT_GT(full.text.size(), 20u);
  // A stop string taken from the middle of the greedy text.
  std::string stop = full.text.substr(full.text.size() / 2, 3);
  GenerateRequest r = TextRequest("The quick brown fox", 40);
  r.mutable_stopping()->add_stop(stop);
  Generation cut = Generate(*stub, r);
  ASSERT_TRUE(cut.status.ok());
  EXPECT_EQ(cut.complete.finish_reason(), floe::v1::FINISH_REASON_STOP);
  EXPECT_EQ(cut.complete.stop_reason(), stop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_TRUE(WorkerIdle(*cluster_, 0));
}

struct BadCase {
  const char* name;
  std::function<void(GenerateRequest&)> mutate;
  grpc::StatusCode code;
  const char* needle;
};

TEST_F(ClusterTest, BadInputGetsTheRightStatusAndServiceKeepsServing) {
  const std::vector<BadCase> cases = {
      {"empty prompt", [](GenerateRequest& r) { r.set_text(""); }, grpc::StatusCode::INVALID_ARGUMENT, "empty"},
      {"no prompt", [](GenerateRequest& r) { r.clear_prompt(); }, grpc::StatusCode::INVALID_ARGUMENT, "empty"},
      {"prompt over context",
       [](GenerateRequest& r) {
         r.clear_prompt();
         for (int i = 0; i < 1100; ++i) r.mutable_token_ids()->add_ids(100 + i);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "context"},
      {"max_tokens zero", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens"},
      {"max_tokens negative", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(-3); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens"},
      {"max_tokens over limit", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(600); },
       grpc::StatusCode::OUT_OF_RANGE, "max_tokens"},
      {"max_tokens over context", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(5000); },
       grpc::StatusCode::OUT_OF_RANGE, "context"},
      {"token id outside vocabulary",
       [](GenerateRequest& r) {
         r.clear_prompt();
         r.mutable_token_ids()->add_ids(5);
         r.mutable_token_ids()->add_ids(999999);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "token_ids[1]"},
      {"negative token id",
       [](GenerateRequest& r) {
         r.clear_prompt();
         r.mutable_token_ids()->add_ids(-1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "vocabulary"},
      {"temperature below zero", [](GenerateRequest& r) { r.mutable_sampling()->set_temperature(-0.1f); },
       grpc::StatusCode::INVALID_ARGUMENT, "temperature"},
      {"top_p above one", [](GenerateRequest& r) { r.mutable_sampling()->set_top_p(1.5f); },
       grpc::StatusCode::INVALID_ARGUMENT, "top_p"},
      {"top_p zero", [](GenerateRequest& r) { r.mutable_sampling()->set_top_p(0.0f); },
       grpc::StatusCode::INVALID_ARGUMENT, "top_p"},
      {"invalid UTF-8", [](GenerateRequest& r) { r.set_text(std::string("ok \xC3\x28 bad")); },
       grpc::StatusCode::INVALID_ARGUMENT, "UTF-8"},
      {"message over size limit", [](GenerateRequest& r) { r.set_text(std::string(2 << 20, 'a')); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, ""},
      {"unknown model", [](GenerateRequest& r) { r.set_model("gpt-17"); }, grpc::StatusCode::NOT_FOUND, "gpt-17"},
      {"stop string not UTF-8", [](GenerateRequest& r) { r.mutable_stopping()->add_stop(std::string("a\xC3\x28")); },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.stop[0] is not valid UTF-8 (byte offset 1)"},
      {"repetition penalty 1e-45", [](GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(1e-45f); },
       grpc::StatusCode::INVALID_ARGUMENT, "repetition_penalty must be in [0.01, 100]"},
      // Every client string is bounded, and refused without being echoed.
      {"request_id over its limit", [](GenerateRequest& r) { r.set_request_id(std::string(129, 'x')); },
       grpc::StatusCode::INVALID_ARGUMENT, "request_id has 129 bytes; the limit is 128"},
      {"a 600 kB request_id", [](GenerateRequest& r) { r.set_request_id(std::string(600000, 'x')); },
       grpc::StatusCode::INVALID_ARGUMENT, "request_id has 600000 bytes"},
      {"session_id over its limit", [](GenerateRequest& r) { r.set_session_id(std::string(257, 's')); },
       grpc::StatusCode::INVALID_ARGUMENT, "session_id has 257 bytes; the limit is 256"},
      {"namespace over its limit",
       [](GenerateRequest& r) { r.mutable_speculation()->set_namespace_(std::string(257, 'n')); },
       grpc::StatusCode::INVALID_ARGUMENT, "speculation.namespace has 257 bytes; the limit is 256"},
      {"model name over its limit", [](GenerateRequest& r) { r.set_model(std::string(300, 'm')); },
       grpc::StatusCode::INVALID_ARGUMENT, "model has 300 bytes; the limit is 256"},
  };
  auto stub = cluster_->RouterStub();
  for (const BadCase& c : cases) {
    GenerateRequest r = TextRequest("a valid prompt", 4);
    c.mutate(r);
    Generation g = Generate(*stub, r);
    EXPECT_EQ(g.status.error_code(), c.code) << c.name << ": " << g.status.error_message();
    EXPECT_NE(g.status.error_message().find(c.needle), std::string::npos) << c.name << ": " << g.status.error_message();
    EXPECT_LT(g.status.error_message().size(), 1000u) << c.name << ": the message echoes the input";
    EXPECT_TRUE(g.token_ids.empty()) << c.name;
  }
  Generation ok = Generate(*stub, TextRequest("still serving?", 4));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.token_ids.size(), 4u);
}

// Bytes that are not a GenerateRequest: INVALID_ARGUMENT saying so, on both
// Generate methods (gRPC's own answer would be a bare INTERNAL).
TEST_F(ClusterTest, UnparsableRequestIsInvalidArgument) {
  auto channel = grpc::CreateChannel(cluster_->router_address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // Field 1, wire type 7 (no such type): no parser accepts it.
  const std::string bytes("\x0f\xff\xff", 3);
  for (const char* method : {"/floe.v1.Floe/Generate", "/floe.v1.Floe/GenerateUnary"}) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status status) { done.set_value(status); });
    const grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << status.error_message();
    EXPECT_NE(status.error_message().find("not a valid floe.v1.GenerateRequest"), std::string::npos) << method;
  }
  Generation ok = Generate(*cluster_->RouterStub(), TextRequest("still serving?", 4));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

// One rule resolves a request (services/request/): a client that calls the
// worker directly gets the router's answer, status and message alike.
TEST_F(ClusterTest, WorkerAndRouterResolveARequestAlike) {
  const std::vector<std::pair<const char*, std::function<void(GenerateRequest&)>>> cases = {
      {"max_tokens over limit", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(600); }},
      {"max_tokens over context", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(1022); }},
      {"prompt over context", [](GenerateRequest& r) {
         for (int i = 0; i < 1100; ++i) r.mutable_token_ids()->add_ids(100 + i);
       }},
      {"id outside vocabulary", [](GenerateRequest& r) { r.mutable_token_ids()->add_ids(999999); }},
      {"min_tokens over max_tokens", [](GenerateRequest& r) { r.mutable_stopping()->set_min_tokens(9); }},
      {"top_n", [](GenerateRequest& r) { r.mutable_logprobs()->set_top_n(99); }},
      {"top_p", [](GenerateRequest& r) { r.mutable_sampling()->set_top_p(2.0f); }},
  };
  auto router = cluster_->RouterStub();
  auto worker = cluster_->WorkerStub(0);
  for (const auto& [name, mutate] : cases) {
    GenerateRequest r;
    for (int id : {128000, 9906, 1917}) r.mutable_token_ids()->add_ids(id);
    r.mutable_stopping()->set_max_tokens(4);
    mutate(r);
    Generation via_router = Generate(*router, r);
    grpc::ClientContext context;
    auto reader = worker->Generate(&context, r);
    floe::v1::GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    grpc::Status direct = reader->Finish();
    EXPECT_NE(via_router.status.error_code(), grpc::StatusCode::OK) << name;
    EXPECT_EQ(direct.error_code(), via_router.status.error_code()) << name << ": " << direct.error_message();
    EXPECT_EQ(direct.error_message(), via_router.status.error_message()) << name;
  }
  // ModelInfo carries the worker's limits, so the router knew them.
  grpc::ClientContext context;
  floe::v1::ModelInfo info;
  ASSERT_TRUE(worker->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.max_tokens_limit(), 512);
  EXPECT_EQ(info.max_context(), 1024);
}

TEST_F(ClusterTest, ClientCancellationAbortsAndFreesKv) {
  auto stub = cluster_->RouterStub();
  grpc::ClientContext context;
  auto reader = stub->Generate(&context, TextRequest("a long one", 500));
  floe::v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WorkerIdle(*cluster_, 0));
}

// A client's request_id is a label, not a key: another client that sends
// the same id and cancels it aborts only its own request (the probe of
// issue 17 saw the first stream end with FINISH_REASON_ABORT). Both echo
// the label; Worker.Abort (admin) still finds requests by it.
TEST_F(ClusterTest, ASharedRequestIdNeverReachesAnotherClientsRequest) {
  auto stub = cluster_->RouterStub();
  GenerateRequest mine = TextRequest("a long one", 500);
  mine.set_request_id("shared-id");
  grpc::ClientContext first_context;
  auto first = stub->Generate(&first_context, mine);
  floe::v1::GenerateResponse response;
  ASSERT_TRUE(first->Read(&response));
  int first_tokens = response.has_chunk() ? response.chunk().token_ids_size() : 0;
  EXPECT_EQ(response.request_id(), "shared-id");
  // The other client: the same id, cancelled once it runs.
  grpc::ClientContext second_context;
  auto second = stub->Generate(&second_context, mine);
  floe::v1::GenerateResponse theirs;
  ASSERT_TRUE(second->Read(&theirs));
  EXPECT_EQ(theirs.request_id(), "shared-id");
  second_context.TryCancel();
  while (second->Read(&theirs)) {
  }
  EXPECT_EQ(second->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_LT(first_tokens, 500) << "the first request finished before the second was cancelled: nothing was tested";
  floe::v1::FinishReason reason = floe::v1::FINISH_REASON_UNSPECIFIED;
  while (first->Read(&response)) {
    if (response.has_chunk()) first_tokens += response.chunk().token_ids_size();
    if (response.has_complete()) reason = response.complete().finish_reason();
  }
  EXPECT_TRUE(first->Finish().ok());
  EXPECT_EQ(reason, floe::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(first_tokens, 500);
  // Worker.Abort by label reaches requests carrying it.
  grpc::ClientContext third_context;
  auto third = stub->Generate(&third_context, mine);
  ASSERT_TRUE(third->Read(&response));
  grpc::ClientContext abort_context;
  floe::v1::AbortRequest abort;
  abort.set_request_id("shared-id");
  floe::v1::AbortResponse aborted;
  ASSERT_TRUE(cluster_->WorkerStub(0)->Abort(&abort_context, abort, &aborted).ok());
  EXPECT_TRUE(aborted.found());
  reason = floe::v1::FINISH_REASON_UNSPECIFIED;
  while (third->Read(&response)) {
    if (response.has_complete()) reason = response.complete().finish_reason();
  }
  (void)third->Finish();
  EXPECT_EQ(reason, floe::v1::FINISH_REASON_ABORT);
  EXPECT_TRUE(WorkerIdle(*cluster_, 0));
}

TEST_F(ClusterTest, DeadlineAbortsAndFreesKv) {
  auto stub = cluster_->RouterStub();
  Generation g = Generate(*stub, TextRequest("a long one", 500), /*timeout_ms=*/150);
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(g.token_ids.size(), 500u);
  EXPECT_TRUE(WorkerIdle(*cluster_, 0));
}

TEST_F(ClusterTest, TokenizeDetokenizeAndModelInfo) {
  auto stub = cluster_->RouterStub();
  grpc::ClientContext c1;
  floe::v1::TokenizeRequest tr;
  tr.set_text("Hello world");
  floe::v1::TokenizeResponse ids;
  ASSERT_TRUE(stub->Tokenize(&c1, tr, &ids).ok());
  EXPECT_EQ(std::vector<int32_t>(ids.ids().begin(), ids.ids().end()), (std::vector<int32_t>{9906, 1917}));
  grpc::ClientContext c2;
  floe::v1::DetokenizeRequest dr;
  dr.mutable_ids()->CopyFrom(ids.ids());
  floe::v1::DetokenizeResponse text;
  ASSERT_TRUE(stub->Detokenize(&c2, dr, &text).ok());
  EXPECT_EQ(text.text(), "Hello world");
  grpc::ClientContext c3;
  floe::v1::ListModelsResponse models;
  ASSERT_TRUE(stub->ListModels(&c3, floe::v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).vocab_size(), 128256);
  EXPECT_EQ(models.models(0).max_context(), 1024);
  grpc::ClientContext c4;
  floe::v1::GetModelInfoRequest unknown;
  unknown.set_model("nope");
  floe::v1::ModelInfo info;
  EXPECT_EQ(stub->GetModelInfo(&c4, unknown, &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

// "At once": well within a bound generous for a busy host, and that bound far
// below the queue timeout a queued request would wait out.
TEST(ClusterOverloadTest, BeyondTheQueueIsResourceExhaustedAtOnce) {
  LocalCluster cluster(1, {}, {"--max-in-flight", "1", "--max-queued", "0", "--queue-timeout-ms", "60000"});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  grpc::ClientContext long_context;
  auto long_reader = stub->Generate(&long_context, TextRequest("occupy the only slot", 400));
  floe::v1::GenerateResponse response;
  ASSERT_TRUE(long_reader->Read(&response));
  auto start = std::chrono::steady_clock::now();
  Generation rejected = Generate(*stub, TextRequest("one too many", 4));
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << rejected.status.error_message();
  EXPECT_NE(rejected.status.error_message().find("max_in_flight"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  long_context.TryCancel();
  while (long_reader->Read(&response)) {
  }
  long_reader->Finish();
}

TEST(ClusterFaultTest, DeadWorkerIsEjectedAndOthersServe) {
  LocalCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  kill(cluster.worker(0).pid(), SIGKILL);
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = TextRequest("after the crash", 4);
    r.set_session_id("session-" + std::to_string(i));  // spread over both ring positions
    Generation g = Generate(*stub, r);
    EXPECT_TRUE(g.status.ok()) << i << ": " << g.status.error_message();
  }
}

TEST(ClusterAffinityTest, SessionTurnsHitTheirWorkersPrefixCache) {
  LocalCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  for (int s = 0; s < 4; ++s) {
    std::string history = "Session " + std::to_string(s) +
                          " shares a long history so that several KV blocks fill up and are cached.";
    for (int turn = 0; turn < 3; ++turn) {
      GenerateRequest r = TextRequest(history, 8);
      r.set_session_id("agent-" + std::to_string(s));
      Generation g = Generate(*stub, r);
      ASSERT_TRUE(g.status.ok());
      if (turn > 0) EXPECT_GE(g.complete.usage().cached_prompt_tokens(), 16 * turn) << "session " << s << " turn " << turn;
      history += g.text + " and then more text for the next turn.";
    }
  }
}

TEST(ClusterDrainTest, SigtermFinishesInFlightThenExits) {
  LocalCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  grpc::ClientContext context;
  auto reader = stub->Generate(&context, TextRequest("finish me", 60));
  // In flight (its first chunk read) before the signal: a fixed sleep would
  // race a start slowed by a busy host, and the request could be refused.
  floe::v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  int tokens = response.has_chunk() ? response.chunk().token_ids_size() : 0;
  kill(cluster.router().pid(), SIGTERM);
  while (reader->Read(&response)) {
    if (response.has_chunk()) tokens += response.chunk().token_ids_size();
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens, 60);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!cluster.router().Exited() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(cluster.router().Exited());
  EXPECT_TRUE(WIFEXITED(cluster.router().exit_status()));
  EXPECT_EQ(WEXITSTATUS(cluster.router().exit_status()), 0);
}

}  // namespace
}  // namespace floe::testing
