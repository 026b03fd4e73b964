// OpenAI request bodies -> floe.v1.GenerateRequest: every field maps where
// the engine has it, and every bad one is refused naming OpenAI's `param`.
#include "services/router/openai/openai_request.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 17})", "n"},
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 0})", "n"},
      {Endpoint::kCompletions, R"({"prompt": "x", "best_of": 3})", "best_of"},
      {Endpoint::kCompletions, R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs"},
      {Endpoint::kCompletions, R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": {"1": 500}})", "logit_bias"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": {"x1": 5}})", "logit_bias"},
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
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})", "response_format.type"},
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
  EXPECT_EQ(r.generate.text(), "<s><system>be nice<user>a\nb<assistant>");  // vLLM joins text parts with a newline
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
                                       "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"}}]}],
                         "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}]})",
                     context, &out);
  ASSERT_FALSE(error.has_value()) << error->message;
  EXPECT_EQ(out.generate.text(),
            "role,content,tool_call_id,name,role,content,tool_calls,"
            R"(|[{"type": "function", "function": {"name": "f", "description": "d"}}])"
            // The arguments string arrives parsed (as vLLM passes it), its keys in order.
            R"(|[{"type": "function", "id": "c1", "function": {"name": "f", "arguments": {"z": 1, "a": [2]}}}])");
}

// Structured outputs: every form, on both endpoints. `fields` are body
// fields written as JSON text (their order is the body's).
class StructuredOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto chat = ChatTemplate::FromSource("{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = std::make_unique<ChatTemplate>(std::move(*chat));
    context_.chat_template = chat_.get();
  }

  static std::string Body(Endpoint endpoint, const std::string& fields) {
    return absl::StrCat(endpoint == Endpoint::kChat ? R"({"messages": [{"role": "user", "content": "x"}])"
                                                    : R"({"prompt": "x")",
                        fields.empty() ? "" : ", ", fields, "}");
  }

  // The structured_output both endpoints map `fields` onto (they agree).
  floe::v1::GenerateRequest Accepted(const std::string& fields) {
    floe::v1::GenerateRequest first;
    for (Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
      ParsedRequest out;
      auto error = Parse(endpoint, Body(endpoint, fields), context_, &out);
      EXPECT_FALSE(error.has_value()) << fields << " -> " << error->param << ": " << error->message;
      if (endpoint == Endpoint::kCompletions) first = out.generate;
      EXPECT_EQ(out.generate.has_structured_output(), first.has_structured_output()) << fields;
      EXPECT_EQ(out.generate.structured_output().SerializeAsString(), first.structured_output().SerializeAsString())
          << fields;
    }
    return first;
  }

  // The 400 both endpoints answer `fields` with (they agree).
  ApiError Refused(const std::string& fields) {
    ApiError first;
    for (Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
      ParsedRequest out;
      auto error = Parse(endpoint, Body(endpoint, fields), context_, &out);
      if (!error.has_value()) {
        ADD_FAILURE() << fields << " was accepted";
        return {};
      }
      EXPECT_EQ(error->status, 400) << fields;
      if (endpoint == Endpoint::kCompletions) first = *error;
      EXPECT_EQ(error->param, first.param) << fields;
      EXPECT_EQ(error->message, first.message) << fields;
    }
    return first;
  }

  std::unique_ptr<ChatTemplate> chat_;
  RequestContext context_;
};

TEST_F(StructuredOutputTest, ResponseFormat) {
  EXPECT_FALSE(Accepted(R"("response_format": {"type": "text"})").has_structured_output());
  EXPECT_FALSE(Accepted(R"("response_format": null)").has_structured_output());
  EXPECT_TRUE(Accepted(R"("response_format": {"type": "json_object"})").structured_output().json_object());
  // The schema keeps the client's key order (properties are written in it),
  // compactly serialized.
  const auto g = Accepted(R"("response_format": {"type": "json_schema", "json_schema": {
      "name": "weather_Report-2", "description": "d", "strict": true,
      "schema": {"type": "object", "properties": {"zone": {"type": "string"}, "at": {"type": "integer"}},
                 "required": ["zone"], "additionalProperties": false}}})");
  EXPECT_EQ(g.structured_output().json_schema(),
            R"({"type":"object","properties":{"zone":{"type":"string"},"at":{"type":"integer"}},)"
            R"("required":["zone"],"additionalProperties":false})");
  EXPECT_TRUE(g.structured_output().strict());
  const auto lax = Accepted(R"("response_format": {"type": "json_schema",
      "json_schema": {"name": "n", "schema": {"type": "string"}, "strict": null}})");
  EXPECT_EQ(lax.structured_output().json_schema(), R"({"type":"string"})");
  EXPECT_FALSE(lax.structured_output().strict());
}

