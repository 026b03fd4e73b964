// Chat histories as agents send them (null content beside tool calls,
// tool-call arguments as JSON strings, text parts, tool results, reasoning,
// tools whose keys are in no sorted order), through the router's request
// parsing and the chat template, against vLLM's normalization of the same
// history rendered by Python's jinja2 (gen_history_cases.py, run here):
// byte for byte, on seven real templates (gpt-oss among them), and each template's content format
// (parts or one string) decided as vLLM decides it.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/jinja/chat_template.h"
#include "gtest/gtest.h"
#include "services/router/openai/openai_request.h"
#include "services/router/tools/tool_call_parser.h"

namespace floe::openai {
namespace {

using nlohmann::ordered_json;

ordered_json RunGenerator() {
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  const char* binary = std::getenv("FLOE_BINARY_DIR");
  if (!source) {
    ADD_FAILURE() << "FLOE_SOURCE_DIR must point at the source tree (CTest sets it)";
    return nullptr;
  }
  const std::string out =
      (std::filesystem::path(binary ? binary : ::testing::TempDir()) / "tests" / "chat_history_cases.json").string();
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  const std::string command = std::string("/usr/bin/python3 '") + source +
                              "/tests/services/router/gen_history_cases.py' '" + source + "' '" + out + "'";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "reference generator failed (it needs Debian's python3-jinja2 and the npm packages of "
                     "scripts/bootstrap.sh): "
                  << command;
    return nullptr;
  }
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  return ordered_json::parse(text.str(), nullptr, false);
}

// --tool-call-parser auto on each real template: the format its models
// write (the npm Llama 3.1 template and Gemma 3 render no tools).
TEST(ChatHistoryConformanceTest, AutoPicksEachTemplatesToolFormat) {
  const ordered_json ref = RunGenerator();
  ASSERT_TRUE(ref.is_object() && ref.contains("templates")) << "no reference";
  const std::map<std::string, std::string> want = {
      {"tokenizer-llama3_1", "none"},        {"tokenizer-qwen3", "hermes"},   {"llama3.1-tools", "llama3_json"},
      {"mistral-v0.3-tools", "mistral"},     {"gemma3", "none"},              {"deepseek_v3", "deepseek_v3"},
      {"gpt_oss", "gpt_oss"}};
  for (const auto& [name, t] : ref["templates"].items()) {
    const tools::ToolCallFormat* format = tools::DetectFormat(t["source"].get<std::string>());
    ASSERT_TRUE(want.contains(name)) << name;
    EXPECT_EQ(format ? std::string(format->name) : "none", want.at(name)) << name;
  }
}

TEST(ChatHistoryConformanceTest, HistoriesRenderAsVllmNormalizesThemForJinja2) {
  const ordered_json ref = RunGenerator();
  ASSERT_TRUE(ref.is_object() && ref.contains("cases")) << "no reference";
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, t] : ref["templates"].items()) {
    const ordered_json& tokens = t["special_tokens"];
    auto loaded = t["config"].is_string()
                      ? ChatTemplate::FromTokenizerConfig(t["config"].get<std::string>())
                      : ChatTemplate::FromSource(t["source"].get<std::string>(), tokens.value("bos_token", ""),
                                                 tokens.value("eos_token", ""));
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    EXPECT_EQ(loaded->content_as_parts(), t["content_format"] == "openai") << name;
    templates.emplace(name, *std::move(loaded));
  }
  std::map<std::string, int> rendered, refused;
  int failures = 0;
  for (const ordered_json& c : ref["cases"]) {
    const std::string name = c["template"];
    RequestContext context;
    context.chat_template = &templates.at(name);
    ordered_json body = c["request"];
    body["max_tokens"] = 1;
    ParsedRequest parsed;
    const auto error = Parse(Endpoint::kChat, body.dump(), context, &parsed);
    if (c.contains("expected")) {
      if (error) {
        ADD_FAILURE() << name << ": refused (" << error->message << ") what jinja2 rendered\n" << body.dump();
      } else if (parsed.generate.text() != c["expected"].get<std::string>()) {
        ADD_FAILURE() << name << ": rendered\n" << parsed.generate.text() << "\njinja2 rendered\n"
                      << c["expected"].get<std::string>() << "\nfrom " << body.dump();
      } else {
        ++rendered[name];
        continue;
      }
    } else {
      if (error && error->param == "messages" && error->message.find("chat template") != std::string::npos) {
        ++refused[name];
        continue;
      }
      ADD_FAILURE() << name << ": jinja2 raised (" << c["error"].get<std::string>() << ") but Floe "
                    << (error ? "answered " + error->message : "rendered " + parsed.generate.text());
    }
    if (++failures > 10) break;
  }
  for (const auto& [name, t] : templates) {
    RecordProperty("rendered_" + name, rendered[name]);
    EXPECT_GE(rendered[name], 30) << name << ": too few histories rendered to judge";
  }
}

}  // namespace
}  // namespace floe::openai
