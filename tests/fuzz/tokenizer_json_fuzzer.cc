// Fuzzes tokenizer.json loading (common/tokenizer: the streaming reader and
// Tokenizer::Load's field checks). The input is the file; it is written to a
// private temporary folder and loaded from there, as a model folder is.
// Invariants: Load succeeds only when ParseTokenizerJson does; a loaded
// tokenizer only ever produces ids it can decode (Encode with and without
// special tokens, on probe texts and on every added token's content), every
// decodable id decodes to valid UTF-8, and streaming detokenization equals
// Decode.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_json_reader.h"
#include "common/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe {
namespace {

const std::string& TempDir() {
  static const std::string* dir = [] {
    std::string pattern = "/tmp/floe-fuzz-tokenizer-json.XXXXXX";
    FUZZ_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
    return new std::string(pattern);
  }();
  return *dir;
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write %s", path.c_str());
  FUZZ_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(), "short write");
  std::fclose(f);
}

bool ValidUtf8(absl::string_view s) { return utf8::FindInvalid(s) == s.size(); }

void CheckEncodes(const Tokenizer& t, absl::string_view text) {
  for (bool special : {false, true}) {
    auto ids = t.Encode(text, special);
    if (!ids.ok()) {
      FUZZ_CHECK(!ValidUtf8(text), "Encode failed on valid UTF-8: %s", ids.status().ToString().c_str());
      continue;
    }
    FUZZ_CHECK(t.ValidateIds(*ids).ok(), "Encode(add_special_tokens=%d) produced an undecodable id: %s", special,
               t.ValidateIds(*ids).ToString().c_str());
    auto text_out = t.Decode(*ids, false);
    FUZZ_CHECK(text_out.ok() && ValidUtf8(*text_out), "Decode of encoded ids failed");
    IncrementalDetokenizer detok(&t, false);
    std::string streamed;
    for (int32_t id : *ids) {
      auto chunk = detok.Add({id});
      FUZZ_CHECK(chunk.ok() && ValidUtf8(*chunk), "detokenizer chunk");
      streamed += *chunk;
    }
    streamed += detok.Finish();
    FUZZ_CHECK(streamed == *text_out, "streamed detokenization differs from Decode");
  }
}

}  // namespace
}  // namespace floe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const bool parsed = ParseTokenizerJson(text, "fuzz").ok();
  const std::string path = TempDir() + "/tokenizer.json";
  WriteFile(path, text);
  auto loaded = Tokenizer::Load(path);
  if (!loaded.ok()) {
    const auto code = loaded.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kUnimplemented,
               "unexpected error class: %s", loaded.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(parsed, "Load accepted what ParseTokenizerJson refused");
  const Tokenizer& t = **loaded;
  FUZZ_CHECK(t.vocab_size() >= 0, "negative vocab size");
  // Every id decodes alone (or is reported absent) to valid UTF-8.
  const int32_t probe_ids = std::min<int32_t>(t.vocab_size(), 4096);
  for (int32_t id = 0; id < probe_ids; ++id) {
    auto s = t.Decode({id}, false);
    if (s.ok()) FUZZ_CHECK(ValidUtf8(*s), "id %d decodes to invalid UTF-8", id);
    if (s.ok()) {
      auto skipped = t.Decode({id}, true);
      FUZZ_CHECK(skipped.ok() && (t.IsSpecial(id) ? skipped->empty() : *skipped == *s), "skip_special_tokens on %d", id);
    }
  }
  for (absl::string_view probe : {"Hello world", " hello  World\n\n123 4567 caf\xC3\xA9 \xE2\x96\x81x",
                                  "<s>a</s> <|begin_of_text|>", "\xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87 'll 've"}) {
    CheckEncodes(t, probe);
  }
  // Each added token's content (and the token spelled in the vocabulary).
  for (int32_t id = 0; id < std::min<int32_t>(probe_ids, 512); ++id) {
    const absl::string_view bytes = t.TokenBytes(id);
    if (!bytes.empty() && bytes.size() < 64 && ValidUtf8(bytes)) CheckEncodes(t, bytes);
  }
  return 0;
}