TEST_F(StructuredOutputTest, VllmStructuredOutputs) {
  const std::string schema = R"({"type":"object","properties":{"b":{"type":"boolean"},"a":{"type":"null"}}})";
  EXPECT_EQ(Accepted(absl::StrCat(R"("structured_outputs": {"json": )", schema, "}")).structured_output().json_schema(),
            schema);
  // A schema given as text is parsed and written compactly.
  nlohmann::json as_text = nlohmann::json::object();
  as_text["json"] = R"({ "type" : "object",  "properties": {"b": {"type": "boolean"}, "a": {"type": "null"}} })";
  EXPECT_EQ(Accepted(absl::StrCat(R"("structured_outputs": )", as_text.dump())).structured_output().json_schema(),
            schema);
  const auto closed = Accepted(absl::StrCat(R"("structured_outputs": {"json": )", schema,
                                            R"(, "disable_additional_properties": true, "disable_fallback": true,
                                               "disable_any_whitespace": false, "whitespace_pattern": null})"));
  EXPECT_TRUE(closed.structured_output().strict());
  EXPECT_EQ(Accepted(R"("structured_outputs": {"regex": "[0-9]{3}", "json": null})").structured_output().regex(),
            "[0-9]{3}");
  EXPECT_EQ(Accepted(R"("structured_outputs": {"grammar": "root ::= \"a\""})").structured_output().grammar(),
            R"(root ::= "a")");
  const auto choice = Accepted(R"("structured_outputs": {"choice": ["yes", "no", "New York"]})").structured_output();
  ASSERT_EQ(choice.choice().choices_size(), 3);
  EXPECT_EQ(choice.choice().choices(2), "New York");
  EXPECT_TRUE(Accepted(R"("structured_outputs": {"json_object": true, "regex": null})").structured_output().json_object());
  EXPECT_FALSE(Accepted(R"("structured_outputs": null)").has_structured_output());
}

