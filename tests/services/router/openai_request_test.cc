// OpenAI request bodies -> floe.v1.GenerateRequest: every field maps where
// the engine has it, and every bad one is refused naming OpenAI's `param`.
#include "services/router/openai/openai_request.h"

#include "common/jinja/chat_template.h"
#include "gtest/gtest.h"

namespace floe::openai {
namespace {

using nlohmann::json;

ParsedRequest Ok(Endpoint endpoint, const json& body, const RequestContext& context = {}) {
  ParsedRequest out;
  auto error = Parse(endpoint, body.dump(), context, &out);
  EXPECT_FALSE(error.has_value()) << body.dump() << " -> " << (error ? error->message : "");
  return out;
}

TEST(OpenAiRequestTest, CompletionFieldsMapOntoTheRequest) {
  ParsedRequest r = Ok(Endpoint::kCompletions,
                       {{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 7}, {"temperature", 0.5},
                        {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"seed", 42}, {"stop", {"a", "b"}},
                        {"presence_penalty", 0.5}, {"frequency_penalty", -0.5}, {"repetition_penalty", 1.1},
                        {"ignore_eos", true}, {"min_tokens", 3}, {"skip_special_tokens", false}, {"logprobs", 2},
                        {"session_id", "s1"}, {"user", "u"}, {"stream", true},
                        {"stream_options", {{"include_usage", true}}}, {"n", 1}, {"echo", false}});
  const auto& g = r.generate;
  EXPECT_EQ(g.model(), "m");
  EXPECT_EQ(g.text(), "hello");
  EXPECT_EQ(g.stopping().max_tokens(), 7);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_EQ(g.sampling().seed(), 42u);
  ASSERT_EQ(g.stopping().stop_size(), 2);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  EXPECT_TRUE(g.stopping().ignore_eos());
  EXPECT_EQ(g.stopping().min_tokens(), 3);
  EXPECT_FALSE(g.skip_special_tokens());
  EXPECT_TRUE(g.logprobs().enabled());
  EXPECT_EQ(g.logprobs().top_n(), 2);
  EXPECT_EQ(g.session_id(), "s1");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiRequestTest, PromptForms) {
  EXPECT_EQ(Ok(Endpoint::kCompletions, {{"prompt", {"one"}}}).generate.text(), "one");
  auto ids = Ok(Endpoint::kCompletions, {{"prompt", {1, 2, 3}}}).generate.token_ids().ids();
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()), (std::vector<int32_t>{1, 2, 3}));
  auto nested = Ok(Endpoint::kCompletions, {{"prompt", {{4, 5}}}}).generate.token_ids().ids();
  EXPECT_EQ(std::vector<int32_t>(nested.begin(), nested.end()), (std::vector<int32_t>{4, 5}));
  // top_k -1 (vLLM's "off") and a null max_tokens are accepted.
  EXPECT_EQ(Ok(Endpoint::kCompletions, {{"prompt", "x"}, {"top_k", -1}, {"max_tokens", nullptr}}).generate.sampling().top_k(), 0);
}

TEST(OpenAiRequestTest, HeadersGiveSessionAndRequestLabel) {
  RequestContext context;
  context.session_header = "from-header";
  context.request_id_header = "trace-1";
  ParsedRequest r = Ok(Endpoint::kCompletions, {{"prompt", "x"}}, context);
  EXPECT_EQ(r.generate.session_id(), "from-header");
  EXPECT_EQ(r.generate.request_id(), "trace-1");
  // The body wins over the header.
  EXPECT_EQ(Ok(Endpoint::kCompletions, {{"prompt", "x"}, {"session_id", "body"}}, context).generate.session_id(), "body");
}

