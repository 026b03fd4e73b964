// Tool-call parsing, format by format, on each format's documented shapes:
// the whole output's content and calls, and the same output streamed in
// pieces split at every byte boundary (and byte by byte), whose deltas must
// add up to exactly the whole. Malformed calls stay text.
#include "services/router/tools/tool_call_parser.h"

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "services/router/tools/pythonic_calls.h"
#include "services/router/tools/tool_call_stream.h"

namespace floe::tools {
namespace {

using nlohmann::json;

struct Whole {
  std::string content;
  std::vector<ReportedCall> calls;
};

std::function<std::string()> Ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call-" + std::to_string((*n)++); };
}

Whole Parse(const ToolCallFormat& format, const std::string& output, const std::string& name = "",
            bool parallel = true) {
  ToolCallStream stream(format, name, parallel, Ids());
  stream.Feed(output);
  stream.Finish();
  return {stream.content(), stream.calls()};
}

// The deltas of `pieces`, added up.
Whole Streamed(const ToolCallFormat& format, const std::vector<std::string>& pieces, const std::string& name = "") {
  ToolCallStream stream(format, name, true, Ids());
  Whole out;
  std::map<int, ReportedCall> calls;
  auto add = [&](const ToolCallDelta& d) {
    out.content += d.content;
    for (const ToolCallDelta::Call& c : d.calls) {
      ReportedCall& call = calls[c.index];
      if (!c.id.empty()) {
        EXPECT_TRUE(call.id.empty()) << "call " << c.index << " announced twice";
        call.id = c.id;
        call.name = c.name;
      }
      EXPECT_FALSE(call.id.empty()) << "arguments before the call's id and name";
      call.arguments += c.arguments;
    }
  };
  for (const std::string& piece : pieces) add(stream.Feed(piece));
  add(stream.Finish());
  for (auto& [index, call] : calls) out.calls.push_back(call);
  return out;
}

void ExpectSame(const Whole& got, const Whole& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << where;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].id, want.calls[i].id) << where;
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << where;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << where;
  }
}

// The whole output as expected, and every split into two and three pieces
// (and byte by byte) streaming to the same.
void Check(const ToolCallFormat& format, const std::string& output, const std::string& content,
           const std::vector<std::pair<std::string, std::string>>& calls, const std::string& name = "") {
  SCOPED_TRACE(std::string(format.name) + ": " + output);
  const Whole whole = Parse(format, output, name);
  EXPECT_EQ(whole.content, content);
  ASSERT_EQ(whole.calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(whole.calls[i].name, calls[i].first);
    EXPECT_EQ(whole.calls[i].arguments, calls[i].second);
    EXPECT_TRUE(json::accept(whole.calls[i].arguments)) << whole.calls[i].arguments;
  }
  for (size_t a = 0; a <= output.size(); ++a) {
    ExpectSame(Streamed(format, {output.substr(0, a), output.substr(a)}, name), whole, "split at " + std::to_string(a));
    for (size_t b = a; b <= output.size() && output.size() < 160; b += 7)
      ExpectSame(Streamed(format, {output.substr(0, a), output.substr(a, b - a), output.substr(b)}, name), whole,
                 "split at " + std::to_string(a) + ", " + std::to_string(b));
  }
  std::vector<std::string> bytes;
  for (char c : output) bytes.emplace_back(1, c);
  ExpectSame(Streamed(format, bytes, name), whole, "byte by byte");
}

const ToolCallFormat& Hermes() { return *FindFormat("hermes"); }
const ToolCallFormat& Llama3() { return *FindFormat("llama3_json"); }
const ToolCallFormat& Pythonic() { return *FindFormat("pythonic"); }
const ToolCallFormat& Mistral() { return *FindFormat("mistral"); }
const ToolCallFormat& DeepSeekV3() { return *FindFormat("deepseek_v3"); }
const ToolCallFormat& GptOss() { return *FindFormat("gpt_oss"); }

