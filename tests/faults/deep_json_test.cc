// Fault: hostile request bodies against a live router (issue 41, items 1
// and 8).
//
// A ~200 KB body whose field nests 100,000 arrays once overflowed the
// router's stack (nlohmann's dump() and tree copies recurse once per level)
// before the API key was even checked: SIGSEGV, no response, and `floe
// local` down for seconds per request. A router with --api-key-file and its
// HTTP API on loopback, one worker. What a client is promised, with no key
// sent (the body is refused before the key is looked at, as a 400, not a
// crash):
// - the deep body in messages[0].name, tools, an assistant's tool_calls,
//   chat_template_kwargs (chat), prompt and an unknown field (completions)
//   each gets 400 in OpenAI's shape, `param` naming the field and the
//   message naming the field and the 64-level limit;
// - after each, the router process lives, /health answers, and a normal
//   request with the key is served;
// - Detokenize of a million ids, or of ids whose text outgrows the reply,
//   gets INVALID_ARGUMENT naming `ids` and the limit, not gRPC's bare
//   "Sent message larger than max".
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/auth/api_keys.h"
#include "gtest/gtest.h"
#include "tests/common/http/http_test_client.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

using nlohmann::json;

constexpr int kLevels = 100000;  // ~200 KB of brackets
constexpr int kHttpTimeoutMs = 30000;
const char kKey[] = "deep-json-key";

std::string KeyFile() {
  const std::string path = ::testing::TempDir() + "/deep_json_keys.txt";
  std::ofstream out(path);
  out << Sha256Hex(kKey) << " tenant\n";
  return path;
}

std::string HttpAddress(Subprocess& router) {
  for (const std::string& line : router.lines())
    if (line.rfind("http bound to ", 0) == 0) return line.substr(14);
  return "";
}

class DeepJsonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster(1, {}, {"--api-key-file", KeyFile(), "--http-port", "0"});
    ASSERT_TRUE(cluster_->ok());
    http_ = new std::string(HttpAddress(cluster_->router()));
    ASSERT_FALSE(http_->empty()) << "the router printed no 'http bound to' line";
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete http_;
  }

  // The router still runs, answers /health, and serves a request with the key.
  static void ExpectRouterServes(const std::string& after) {
    ASSERT_FALSE(cluster_->router().Exited())
        << "the router died after " << after << ": " << DescribeExit(cluster_->router().exit_status());
    EXPECT_EQ(HttpRequest(*http_, "GET", "/health", "", {}, kHttpTimeoutMs).status, 200) << after;
    const json body = {{"prompt", "Hello"}, {"max_tokens", 2}};
    HttpResult served = HttpRequest(*http_, "POST", "/v1/completions", body.dump(),
                                    {{"Authorization", absl::StrCat("Bearer ", kKey)}}, kHttpTimeoutMs);
    EXPECT_EQ(served.status, 200) << after << ": " << served.body;
  }

  static LocalCluster* cluster_;
  static std::string* http_;
};
LocalCluster* DeepJsonTest::cluster_ = nullptr;
std::string* DeepJsonTest::http_ = nullptr;

TEST_F(DeepJsonTest, DeepBodiesGet400NamingTheFieldAndTheRouterLives) {
  const std::string deep = std::string(kLevels, '[') + std::string(kLevels, ']');
  const std::string user = R"({"role": "user", "content": "hi"})";
  struct Case {
    std::string path;
    std::string body;
    std::string field;
  } cases[] = {
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi", "name": )" + deep + "}]}",
       "messages[0].name"},
      {"/v1/chat/completions", R"({"messages": [)" + user + R"(], "tools": )" + deep + "}", "tools"},
      {"/v1/chat/completions",
       R"({"messages": [)" + user + R"(, {"role": "assistant", "content": null, "tool_calls": )" + deep + "}]}",
       "messages[1].tool_calls"},
      {"/v1/chat/completions", R"({"messages": [)" + user + R"(], "chat_template_kwargs": )" + deep + "}",
       "chat_template_kwargs"},
      {"/v1/completions", R"({"prompt": )" + deep + "}", "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "no_such_field": )" + deep + "}", "no_such_field"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    ASSERT_GE(c.body.size(), 200000u);
    HttpResult r = HttpRequest(*http_, "POST", c.path, c.body, {}, kHttpTimeoutMs);
    ASSERT_EQ(r.status, 400) << (r.status == 0 ? r.error : r.body.substr(0, 512));
    const json error = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << r.body.substr(0, 512);
    EXPECT_EQ(error["error"]["type"], "invalid_request_error");
    EXPECT_EQ(error["error"]["param"], c.field);
    EXPECT_EQ(error["error"]["message"], c.field + ": JSON nests deeper than 64 levels");
    ExpectRouterServes(c.field);
  }
  // The key check is on: the same normal request without it is refused, so
  // the deep bodies above were refused before any key was looked at.
  EXPECT_EQ(HttpRequest(*http_, "POST", "/v1/completions", R"({"prompt": "Hello", "max_tokens": 2})", {},
                        kHttpTimeoutMs)
                .status,
            401);
}

TEST_F(DeepJsonTest, DetokenizeNamesIdsAndTheLimit) {
  auto detokenize = [](const std::vector<int32_t>& ids, floe::v1::DetokenizeResponse* response) {
    auto stub = cluster_->RouterStub();
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kKey));
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    floe::v1::DetokenizeRequest request;
    request.mutable_ids()->Assign(ids.begin(), ids.end());
    return stub->Detokenize(&context, request, response);
  };
  floe::v1::DetokenizeResponse response;
  // A million one-byte ids ("!", id 0): a 1 MB request, over the count.
  grpc::Status million = detokenize(std::vector<int32_t>(1000000, 0), &response);
  EXPECT_EQ(million.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << million.error_message();
  EXPECT_EQ(million.error_message(), "ids has 1000000 ids; the limit is 262144");
  // At the count: served.
  grpc::Status at_limit = detokenize(std::vector<int32_t>(262144, 0), &response);
  ASSERT_TRUE(at_limit.ok()) << at_limit.error_message();
  EXPECT_EQ(response.text(), std::string(262144, '!'));
  // 40,000 ids of Llama 3's 128-space token (58040): 5 MB of text, past the
  // 4 MiB reply.
  grpc::Status wide = detokenize(std::vector<int32_t>(40000, 58040), &response);
  EXPECT_EQ(wide.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << wide.error_message();
  EXPECT_EQ(wide.error_message().rfind("ids decode to 5120000 bytes of text; the reply's limit is ", 0), 0u)
      << wide.error_message();
  ExpectRouterServes("Detokenize");
}

}  // namespace
}  // namespace floe::testing