TEST_F(StructuredOutputTest, VllmGuidedFields) {
  EXPECT_EQ(Accepted(R"("guided_json": {"type": "integer"}, "guided_decoding_backend": "xgrammar")")
                .structured_output()
                .json_schema(),
            R"({"type":"integer"})");
  EXPECT_EQ(Accepted(R"("guided_json": "{\"type\": \"integer\"}")").structured_output().json_schema(),
            R"({"type":"integer"})");
  EXPECT_EQ(Accepted(R"("guided_regex": "a|b")").structured_output().regex(), "a|b");
  EXPECT_EQ(Accepted(R"("guided_choice": ["x"])").structured_output().choice().choices(0), "x");
  EXPECT_EQ(Accepted(R"("guided_grammar": "root ::= [a-z]+")").structured_output().grammar(), "root ::= [a-z]+");
  // vLLM's defaults: null fields constrain nothing.
  EXPECT_FALSE(Accepted(R"("guided_json": null, "guided_regex": null, "guided_choice": null, "guided_grammar": null,
                           "guided_decoding_backend": null, "guided_whitespace_pattern": null)")
                   .has_structured_output());
}

TEST_F(StructuredOutputTest, ValuesAtTheirLimitsPass) {
  nlohmann::json fields = nlohmann::json::object();
  fields["guided_choice"] = std::vector<std::string>(256, std::string(1024, 'c'));
  EXPECT_EQ(Accepted(fields.dump().substr(1, fields.dump().size() - 2)).structured_output().choice().choices_size(), 256);
  fields = {{"guided_regex", std::string(4096, 'a')}};
  EXPECT_EQ(Accepted(fields.dump().substr(1, fields.dump().size() - 2)).structured_output().regex().size(), 4096u);
  fields = {{"response_format", {{"type", "json_schema"},
                                 {"json_schema", {{"name", std::string(64, 'n')},
                                                  {"schema", {{"description", std::string(65536 - 18, 'd')}}}}}}}};
  EXPECT_EQ(Accepted(fields.dump().substr(1, fields.dump().size() - 2)).structured_output().json_schema().size(),
            65536u);
}

TEST_F(StructuredOutputTest, EachRefusalNamesItsFieldAndLimit) {
  auto field = [](const char* name, const nlohmann::json& value) {
    const std::string text = nlohmann::json{{name, value}}.dump();
    return text.substr(1, text.size() - 2);
  };
  const std::string long_choices = field("guided_choice", std::vector<std::string>(257, "c"));
  const std::string long_choice = field("guided_choice", {"ok", std::string(1025, 'c')});
  const std::string big_schema =
      field("response_format", {{"type", "json_schema"},
                                {"json_schema", {{"name", "n"}, {"schema", {{"description", std::string(65536, 'd')}}}}}});
  struct Case {
    std::string fields;
    std::string param;
    std::string needle;  // in the message: the limit or what is wrong
  } cases[] = {
      {R"("response_format": "json")", "response_format", "object"},
      {R"("response_format": {"type": "xml"})", "response_format.type", "expected text, json_object or json_schema"},
      {R"("response_format": {})", "response_format.type", "must be a string"},
      {R"("response_format": {"type": "text", "json_schema": {}})", "response_format.json_schema", "unknown field"},
      {R"("response_format": {"type": "json_object", "schema": {}})", "response_format.schema", "unknown field"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema", "required"},
      {R"("response_format": {"type": "json_schema", "json_schema": []})", "response_format.json_schema", "object"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})", "response_format.json_schema.name",
       "required"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "my schema", "schema": {}}})",
       "response_format.json_schema.name", "1 to 64 characters of a-z, A-Z, 0-9, _ and -"},
      {field("response_format", {{"type", "json_schema"}, {"json_schema", {{"name", std::string(65, 'n')}, {"schema", {{"type", "string"}}}}}}),
       "response_format.json_schema.name", "1 to 64"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": ""}})", "response_format.json_schema.name",
       "1 to 64"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})", "response_format.json_schema.schema",
       "required"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": "{}"}})",
       "response_format.json_schema.schema", "must be a JSON Schema object, not a string"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "strict": "yes"}})",
       "response_format.json_schema.strict", "boolean"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "format": 1}})",
       "response_format.json_schema.format", "unknown field"},
      {big_schema, "response_format.json_schema.schema", "65554 bytes; the limit is 65536"},
      {R"("structured_outputs": [])", "structured_outputs", "object"},
      {R"("structured_outputs": {})", "structured_outputs", "sets none; set exactly one of json, regex, choice, grammar, json_object"},
      {R"("structured_outputs": {"json_object": false})", "structured_outputs", "sets none"},
      {R"("structured_outputs": {"regex": "a", "choice": ["a"]})", "structured_outputs",
       "sets regex and choice; set exactly one"},
      {R"("structured_outputs": {"json": "{\"type\": "})", "structured_outputs.json", "not valid JSON"},
      {R"("structured_outputs": {"json": "[1]"})", "structured_outputs.json", "must hold a JSON Schema object"},
      {R"("structured_outputs": {"json": 7})", "structured_outputs.json", "or a string holding one"},
      {R"("structured_outputs": {"regex": 5})", "structured_outputs.regex", "must be a string"},
      {R"("structured_outputs": {"regex": ""})", "structured_outputs.regex", "is empty"},
      {R"("structured_outputs": {"choice": ["a", 1]})", "structured_outputs.choice", "choice[1] must be a string"},
      {R"("structured_outputs": {"choice": []})", "structured_outputs.choice", "holds no choices"},
      {R"("structured_outputs": {"grammar": ""})", "structured_outputs.grammar", "is empty"},
      {R"("structured_outputs": {"json_object": "yes"})", "structured_outputs.json_object", "boolean"},
      {R"("structured_outputs": {"regex": "a", "whitespace_pattern": " "})", "structured_outputs.whitespace_pattern",
       "not supported"},
      {R"("structured_outputs": {"json": {}, "disable_any_whitespace": true})",
       "structured_outputs.disable_any_whitespace", "not supported"},
      {R"("structured_outputs": {"regex": "a", "structural_tag": "{}"})", "structured_outputs.structural_tag",
       "not supported"},
      {R"("structured_outputs": {"regex": "a", "disable_additional_properties": true})",
       "structured_outputs.disable_additional_properties", "json only"},
      {R"("structured_outputs": {"regex": "a", "backend": "xgrammar"})", "structured_outputs.backend", "unknown field"},
      {field("guided_regex", std::string(4097, 'a')), "guided_regex", "4097 bytes; the limit is 4096"},
      {field("guided_grammar", std::string(65537, 'a')), "guided_grammar", "65537 bytes; the limit is 65536"},
      {long_choices, "guided_choice", "257 choices; the limit is 256"},
      {long_choice, "guided_choice", "guided_choice[1] has 1025 bytes; each choice must have 1 to 1024"},
      {R"("guided_choice": ["a", ""])", "guided_choice", "guided_choice[1] has 0 bytes"},
      {R"("guided_choice": "a,b")", "guided_choice", "array of strings"},
      {R"("guided_json": [])", "guided_json", "JSON Schema object"},
      {R"("guided_whitespace_pattern": "[ ]?")", "guided_whitespace_pattern", "not supported"},
      {R"("guided_decoding_backend": 5)", "guided_decoding_backend", "string"},
      {field("guided_decoding_backend", std::string(257, 'b')), "guided_decoding_backend", "the limit is 256"},
      // Two sources of a constraint: the later one is named, with the first.
      {R"("response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex",
       "guided_regex and response_format both constrain the output"},
      {R"("guided_json": {}, "structured_outputs": {"regex": "a"})", "structured_outputs",
       "structured_outputs and guided_json both constrain the output"},
      {R"("guided_choice": ["a"], "guided_grammar": "root ::= \"a\"")", "guided_grammar",
       "guided_grammar and guided_choice"},
  };
  for (const Case& c : cases) {
    const ApiError e = Refused(c.fields);
    EXPECT_EQ(e.param, c.param) << c.fields.substr(0, 200) << " -> " << e.message;
    EXPECT_NE(e.message.find(c.needle), std::string::npos) << c.fields.substr(0, 200) << " -> " << e.message;
    EXPECT_LE(e.message.size(), 1024u);
  }
  // Text (no constraint) beside a constraint is no conflict.
  EXPECT_EQ(Accepted(R"("response_format": {"type": "text"}, "guided_regex": "a")").structured_output().regex(), "a");
}

}  // namespace
}  // namespace floe::openai

