// vLLM's /tokenize and /detokenize bodies: the prompt and chat forms, their
// defaults (special tokens for a prompt, none for a rendered chat), and each
// refusal naming its field.
#include "services/router/openai/tokenize_request.h"

#include <string>

#include <nlohmann/json.hpp>

#include "common/jinja/chat_template.h"
#include "gtest/gtest.h"

namespace floe::openai {
namespace {

using nlohmann::json;

TEST(TokenizeRequestTest, PromptAndChatForms) {
  auto chat = ChatTemplate::FromSource(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  RequestContext context;
  context.chat_template = &*chat;

  TokenizeRequest prompt;
  ASSERT_FALSE(ParseTokenize(R"({"model": "m", "prompt": "hello"})", context, &prompt).has_value());
  EXPECT_EQ(prompt.model, "m");
  EXPECT_EQ(prompt.text, "hello");
  EXPECT_TRUE(prompt.add_special_tokens);
  TokenizeRequest bare;
  ASSERT_FALSE(ParseTokenize(R"({"prompt": "hello", "add_special_tokens": false})", context, &bare).has_value());
  EXPECT_FALSE(bare.add_special_tokens);
  TokenizeRequest ids;
  ASSERT_FALSE(ParseTokenize(R"({"prompt": [5, 6]})", context, &ids).has_value());
  EXPECT_FALSE(ids.text.has_value());
  EXPECT_EQ(ids.ids, (std::vector<int32_t>{5, 6}));

  TokenizeRequest messages;
  ASSERT_FALSE(ParseTokenize(R"({"messages": [{"role": "user", "content": "q"}], "return_token_strs": false})",
                             context, &messages)
                   .has_value());
  EXPECT_EQ(messages.text, "<s><user>q<assistant>");  // as /v1/chat/completions renders it
  EXPECT_FALSE(messages.add_special_tokens);
  TokenizeRequest no_prompt;
  ASSERT_FALSE(ParseTokenize(R"({"messages": [{"role": "user", "content": "q"}], "add_generation_prompt": false,
                                  "add_special_tokens": true})",
                             context, &no_prompt)
                   .has_value());
  EXPECT_EQ(no_prompt.text, "<s><user>q");
  EXPECT_TRUE(no_prompt.add_special_tokens);

  struct Case {
    std::string body, param, says;
  } refused[] = {
      {R"({})", "prompt", "prompt or messages is required"},
      {R"({"prompt": "a", "messages": []})", "prompt", "not both"},
      {R"({"prompt": "a", "max_tokens": 3})", "max_tokens", "unknown field"},
      {R"({"messages": [{"role": "user", "content": "q"}], "temperature": 1})", "temperature", "unknown field"},
      {R"({"prompt": "a", "return_token_strs": true})", "return_token_strs", "not supported"},
      {R"({"messages": [{"role": "user", "content": "q"}], "continue_final_message": true})",
       "continue_final_message", "not supported"},
      {R"({"prompt": "a", "add_special_tokens": "yes"})", "add_special_tokens", ""},
      {R"({"messages": [{"role": "wizard", "content": "q"}]})", "messages[0].role", ""},
      {R"([1])", "", "JSON object"},
  };
  for (const Case& c : refused) {
    TokenizeRequest out;
    auto error = ParseTokenize(c.body, context, &out);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->param, c.param) << c.body << ": " << error->message;
    EXPECT_NE(error->message.find(c.says), std::string::npos) << error->message;
  }
}

TEST(TokenizeRequestTest, DetokenizeIdsAreBounded) {
  DetokenizeRequest ok;
  ASSERT_FALSE(ParseDetokenize(R"({"model": "m", "tokens": [1, 2, 3]})", &ok).has_value());
  EXPECT_EQ(ok.model, "m");
  EXPECT_EQ(ok.ids, (std::vector<int32_t>{1, 2, 3}));
  json many = {{"tokens", json::array()}};
  for (size_t i = 0; i <= kMaxDetokenizeIds; ++i) many["tokens"].push_back(1);
  struct Case {
    std::string body, param, says;
  } refused[] = {
      {R"({})", "tokens", "required"},
      {R"({"tokens": "abc"})", "tokens", "array"},
      {R"({"tokens": [1, -2]})", "tokens", "tokens[1]"},
      {R"({"tokens": [1], "skip": true})", "skip", "unknown field"},
      {many.dump(), "tokens", "the limit is 262144"},
  };
  for (const Case& c : refused) {
    DetokenizeRequest out;
    auto error = ParseDetokenize(c.body, &out);
    ASSERT_TRUE(error.has_value()) << c.body.substr(0, 80);
    EXPECT_EQ(error->param, c.param) << error->message;
    EXPECT_NE(error->message.find(c.says), std::string::npos) << error->message;
  }
}

}  // namespace
}  // namespace floe::openai
