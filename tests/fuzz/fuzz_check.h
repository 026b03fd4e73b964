// Shared by the libFuzzer targets in this folder (tests/fuzz/README.md):
// FUZZ_CHECK aborts with a message when an invariant breaks, so libFuzzer
// records the input as a crash; the source tree's location for targets that
// load the repository's tokenizer files.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, "\n");                                                  \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

namespace floe::fuzz {

// $FLOE_SOURCE_DIR, else the source tree this binary was configured from.
inline std::string SourceDir() {
  const char* env = std::getenv("FLOE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : FLOE_FUZZ_SOURCE_DIR;
}

// A real Hugging Face tokenizer folder that scripts/bootstrap.sh installs:
// "tokenizer-llama3_1" (the built-in tiny model's) or "tokenizer-llama2".
inline std::string TokenizerDir(const std::string& package) {
  return SourceDir() + "/third_party/npm/node_modules/@lenml/" + package + "/models";
}

}  // namespace floe::fuzz