namespace floe::openai {
namespace {

// What SDKs send by default (OpenAI's and vLLM's fields that change nothing
// Floe generates): accepted and listed, or refused by name when strict.
TEST(IgnoredFieldsTest, AcceptedAndListedOrRefusedWhenStrict) {
  const json sdk = {{"prompt", "x"},
                    {"store", false},
                    {"metadata", {{"run", "7"}}},
                    {"service_tier", "auto"},
                    {"prompt_cache_key", "k"},
                    {"safety_identifier", "user-1"},
                    {"verbosity", "low"},
                    {"prediction", {{"type", "content"}, {"content", "y"}}},
                    {"modalities", {"text"}},
                    {"priority", 0},
                    {"reasoning_effort", "low"}};
  ParsedRequest r = Ok(Endpoint::kCompletions, sdk);
  // In body order (nlohmann::json writes keys sorted).
  EXPECT_EQ(r.ignored_fields,
            (std::vector<std::string>{"metadata", "modalities", "prediction", "priority", "prompt_cache_key",
                                      "reasoning_effort", "safety_identifier", "service_tier", "store", "verbosity"}));
  EXPECT_EQ(r.generate.text(), "x");
  RequestContext strict;
  strict.strict_fields = true;
  for (const auto& [key, value] : sdk.items()) {
    if (key == "prompt") continue;
    ParsedRequest out;
    const json body = {{"prompt", "x"}, {key, value}};
    auto error = Parse(Endpoint::kCompletions, body.dump(), strict, &out);
    ASSERT_TRUE(error.has_value()) << key;
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->param, key);
    EXPECT_NE(error->message.find("--strict-fields"), std::string::npos) << error->message;
  }
  // Misspellings and unknown names are 400 either way; values asking for
  // what Floe does not do are refused, not ignored.
  struct Case {
    std::string body, param, says;
  } refused[] = {
      {R"({"prompt": "x", "stor": false})", "stor", "unknown field"},
      {R"({"prompt": "x", "modalities": ["text", "audio"]})", "modalities", "only [\"text\"]"},
      {R"({"prompt": "x", "use_beam_search": true})", "use_beam_search", "beam search"},
  };
  for (const Case& c : refused) {
    ParsedRequest out;
    auto error = Parse(Endpoint::kCompletions, c.body, {}, &out);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body;
    EXPECT_NE(error->message.find(c.says), std::string::npos) << error->message;
  }
  EXPECT_EQ(FindIgnoredField("reasoning_effort", Endpoint::kChat), nullptr);  // a template variable there
  EXPECT_NE(FindIgnoredField("store", Endpoint::kChat), nullptr);
  EXPECT_EQ(FindIgnoredField("temprature", Endpoint::kChat), nullptr);
}

TEST(IgnoredFieldsTest, ReasoningEffortIsATemplateVariableInChat) {
  auto chat = ChatTemplate::FromSource(
      "{% for m in messages %}{{ m.content }}{% endfor %}|{{ reasoning_effort | default('medium') }}", "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  RequestContext context;
  context.chat_template = &*chat;
  const json messages = {{{"role", "user"}, {"content", "q"}}};
  EXPECT_EQ(Ok(Endpoint::kChat, {{"messages", messages}}, context).generate.text(), "q|medium");
  EXPECT_EQ(Ok(Endpoint::kChat, {{"messages", messages}, {"reasoning_effort", "high"}}, context).generate.text(),
            "q|high");
  // chat_template_kwargs, set explicitly, wins.
  EXPECT_EQ(Ok(Endpoint::kChat,
               {{"reasoning_effort", "high"}, {"messages", messages},
                {"chat_template_kwargs", {{"reasoning_effort", "low"}}}},
               context)
                .generate.text(),
            "q|low");
  ParsedRequest out;
  auto error = Parse(Endpoint::kChat, json({{"messages", messages}, {"reasoning_effort", 3}}).dump(), context, &out);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "reasoning_effort");
}

}  // namespace
}  // namespace floe::openai

