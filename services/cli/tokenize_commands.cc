// floe tokenize / floe detokenize: the tokenizer on the command line.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cli/arg_parser.h"
#include "common/tokenizer/tokenizer.h"
#include "services/cli/commands.h"

namespace floe {
namespace {

int Fail(const char* command, absl::string_view message) {
  std::fprintf(stderr, "floe %s: %s\n", command, std::string(message).c_str());
  return 1;
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  std::string tokenizer_path;
  bool add_special_tokens = false;
  ArgParser parser("floe tokenize --tokenizer DIR_OR_FILE [--add-special-tokens] < text",
                   "Reads text on stdin and prints {\"ids\":[...]}. Special tokens written in the text are matched\n"
                   "as Hugging Face does; none are added unless --add-special-tokens.");
  parser.AddString("tokenizer", &tokenizer_path, "tokenizer.json, or a folder holding it");
  parser.AddBool("add-special-tokens", &add_special_tokens, "add BOS etc. as the tokenizer's post-processor says");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) return Fail("tokenize", s.message());
  if (parser.help_requested()) return std::printf("%s", parser.Help().c_str()), 0;
  if (tokenizer_path.empty()) return Fail("tokenize", "--tokenizer is required");
  auto tokenizer = Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) return Fail("tokenize", tokenizer.status().message());
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto ids = (*tokenizer)->Encode(text, add_special_tokens);
  if (!ids.ok()) return Fail("tokenize", ids.status().message());
  std::printf("%s\n", nlohmann::json({{"ids", *ids}}).dump().c_str());
  return 0;
}

int RunDetokenize(int argc, char** argv) {
  std::string tokenizer_path;
  bool skip_special_tokens = false;
  ArgParser parser("floe detokenize --tokenizer DIR_OR_FILE < {\"ids\":[...]}",
                   "Reads {\"ids\":[...]} on stdin and prints the text.");
  parser.AddString("tokenizer", &tokenizer_path, "tokenizer.json, or a folder holding it");
  parser.AddBool("skip-special-tokens", &skip_special_tokens, "leave special tokens out of the text");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) return Fail("detokenize", s.message());
  if (parser.help_requested()) return std::printf("%s", parser.Help().c_str()), 0;
  if (tokenizer_path.empty()) return Fail("detokenize", "--tokenizer is required");
  auto tokenizer = Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) return Fail("detokenize", tokenizer.status().message());
  nlohmann::json input = nlohmann::json::parse(std::cin, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded() || !input.contains("ids") || !input["ids"].is_array())
    return Fail("detokenize", "stdin must be a JSON object {\"ids\": [int, ...]}");
  std::vector<int32_t> ids;
  for (const auto& id : input["ids"]) {
    if (!id.is_number_integer()) return Fail("detokenize", "ids must be integers");
    ids.push_back(id.get<int32_t>());
  }
  auto text = (*tokenizer)->Decode(ids, skip_special_tokens);
  if (!text.ok()) return Fail("detokenize", text.status().message());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

}  // namespace floe
