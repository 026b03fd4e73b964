// Byte-identity with Python's jinja2 (configured as transformers' chat
// templates are) on real chat templates: gen_conformance.py renders seeded
// random conversations with the reference; every case must render to the
// same bytes here, and every conversation it rejects must be rejected here.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/jinja/chat_template.h"
#include "gtest/gtest.h"

namespace floe {
namespace {

using nlohmann::ordered_json;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

TEST(JinjaConformanceTest, MatchesJinja2OnRealChatTemplates) {
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "FLOE_SOURCE_DIR must point at the source tree (CTest sets it)";
  const std::string out = (std::filesystem::path(::testing::TempDir()) / "jinja_conformance.json").string();
  const std::string command = std::string("/usr/bin/python3 '") + source +
                              "/tests/common/jinja/gen_conformance.py' '" + source + "' '" + out + "' 250";
  ASSERT_EQ(std::system(command.c_str()), 0) << "reference generator failed (needs python3-jinja2): " << command;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  const ordered_json reference = ordered_json::parse(text.str(), nullptr, false);
  ASSERT_FALSE(reference.is_discarded());

  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, t] : reference["templates"].items()) {
    auto loaded = ChatTemplate::FromSource(t["source"], t["bos"], t["eos"]);
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    templates.emplace(name, *std::move(loaded));
  }
  ASSERT_GE(templates.size(), 6u);
  std::map<std::string, int> matched, rejected, total;
  int failures = 0;
  for (const auto& c : reference["cases"]) {
    const std::string name = c["template"];
    const ordered_json& context = c["context"];
    ordered_json extra = ordered_json::object();
    for (const auto& [k, v] : context.items())
      if (k != "messages" && k != "add_generation_prompt" && k != "tools") extra[k] = v;
    auto rendered = templates.at(name).Apply(context["messages"], context["add_generation_prompt"].get<bool>(),
                                             context.contains("tools") ? context["tools"] : ordered_json(nullptr),
                                             extra);
    ++total[name];
    if (c.contains("error")) {
      if (!rendered.ok()) {
        ++rejected[name];
      } else if (++failures <= 3) {
        ADD_FAILURE() << name << ": jinja2 raised \"" << c["error"].get<std::string>() << "\" but we rendered\n"
                      << context.dump();
      }
      continue;
    }
    if (!rendered.ok()) {
      if (++failures <= 3) ADD_FAILURE() << name << ": " << rendered.status() << "\n" << context.dump();
      continue;
    }
    const std::string expected = c["expected"];
    if (*rendered == expected) {
      ++matched[name];
      continue;
    }
    if (++failures <= 3) {
      size_t at = 0;
      while (at < expected.size() && at < rendered->size() && expected[at] == (*rendered)[at]) ++at;
      const size_t from = at > 60 ? at - 60 : 0;
      ADD_FAILURE() << name << ": first difference at byte " << at << "\n  jinja2: "
                    << Escape(expected.substr(from, 160)) << "\n  ours:   " << Escape(rendered->substr(from, 160))
                    << "\n  context: " << context.dump();
    }
  }
  for (const auto& [name, n] : total) {
    std::printf("[jinja_conformance] %-20s %3d cases: %3d byte-identical, %d rejected as jinja2 does\n",
                name.c_str(), n, matched[name], rejected[name]);
    EXPECT_GE(n, 200) << name;
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace floe
