// Byte-identity with Python's jinja2, configured as transformers'
// apply_chat_template configures it. gen_conformance.py (run here, into the
// build directory, with Debian's python3-jinja2) renders:
//  - seeded conversations through the real chat templates of the npm
//    packages (Llama 3, Llama 3.1, Qwen3, loaded here from their
//    tokenizer_config.json) and the fixtures in templates/ (Llama 2 chat,
//    Llama 3.1 with tools, Mistral v0.3 with tools, two written for the test);
//  - small templates (hand-written corners, then fuzzed expressions).
// Every rendering must come out byte-identical here; every input jinja2
// rejects must be rejected here; whatever jinja2 prints as a memory address
// must be refused. The first differences are printed with their context.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/jinja/chat_template.h"
#include "common/jinja/template.h"
#include "gtest/gtest.h"

namespace floe {
namespace {

using nlohmann::ordered_json;

// How many differences to print in full (FLOE_JINJA_SHOW_FAILURES overrides).
int ShownFailures() {
  const char* env = std::getenv("FLOE_JINJA_SHOW_FAILURES");
  return env ? std::atoi(env) : 3;
}

// Control bytes and newlines made visible, so that whitespace differences show.
std::string Visible(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else out += static_cast<char>(c);
  }
  return out;
}

std::string FirstDifference(const std::string& expected, const std::string& actual) {
  size_t at = 0;
  while (at < expected.size() && at < actual.size() && expected[at] == actual[at]) ++at;
  const size_t from = at > 80 ? at - 80 : 0;
  std::ostringstream out;
  out << "first difference at byte " << at << " of " << expected.size() << " (ours " << actual.size() << ")"
      << "\n    jinja2: ..." << Visible(expected.substr(from, 200)) << "\n    ours:   ..."
      << Visible(actual.substr(from, 200));
  return out.str();
}

// Compares one outcome; returns false (reporting the first few) on mismatch.
bool Check(const ordered_json& reference, const absl::StatusOr<std::string>& ours, const std::string& what,
           int* failures) {
  std::string problem;
  if (reference.contains("expected")) {
    const std::string expected = reference["expected"];
    if (!ours.ok()) problem = "jinja2 rendered it, we failed: " + std::string(ours.status().message());
    else if (*ours != expected) problem = FirstDifference(expected, *ours);
  } else if (ours.ok()) {
    problem = reference.contains("unprintable")
                  ? "jinja2 printed a memory address, we printed: " + Visible(*ours)
                  : "jinja2 raised \"" + reference["error"].get<std::string>() + "\", we rendered: " + Visible(*ours);
  } else if (reference.value("raised", false) &&
             !std::string(ours.status().message()).ends_with(reference["error"].get<std::string>())) {
    problem = "raise_exception(\"" + reference["error"].get<std::string>() + "\") but we failed with: " +
              std::string(ours.status().message());
  }
  if (problem.empty()) return true;
  if (++*failures <= ShownFailures()) ADD_FAILURE() << what << "\n  " << problem;
  return false;
}

ordered_json RunGenerator() {
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  const char* binary = std::getenv("FLOE_BINARY_DIR");
  if (!source) {
    ADD_FAILURE() << "FLOE_SOURCE_DIR must point at the source tree (CTest sets it)";
    return nullptr;
  }
  const std::string out = (std::filesystem::path(binary ? binary : ::testing::TempDir()) /
                           "tests" / "jinja_conformance.json").string();
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  // For a longer hunt: FLOE_JINJA_CONVERSATIONS=N per template (default
  // 250), FLOE_JINJA_FUZZ="COUNT SEED" for the fuzzers (default "2500 7").
  const char* conversations = std::getenv("FLOE_JINJA_CONVERSATIONS");
  const char* fuzz = std::getenv("FLOE_JINJA_FUZZ");
  const std::string command = std::string("/usr/bin/python3 '") + source +
                              "/tests/common/jinja/gen_conformance.py' '" + source + "' '" + out + "' " +
                              (conversations ? conversations : "250") + " " + (fuzz ? fuzz : "");
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

class JinjaConformanceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { reference_ = new ordered_json(RunGenerator()); }
  static void TearDownTestSuite() { delete reference_; }
  static ordered_json* reference_;
};
ordered_json* JinjaConformanceTest::reference_ = nullptr;

TEST_F(JinjaConformanceTest, ChatTemplatesRenderConversationsAsTransformersDoes) {
  const ordered_json& ref = *reference_;
  ASSERT_TRUE(ref.is_object() && ref.contains("cases")) << "no reference";
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, t] : ref["templates"].items()) {
    const ordered_json& tokens = t["special_tokens"];
    auto loaded = t["config"].is_string()
                      ? ChatTemplate::FromTokenizerConfig(t["config"].get<std::string>())
                      : ChatTemplate::FromSource(t["source"], tokens.value("bos_token", ""), tokens.value("eos_token", ""));
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    EXPECT_EQ(loaded->source(), t["source"].get<std::string>()) << name;
    templates.emplace(name, *std::move(loaded));
  }
  ASSERT_GE(templates.size(), 8u);
  std::map<std::string, int> identical, rejected, total;
  int failures = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["template"];
    ++total[name];
    const auto ours = templates.at(name).Apply(c["messages"], c["add_generation_prompt"].get<bool>(), c["tools"],
                                               c["extra"]);
    const std::string what = name + " on " + c["messages"].dump() + "\n  add_generation_prompt=" +
                             c["add_generation_prompt"].dump() + " tools=" + c["tools"].dump().substr(0, 200) +
                             " extra=" + c["extra"].dump();
    if (!Check(c, ours, what, &failures)) continue;
    ++(ours.ok() ? identical : rejected)[name];
  }
  for (const auto& [name, n] : total) {
    std::printf("[jinja_conformance] %-20s %3d conversations: %3d byte-identical, %3d rejected as jinja2 does\n",
                name.c_str(), n, identical[name], rejected[name]);
    EXPECT_GE(n, 200) << name;
    EXPECT_GE(identical[name], 50) << name << ": too few successful renderings to mean much";
  }
  EXPECT_EQ(failures, 0);
}

TEST_F(JinjaConformanceTest, SnippetsAndFuzzedExpressionsRenderAsJinja2Does) {
  const ordered_json& ref = *reference_;
  ASSERT_TRUE(ref.is_object() && ref.contains("snippets")) << "no reference";
  int identical = 0, rejected = 0, failures = 0;
  for (const auto& s : ref["snippets"]) {
    const std::string source = s["source"];
    absl::StatusOr<std::string> ours = absl::UnknownError("");
    auto parsed = jinja::Template::Parse(source);
    if (parsed.ok()) ours = parsed->Render(s["context"]);
    else ours = parsed.status();
    if (!Check(s, ours, "snippet " + Visible(source), &failures)) continue;
    ++(ours.ok() ? identical : rejected);
  }
  std::printf("[jinja_conformance] %zu snippets: %d byte-identical, %d rejected as jinja2 does\n",
              ref["snippets"].size(), identical, rejected);
  EXPECT_GE(identical, 1000);
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace floe