TEST(ToolCallParserTest, Hermes) {
  // Qwen's and Hermes' documented shape: text, then tagged JSON calls.
  Check(Hermes(),
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
        "\"c\"}}\n</tool_call>",
        "Let me check.\n", {{"get_weather", R"({"city": "Paris", "unit": "c"})"}});
  Check(Hermes(),
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n"
        "{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>\n",
        "", {{"a", R"({"x": [1, {"y": "}"}]})"}, {"b", "{}"}});
  // Unicode split anywhere, escapes, arguments as a string holding the object.
  Check(Hermes(), "<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"東京 😀 \\\"q\\\"\"}}</tool_call>", "",
        {{"say", "{\"text\": \"東京 😀 \\\"q\\\"\"}"}});
  Check(Hermes(), "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "", {{"f", R"({"a": 1})"}});
  Check(Hermes(), "<tool_call>{\"name\": \"f\"}</tool_call>", "", {{"f", "{}"}});
  // No calls: text, markers' lookalikes included.
  Check(Hermes(), "Hello <tool world, a < b and <tool_cal", "Hello <tool world, a < b and <tool_cal", {});
  Check(Hermes(), "", "", {});
}

TEST(ToolCallParserTest, HermesMalformedCallsStayText) {
  for (const std::string output :
       {std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>"),
        std::string("<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>"),  // no name
        std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>"),
        std::string("<tool_call>\nnot json\n</tool_call>"),
        std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}"),  // cut off
        std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>")}) {
    const Whole whole = Parse(Hermes(), output);
    EXPECT_TRUE(whole.calls.empty()) << output;
    EXPECT_NE(whole.content.find("<tool_call>"), std::string::npos) << output;
  }
  // Text after a call is content; whitespace around calls is layout.
  const Whole mixed = Parse(Hermes(), "A\n<tool_call>{\"name\": \"f\"}</tool_call>\n\nB  \n");
  EXPECT_EQ(mixed.content, "A\n\n\nB");
  ASSERT_EQ(mixed.calls.size(), 1u);
}

TEST(ToolCallParserTest, Llama3Json) {
  // Llama 3.1's JSON tool calling: the whole output is the call.
  Check(Llama3(), "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}", "",
        {{"get_weather", R"({"city": "San Francisco, CA"})"}});
  Check(Llama3(), "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
        "", {{"a", "{}"}, {"b", R"({"n": 2})"}});
  Check(Llama3(), "  \n{\"name\": \"f\", \"arguments\": {\"k\": null}}\n", "", {{"f", R"({"k": null})"}});
  Check(Llama3(), "The weather in Paris is sunny.", "The weather in Paris is sunny.", {});
  Check(Llama3(), "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {});
  Check(Llama3(), "<|python", "<|python", {});
}

TEST(ToolCallParserTest, Pythonic) {
  Check(Pythonic(), "[get_weather(city=\"Paris\", days=3), search(q='x \\'y\\'', filters={\"a\": [1, None, True, 2.5]})]",
        "", {{"get_weather", R"({"city":"Paris","days":3})"}, {"search", R"({"q":"x 'y'","filters":{"a":[1,null,true,2.5]}})"}});
  Check(Pythonic(), " [f()] ", "", {{"f", "{}"}});
  for (const std::string text : {"Sure: [f()]", "[f(1)]", "[f(a=b)]", "[f(a='''x''')]", "[f(a=1)] and more", "[]",
                                 "[f(a=1)"}) {
    const Whole whole = Parse(Pythonic(), text);
    EXPECT_TRUE(whole.calls.empty()) << text;
    EXPECT_EQ(whole.content, text);
  }
  EXPECT_FALSE(ParsePythonicCalls("[f(a=" + std::string(100, '[') + std::string(100, ']') + ")]").has_value());
}

TEST(ToolCallParserTest, Mistral) {
  // Mistral v0.3's shape (its tools template renders calls the same way).
  Check(Mistral(), "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", "",
        {{"get_weather", R"({"city": "Paris"})"}});
  Check(Mistral(),
        "Checking both.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"]\"}, \"id\": \"abc123xyz\"}, "
        "{\"name\": \"b\", \"arguments\": {}}]",
        "Checking both.", {{"a", R"({"x": "]"})"}, {"b", "{}"}});
  Check(Mistral(), "No tools needed [TOOL", "No tools needed [TOOL", {});
  for (const std::string output : {std::string("[TOOL_CALLS] not an array"),
                                   std::string("[TOOL_CALLS] [{\"arguments\": {}}]"),
                                   std::string("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": }]")}) {
    const Whole whole = Parse(Mistral(), output);
    EXPECT_TRUE(whole.calls.empty()) << output;
    EXPECT_NE(whole.content.find("[TOOL_CALLS]"), std::string::npos) << output;
  }
}