TEST(OpenAiRequestTest, BadValuesNameTheirField) {
  struct Case {
    Endpoint endpoint;
    std::string body;
    std::string param;
  } cases[] = {
      {Endpoint::kCompletions, R"({"prompt": "x", "foo": 1})", "foo"},
      {Endpoint::kCompletions, R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {Endpoint::kCompletions, R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {Endpoint::kCompletions, R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {Endpoint::kCompletions, R"({"prompt": "x", "min_p": 1})", "min_p"},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 2})", "n"},
      {Endpoint::kCompletions, R"({"prompt": "x", "best_of": 3})", "best_of"},
      {Endpoint::kCompletions, R"({"prompt": "x", "echo": true})", "echo"},
      {Endpoint::kCompletions, R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": {"1": 5}})", "logit_bias"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": [1]})", "stop"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", "stop"},
      {Endpoint::kCompletions, R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {Endpoint::kCompletions, R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stream": true, "stream_options": {"bogus": 1}})", "stream_options.bogus"},
      {Endpoint::kCompletions, R"({"prompt": [1, -2]})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": ["a", "b"]})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": {}})", "prompt"},
      {Endpoint::kCompletions, R"({"messages": []})", "messages"},
      {Endpoint::kCompletions, R"({"prompt": "x", "user": 5})", "user"},
      {Endpoint::kChat, R"({"prompt": "x"})", "prompt"},
      {Endpoint::kChat, R"({"messages": "hi"})", "messages"},
      {Endpoint::kChat, R"({"messages": [{"role": "user"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x", "color": "red"}]})", "messages[0].color"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", "response_format"},
  };
  for (const Case& c : cases) {
    ParsedRequest out;
    auto error = Parse(c.endpoint, c.body, {}, &out);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->status, 400) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body << " -> " << error->message;
    EXPECT_FALSE(error->message.empty());
  }
  ParsedRequest out;
  auto not_json = Parse(Endpoint::kCompletions, "{\"prompt\": ", {}, &out);
  ASSERT_TRUE(not_json.has_value());
  EXPECT_NE(not_json->message.find("not valid JSON"), std::string::npos);
  auto not_object = Parse(Endpoint::kCompletions, "[1]", {}, &out);
  ASSERT_TRUE(not_object.has_value());
}

TEST(OpenAiRequestTest, ChatRendersTheTemplateWithoutASecondBos) {
  auto chat = ChatTemplate::FromSource(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  RequestContext context;
  context.chat_template = &*chat;
  ParsedRequest r = Ok(Endpoint::kChat,
                       {{"messages", {{{"role", "developer"}, {"content", "be nice"}},
                                      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}},
                                                                      {{"type", "text"}, {"text", "b"}}}}}}},
                        {"max_completion_tokens", 5}, {"logprobs", true}, {"top_logprobs", 3}},
                       context);
  EXPECT_EQ(r.generate.text(), "<s><system>be nice<user>ab<assistant>");
  EXPECT_FALSE(r.generate.add_special_tokens());
  EXPECT_EQ(r.generate.stopping().max_tokens(), 5);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(Ok(Endpoint::kChat, {{"messages", {{{"role", "user"}, {"content", "q"}}}}, {"add_generation_prompt", false}},
                context).generate.text(),
            "<s><user>q");
  // No template: a clear refusal, not a guess.
  ParsedRequest out;
  auto error = Parse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}]})", {}, &out);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("no chat template"), std::string::npos);
}

