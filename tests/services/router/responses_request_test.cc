// /v1/responses bodies translated to chat bodies (responses_request.h), and
// the answers built from deltas (responses_stream.h): items become the chat
// messages OpenAI's docs pair them with; every refusal names its field; a
// stream's events add up to the whole response.
#include "services/router/openai/responses_request.h"

#include "gtest/gtest.h"
#include "services/router/openai/responses_stream.h"

namespace floe::openai {
namespace {

using nlohmann::ordered_json;

ResponsesRequest Translate(const std::string& body) {
  ResponsesRequest out;
  auto error = ParseResponsesRequest(ordered_json::parse(body), false, &out);
  EXPECT_FALSE(error.has_value()) << (error ? error->message : "");
  return out;
}

std::string Refused(const std::string& body, bool strict = false) {
  ResponsesRequest out;
  auto error = ParseResponsesRequest(ordered_json::parse(body), strict, &out);
  return error ? error->param : "(accepted)";
}

TEST(ResponsesRequestTest, ItemsBecomeChatMessages) {
  const ResponsesRequest r = Translate(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 9, "store": false, "include": [],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true}],
    "input": [
      {"role": "user", "content": "hi"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"},
      {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
      {"type": "reasoning", "summary": []},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}
    ]})");
  const ordered_json want = ordered_json::parse(R"({
    "model": "m", "max_tokens": 9,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}],
    "tool_choice": "auto",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}],
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
                      {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "one"},
      {"role": "tool", "tool_call_id": "c2", "content": [{"type": "input_text", "text": "two"}]}
    ]})");
  EXPECT_EQ(r.chat, want) << r.chat.dump(1);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"store", "include"}));
  EXPECT_EQ(Translate(R"({"input": "x"})").chat["messages"], ordered_json::parse(R"([{"role": "user", "content": "x"}])"));
}

TEST(ResponsesRequestTest, FormatsAndChoices) {
  const ResponsesRequest r = Translate(R"({"input": "x", "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": true}},
    "reasoning": {"effort": "low"}})");
  EXPECT_EQ(r.chat["tool_choice"], ordered_json::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(r.chat["response_format"], ordered_json::parse(
      R"({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": true}})"));
  EXPECT_EQ(r.chat["reasoning_effort"], "low");
  EXPECT_FALSE(Translate(R"({"input": "x", "text": {"format": {"type": "text"}}})").chat.contains("response_format"));
}

TEST(ResponsesRequestTest, RefusalsNameTheField) {
  EXPECT_EQ(Refused(R"({"input": "x", "previous_response_id": "resp_1"})"), "previous_response_id");
  EXPECT_EQ(Refused(R"({"input": "x", "conversation": "conv_1"})"), "conversation");
  EXPECT_EQ(Refused(R"({"input": "x", "store": true})"), "store");
  EXPECT_EQ(Refused(R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(Refused(R"({"input": "x", "truncation": "auto"})"), "truncation");
  EXPECT_EQ(Refused(R"({"input": "x", "prompt": {"id": "p"}})"), "prompt");
  EXPECT_EQ(Refused(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
  EXPECT_EQ(Refused(R"({"input": "x", "tools": [{"type": "function", "name": "f", "bogus": 1}]})"), "tools[0].bogus");
  EXPECT_EQ(Refused(R"({"input": [{"type": "image_generation_call"}]})"), "input[0].type");
  EXPECT_EQ(Refused(R"({"input": [{"type": "function_call", "name": "f"}]})"), "input[0].call_id");
  EXPECT_EQ(Refused(R"({"input": []})"), "input");
  EXPECT_EQ(Refused(R"({"model": "m"})"), "input");
  EXPECT_EQ(Refused(R"({"input": "x", "inptu": 1})"), "inptu");
  EXPECT_EQ(Refused(R"({"input": "x", "metadata": {}})", /*strict=*/true), "metadata");
  EXPECT_EQ(Refused(R"({"input": "x", "metadata": {}})"), "(accepted)");
  ApiError e;
  e.param = "max_tokens";
  EXPECT_EQ(AsResponsesError(e).param, "max_output_tokens");
  e.param = "messages[3].content";
  EXPECT_EQ(AsResponsesError(e).param, "input");
  e.param = "response_format.json_schema";
  EXPECT_EQ(AsResponsesError(e).param, "text.format.json_schema");
}

TEST(ResponsesStreamTest, EventsAddUpToTheWholeResponse) {
  auto ids = [](const char* prefix) { return std::string(prefix) + "1"; };
  floe::v1::Complete complete;
  complete.set_finish_reason(floe::v1::FINISH_REASON_STOP);
  complete.mutable_usage()->set_prompt_tokens(5);
  complete.mutable_usage()->set_completion_tokens(7);
  tools::ToolCallDelta text, call, more;
  text.content = "Hi ";
  call.calls.push_back({0, "call_a", "f", "{\"a\""});
  more.content = "there";
  more.calls.push_back({0, "", "", ": 1}"});

  ResponsesStream streamed({{"id", "resp_1"}}, ids);
  std::vector<ordered_json> events = streamed.Start();
  for (const auto* d : {&text, &call, &more})
    for (ordered_json& e : streamed.Add(*d)) events.push_back(std::move(e));
  for (ordered_json& e : streamed.Finish(complete)) events.push_back(std::move(e));
  std::vector<std::string> types;
  std::string deltas, arguments;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], static_cast<int>(i));
    types.push_back(events[i]["type"]);
    if (types.back() == "response.output_text.delta") deltas += events[i]["delta"].get<std::string>();
    if (types.back() == "response.function_call_arguments.delta") arguments += events[i]["delta"].get<std::string>();
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta", "response.output_item.added",
                       "response.function_call_arguments.delta", "response.output_text.delta",
                       "response.function_call_arguments.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  const ordered_json& out = streamed.response();
  EXPECT_EQ(out["status"], "completed");
  EXPECT_EQ(out["output"][0]["content"][0]["text"], deltas);
  EXPECT_EQ(deltas, "Hi there");
  EXPECT_EQ(out["output"][1]["arguments"], arguments);
  EXPECT_EQ(out["output"][1]["call_id"], "call_a");
  EXPECT_EQ(out["usage"]["total_tokens"], 12);
  EXPECT_EQ(events.back()["response"], out);

  // The whole response: the same builder fed everything at once.
  tools::ToolCallDelta all;
  all.content = "Hi there";
  all.calls.push_back({0, "call_a", "f", "{\"a\": 1}"});
  ResponsesStream whole({{"id", "resp_1"}}, ids);
  whole.Start();
  whole.Add(all);
  whole.Finish(complete);
  EXPECT_EQ(whole.response(), out);

  complete.set_finish_reason(floe::v1::FINISH_REASON_LENGTH);
  ResponsesStream cut({{"id", "resp_2"}}, ids);
  cut.Start();
  EXPECT_EQ(cut.Finish(complete).back()["type"], "response.incomplete");
  EXPECT_EQ(cut.response()["incomplete_details"]["reason"], "max_output_tokens");
}

}  // namespace
}  // namespace floe::openai