namespace floe::openai {
namespace {

class ToolChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto chat = ChatTemplate::FromSource("{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
    ASSERT_TRUE(chat.ok()) << chat.status();
    template_ = std::make_unique<ChatTemplate>(*std::move(chat));
    context_.chat_template = template_.get();
  }
  static nlohmann::ordered_json Body(const nlohmann::ordered_json& extra) {
    nlohmann::ordered_json body = nlohmann::ordered_json::parse(R"({
      "messages": [{"role": "user", "content": "weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "now"}}]})");
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  std::optional<ApiError> Send(const nlohmann::ordered_json& body, ParsedRequest* out) {
    return Parse(Endpoint::kChat, body.dump(), context_, out);
  }
  std::unique_ptr<ChatTemplate> template_;
  RequestContext context_;
};

TEST_F(ToolChoiceTest, AutoNoneRequiredAndNamed) {
  using ordered = nlohmann::ordered_json;
  ParsedRequest automatic;
  ASSERT_FALSE(Send(Body(ordered::object()), &automatic));
  EXPECT_EQ(automatic.tool_choice, ParsedRequest::ToolChoice::kAuto);
  EXPECT_FALSE(automatic.generate.has_structured_output());
  ParsedRequest none;
  ASSERT_FALSE(Send(Body({{"tool_choice", "none"}}), &none));
  EXPECT_EQ(none.tool_choice, ParsedRequest::ToolChoice::kNone);
  ParsedRequest no_tools;
  ASSERT_FALSE(Parse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}]})", context_, &no_tools));
  EXPECT_EQ(no_tools.tool_choice, ParsedRequest::ToolChoice::kNone);