TEST(ToolCallParserTest, DeepSeekV3) {
  // What the DeepSeek V3 chat template renders for an assistant's calls.
  const std::string call_a =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"東京\"}\n```<｜tool▁call▁end｜>";
  const std::string call_b = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>";
  Check(DeepSeekV3(), "Let me look.<｜tool▁calls▁begin｜>" + call_a + "\n" + call_b + "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
        "Let me look.", {{"get_weather", R"({"city": "東京"})"}, {"now", "{}"}});
  Check(DeepSeekV3(), "Plain answer, no calls.", "Plain answer, no calls.", {});
  const Whole bad = Parse(DeepSeekV3(), "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
                                        "{\"a\": \n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_NE(bad.content.find("<｜tool▁call▁begin｜>function<｜tool▁sep｜>f"), std::string::npos) << bad.content;
}

TEST(ToolCallParserTest, GptOss) {
  // Harmony: the analysis channel is not content, the final channel is;
  // a commentary message to functions.NAME is a call (ended by <|call|>, or
  // by the output's end since <|call|> is a stop token).
  Check(GptOss(),
        "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>",
        "", {{"get_weather", R"({"location": "Tokyo"})"}});
  Check(GptOss(),
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.",
        "It is sunny.", {});
  Check(GptOss(), "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": [1, 2]}", "",
        {{"lookup", R"({"q": [1, 2]})"}});
  Check(GptOss(), "Just text, no channels.", "Just text, no channels.", {});
  const Whole bad = Parse(GptOss(), "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\"<|call|>");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_NE(bad.content.find("to=functions.f"), std::string::npos) << bad.content;
}

TEST(ToolCallParserTest, RequiredAndNamedForms) {
  // tool_choice "required": the array the grammar allows.
  Check(RequiredFormat(), "[{\"name\": \"f\", \"parameters\": {\"a\": 1}}, {\"name\": \"g\", \"parameters\": {}}]", "",
        {{"f", R"({"a": 1})"}, {"g", "{}"}});
  // A named function: the output is its arguments.
  Check(NamedFormat(), "{\"city\": \"Paris\"}", "", {{"get_weather", R"({"city": "Paris"})"}}, "get_weather");
  const Whole bad = Parse(NamedFormat(), "{\"city\": ", "get_weather");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "{\"city\": ");
}

TEST(ToolCallParserTest, ParallelFalseKeepsTheFirstCall) {
  ToolCallStream stream(Hermes(), "", /*parallel=*/false, Ids());
  stream.Feed("<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>");
  stream.Finish();
  ASSERT_EQ(stream.calls().size(), 1u);
  EXPECT_EQ(stream.calls()[0].name, "a");
}

TEST(ToolCallParserTest, FormatsAndDetection) {
  EXPECT_EQ(FindFormat("nope"), nullptr);
  EXPECT_EQ(FormatNames(), (std::vector<std::string_view>{"hermes", "llama3_json", "pythonic", "mistral",
                                                         "deepseek_v3", "gpt_oss"}));
  EXPECT_TRUE(Mistral().keeps_special && GptOss().keeps_special && !Hermes().keeps_special);
  EXPECT_EQ(DetectFormat("{{ '[TOOL_CALLS] ' }}{{ tool_calls | tojson }}"), &Mistral());
  EXPECT_EQ(DetectFormat("{{'<｜Assistant｜><｜tool▁calls▁begin｜>'}}"), &DeepSeekV3());
  EXPECT_EQ(DetectFormat("{{- '<|start|>assistant<|channel|>final<|message|>' }}"), &GptOss());
  EXPECT_EQ(DetectFormat("{% for t in tools %}<tool_call>{% endfor %}"), &Hermes());
  EXPECT_EQ(DetectFormat("<|python_tag|>{{ x }}"), &Llama3());
  EXPECT_EQ(DetectFormat("{{ messages }}"), nullptr);
}

}  // namespace
}  // namespace floe::tools