// A body of ~160 KB whose field nests 80,000 arrays: once a stack overflow
// in dump() and the copies, now refused at level 64 while parsing.
TEST(OpenAiRequestTest, DeepNestingIsRefusedNamingTheFieldAndTheLimit) {
  auto chat = ChatTemplate::FromSource("{% for m in messages %}{{ m.content }}{% endfor %}{{ tools | tojson }}", "",
                                       "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  RequestContext context;
  context.chat_template = &*chat;
  const std::string deep = std::string(80000, '[') + std::string(80000, ']');
  const std::string user = R"({"role": "user", "content": "hi"})";
  struct Case {
    Endpoint endpoint;
    std::string body;
    std::string param;
  } cases[] = {
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi", "name": )" + deep + "}]}", "messages[0].name"},
      {Endpoint::kChat, R"({"messages": [)" + user + R"(], "tools": )" + deep + "}", "tools"},
      {Endpoint::kChat,
       R"({"messages": [)" + user + R"(, {"role": "assistant", "content": null, "tool_calls": )" + deep + "}]}",
       "messages[1].tool_calls"},
      {Endpoint::kChat, R"({"messages": [)" + user + R"(], "chat_template_kwargs": {"x": )" + deep + "}}",
       "chat_template_kwargs.x"},
      {Endpoint::kCompletions, R"({"prompt": )" + deep + "}", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": "x", "no_such_field": )" + deep + "}", "no_such_field"},
      {Endpoint::kChat, R"({"messages": )" + deep + "}", "messages"},
  };
  for (const Case& c : cases) {
    ParsedRequest out;
    auto error = Parse(c.endpoint, c.body, context, &out);
    ASSERT_TRUE(error.has_value()) << c.param;
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->param, c.param);
    EXPECT_EQ(error->message, c.param + ": JSON nests deeper than 64 levels");
  }
  ParsedRequest out;
  auto root = Parse(Endpoint::kCompletions, deep, context, &out);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->param, "");
  EXPECT_EQ(root->message, "the request body: JSON nests deeper than 64 levels");

  // Deep but within the limit: a tool schema 25 properties (50 levels) down renders.
  std::string schema = R"({"type": "string"})";
  for (int i = 0; i < 25; ++i) schema = R"({"type": "object", "properties": {"p": )" + schema + "}}";
  const std::string tools = R"([{"type": "function", "function": {"name": "f", "parameters": )" + schema + "}}]";
  auto accepted = Parse(Endpoint::kChat, R"({"messages": [)" + user + R"(], "tools": )" + tools + "}", context, &out);
  EXPECT_FALSE(accepted.has_value()) << accepted->message;
  EXPECT_EQ(out.generate.text().rfind("hi[{", 0), 0u) << out.generate.text().substr(0, 64);
}

TEST(OpenAiRequestTest, TemplateKwargsAreBounded) {
  nlohmann::json kwargs = nlohmann::json::object();
  for (int i = 0; i < 65; ++i) kwargs["k" + std::to_string(i)] = i;
  ParsedRequest out;
  auto error = Parse(Endpoint::kChat,
                     json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"chat_template_kwargs", kwargs}}.dump(),
                     {}, &out);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "chat_template_kwargs");
  EXPECT_EQ(error->message, "chat_template_kwargs has 65 keys; the limit is 64");
}

// The chat path keeps the client's key order (the body is parsed into
// ordered_json, never round-tripped through a sorted tree), so a template's
// `tojson` and its loops over a message see what the client wrote.
TEST(OpenAiRequestTest, ChatKeepsTheClientsKeyOrder) {
  auto chat = ChatTemplate::FromSource(
      "{% for m in messages %}{% for k in m %}{{ k }},{% endfor %}{% endfor %}|{{ tools | tojson }}"
      "|{{ messages[1].tool_calls | tojson }}",
      "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  RequestContext context;
  context.chat_template = &*chat;
  ParsedRequest out;
  auto error = Parse(Endpoint::kChat,
                     R"({"messages": [{"role": "tool", "tool_call_id": "c1", "name": "f", "content": "4"},
                                      {"role": "assistant", "tool_calls": [{"type": "function", "id": "c1",
                                       "function": {"name": "f", "arguments": "{}"}}]}],
                         "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}]})",
                     context, &out);
  ASSERT_FALSE(error.has_value()) << error->message;
  EXPECT_EQ(out.generate.text(),
            "role,content,tool_call_id,name,role,content,tool_calls,"
            R"(|[{"type": "function", "function": {"name": "f", "description": "d"}}])"
            R"(|[{"type": "function", "id": "c1", "function": {"name": "f", "arguments": "{}"}}])");
}

}  // namespace
}  // namespace floe::openai