  // required: an array of calls of the given tools, at least one.
  ParsedRequest required;
  ASSERT_FALSE(Send(Body({{"tool_choice", "required"}}), &required));
  EXPECT_EQ(required.tool_choice, ParsedRequest::ToolChoice::kRequired);
  ASSERT_TRUE(required.generate.structured_output().has_json_schema());
  const auto schema = ordered::parse(required.generate.structured_output().json_schema());
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"], ordered({{"type", "object"}}));
  ParsedRequest one;
  ASSERT_FALSE(Send(Body({{"tool_choice", "required"}, {"parallel_tool_calls", false}}), &one));
  EXPECT_FALSE(one.parallel_tool_calls);
  EXPECT_EQ(ordered::parse(one.generate.structured_output().json_schema())["maxItems"], 1);

  // A named function: its parameters are the output's schema.
  ParsedRequest named;
  ASSERT_FALSE(
      Send(Body({{"tool_choice", ordered::parse(R"({"type": "function", "function": {"name": "get_weather"}})")}}),
           &named));
  EXPECT_EQ(named.tool_choice, ParsedRequest::ToolChoice::kNamed);
  EXPECT_EQ(named.tool_name, "get_weather");
  EXPECT_EQ(ordered::parse(named.generate.structured_output().json_schema())["properties"]["city"]["type"], "string");
}

TEST_F(ToolChoiceTest, RefusalsNameTheirField) {
  struct Case {
    std::string extra, param, says;
  } cases[] = {
      {R"({"tool_choice": "always"})", "tool_choice", "must be"},
      {R"({"tool_choice": {"type": "function", "function": {"name": "fly"}}})", "tool_choice", "not among the tools"},
      {R"({"tool_choice": "required", "response_format": {"type": "json_object"}})", "tool_choice", "cannot be combined"},
      {R"({"tools": [], "tool_choice": "required"})", "tool_choice", "needs tools"},
      {R"({"tools": [{"type": "function", "function": {"name": ""}}]})", "tools[0].function.name", "1 to 64"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})",
       "tools[1].function.name", "twice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": "x"}}]})",
       "tools[0].function.parameters", "JSON Schema object"},
      {R"({"tools": [{"type": "code_interpreter"}]})", "tools[0]", "\"type\": \"function\""},
      {R"({"parallel_tool_calls": "yes"})", "parallel_tool_calls", ""},
  };
  for (const Case& c : cases) {
    ParsedRequest out;
    auto error = Send(Body(nlohmann::ordered_json::parse(c.extra)), &out);
    ASSERT_TRUE(error.has_value()) << c.extra;
    EXPECT_EQ(error->param, c.param) << c.extra << ": " << error->message;
    EXPECT_NE(error->message.find(c.says), std::string::npos) << error->message;
  }
}

TEST(ForcedOutputIdsTest, MapOntoTheRequestBounded) {
  ParsedRequest r = Ok(Endpoint::kCompletions, {{"prompt", "x"}, {"forced_output_ids", {5, 6, 7}}});
  EXPECT_EQ(std::vector<int32_t>(r.generate.forced_output_ids().begin(), r.generate.forced_output_ids().end()),
            (std::vector<int32_t>{5, 6, 7}));
  ParsedRequest out;
  nlohmann::json many = {{"prompt", "x"}, {"forced_output_ids", std::vector<int>(4097, 1)}};
  auto error = Parse(Endpoint::kCompletions, many.dump(), {}, &out);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "forced_output_ids");
}

}  // namespace
}  // namespace floe::openai
