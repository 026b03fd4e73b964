// Chats over gRPC (GenerateRequest.chat) through real processes: the router
// renders them with the model's chat template as /v1/chat/completions does
// and reads the output for tool calls, so a gRPC client gets content and
// tool_calls (streamed deltas and GenerateUnary's whole calls) and
// FINISH_REASON_TOOL_CALLS; `n` gives one result per choice; a bad chat is
// INVALID_ARGUMENT naming its field. The model's text is set by forced
// decoding (a hermes call, tokenized by the router's Tokenize).
#include <map>

#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using floe::v1::GenerateRequest;
using floe::v1::GenerateResponse;

constexpr int32_t kEndOfTurn = 128009;  // <|eot_id|>

std::vector<int32_t> Tokens(floe::v1::Floe::Stub& stub, const std::string& text) {
  grpc::ClientContext context;
  floe::v1::TokenizeRequest request;
  request.set_text(text);
  floe::v1::TokenizeResponse response;
  EXPECT_TRUE(stub.Tokenize(&context, request, &response).ok());
  std::vector<int32_t> ids(response.ids().begin(), response.ids().end());
  ids.push_back(kEndOfTurn);
  return ids;
}

GenerateRequest Chat(const std::vector<int32_t>& forced) {
  GenerateRequest r;
  r.mutable_chat()->set_messages_json(R"([{"role": "user", "content": "Weather in Paris?"}])");
  r.mutable_chat()->set_tools_json(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  r.mutable_stopping()->set_max_tokens(static_cast<int32_t>(forced.size()) + 4);
  r.mutable_forced_output_ids()->Assign(forced.begin(), forced.end());
  return r;
}

struct Streamed {
  grpc::Status status;
  std::string content;
  std::map<int, floe::v1::ToolCall> calls;
  floe::v1::Complete complete;
};

Streamed Stream(floe::v1::Floe::Stub& stub, const GenerateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&context, request);
  Streamed out;
  GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_complete()) out.complete = response.complete();
    if (!response.has_chunk()) continue;
    out.content += response.chunk().text();
    for (const floe::v1::ToolCallDelta& d : response.chunk().tool_calls()) {
      floe::v1::ToolCall& call = out.calls[d.index()];
      if (!d.id().empty()) {
        EXPECT_TRUE(call.id().empty()) << "call announced twice";
        call.set_id(d.id());
        call.set_name(d.name());
      }
      call.mutable_arguments()->append(d.arguments());
    }
  }
  out.status = reader->Finish();
  return out;
}

TEST(GrpcChatTest, ToolCallsComeBackStreamedAndWhole) {
  LocalCluster cluster(1, {"--benchmark-forced-decoding", "--speculative", "off"}, {"--tool-call-parser", "hermes"});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  const std::vector<int32_t> forced =
      Tokens(*stub, "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                    "</tool_call>");

  const Streamed streamed = Stream(*stub, Chat(forced));
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  EXPECT_EQ(streamed.content, "Let me check.");
  ASSERT_EQ(streamed.calls.size(), 1u);
  EXPECT_EQ(streamed.calls.at(0).name(), "get_weather");
  EXPECT_EQ(streamed.calls.at(0).arguments(), R"({"city": "Paris"})");
  EXPECT_EQ(streamed.calls.at(0).id().rfind("call_", 0), 0u) << streamed.calls.at(0).id();
  EXPECT_EQ(streamed.complete.finish_reason(), floe::v1::FINISH_REASON_TOOL_CALLS);

  grpc::ClientContext context;
  floe::v1::GenerateResult whole;
  ASSERT_TRUE(stub->GenerateUnary(&context, Chat(forced), &whole).ok());
  EXPECT_EQ(whole.text(), "Let me check.");
  ASSERT_EQ(whole.tool_calls_size(), 1);
  EXPECT_EQ(whole.tool_calls(0).name(), "get_weather");
  EXPECT_EQ(whole.tool_calls(0).arguments(), R"({"city": "Paris"})");
  EXPECT_EQ(whole.complete().finish_reason(), floe::v1::FINISH_REASON_TOOL_CALLS);

  // tool_choice none: the same output is text.
  GenerateRequest none = Chat(forced);
  none.mutable_chat()->set_tool_choice_json(R"("none")");
  const Streamed text = Stream(*stub, none);
  ASSERT_TRUE(text.status.ok());
  EXPECT_TRUE(text.calls.empty());
  EXPECT_NE(text.content.find("<tool_call>"), std::string::npos);
  EXPECT_EQ(text.complete.finish_reason(), floe::v1::FINISH_REASON_STOP);
}

TEST(GrpcChatTest, ChoicesAndRefusals) {
  LocalCluster cluster(1, {"--speculative", "off"});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();

  GenerateRequest request;
  request.mutable_chat()->set_messages_json(R"([{"role": "user", "content": "Tell me a story."}])");
  request.set_n(3);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(5);
  request.mutable_stopping()->set_max_tokens(6);
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  floe::v1::GenerateResult result;
  ASSERT_TRUE(stub->GenerateUnary(&context, request, &result).ok());
  ASSERT_EQ(result.choices_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(result.choices(i).index(), i);
    EXPECT_EQ(result.choices(i).token_ids_size(), 6);
    EXPECT_EQ(result.choices(i).complete().usage().completion_tokens(), 6);
  }
  EXPECT_EQ(result.text(), result.choices(0).text());

  auto refused = [&](GenerateRequest r, const std::string& field) {
    Generation g = Generate(*stub, r);
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(g.status.error_message().find(field), std::string::npos) << g.status.error_message();
  };
  GenerateRequest bad;
  bad.mutable_chat()->set_messages_json("[{\"role\": \"user\", \"content\": ");
  refused(bad, "chat.messages_json");
  bad.mutable_chat()->set_messages_json(R"([{"role": "wizard", "content": "x"}])");
  refused(bad, "chat.messages[0].role");
  bad.mutable_chat()->set_messages_json(R"([{"role": "user", "content": "x"}])");
  bad.set_text("and a prompt");
  refused(bad, "chat is set beside");
  bad.clear_text();
  bad.mutable_chat()->set_tools_json(R"([{"type": "function", "function": {"name": ""}}])");
  refused(bad, "chat.tools[0]");
  bad.mutable_chat()->clear_tools_json();
  bad.set_n(17);
  refused(bad, "n must be in [1, 16]");
}

}  // namespace
}  // namespace floe::testing
