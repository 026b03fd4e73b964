#include "services/worker/structured/structured_output_compiler.h"

#include <charconv>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/grammar/ebnf_parser.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex_compiler.h"
#include "common/json/bounded_json.h"
#include "common/tokenizer/tokenizer.h"

namespace floe {
namespace {

using grammar::Grammar;
using Kind = GrammarKey::Kind;

absl::Status Named(Kind kind, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat(GrammarKeyField(kind), ": ", status.message()));
}

// The choices of a key's text ("3:yes2:no").
std::vector<std::string_view> Choices(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t colon = text.find(':');
    size_t length = 0;
    if (colon == std::string_view::npos ||
        std::from_chars(text.data(), text.data() + colon, length).ptr != text.data() + colon ||
        length > text.size() - colon - 1)
      break;  // cannot happen: GrammarKeyOf wrote it
    out.push_back(text.substr(colon + 1, length));
    text.remove_prefix(colon + 1 + length);
  }
  return out;
}

Grammar ChoiceGrammar(std::string_view text) {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  for (std::string_view choice : Choices(text)) g.AddAlternative(root, g.Literal(choice));
  g.set_root(root);
  return g;
}

absl::Status TookTooLong(std::chrono::milliseconds limit) {
  return absl::InvalidArgumentError(
      absl::StrCat("structured_output: compiling took longer than ", limit.count(), " ms"));
}

}  // namespace

std::string GrammarKeyField(Kind kind) {
  switch (kind) {
    case Kind::kJsonSchema: return "structured_output.json_schema";
    case Kind::kJsonObject: return "structured_output.json_object";
    case Kind::kRegex: return "structured_output.regex";
    case Kind::kChoice: return "structured_output.choice";
    case Kind::kGrammar: return "structured_output.grammar";
  }
  return "structured_output";
}

GrammarKey GrammarKeyOf(const floe::v1::StructuredOutput& output) {
  using S = floe::v1::StructuredOutput;
  GrammarKey key;
  switch (output.kind_case()) {
    case S::kJsonSchema:
      key.kind = Kind::kJsonSchema;
      key.text = output.json_schema();
      key.strict = output.strict();
      break;
    case S::kJsonObject: key.kind = Kind::kJsonObject; break;
    case S::kRegex:
      key.kind = Kind::kRegex;
      key.text = output.regex();
      break;
    case S::kChoice:
      key.kind = Kind::kChoice;
      for (const std::string& choice : output.choice().choices()) absl::StrAppend(&key.text, choice.size(), ":", choice);
      break;
    case S::kGrammar:
      key.kind = Kind::kGrammar;
      key.text = output.grammar();
      break;
    case S::KIND_NOT_SET: break;  // refused by ResolveRequest
  }
  return key;
}

absl::StatusOr<Grammar> GrammarOf(const GrammarKey& key) {
  absl::StatusOr<Grammar> g;
  switch (key.kind) {
    case Kind::kJsonSchema: {
      auto schema = ParseUntrustedJson<nlohmann::ordered_json>(key.text);
      if (!schema.ok()) return Named(key.kind, schema.status());
      grammar::JsonSchemaOptions options;
      options.strict = key.strict;
      g = grammar::CompileJsonSchema(*schema, options);
      break;
    }
    case Kind::kJsonObject: g = grammar::JsonObjectGrammar(); break;
    case Kind::kRegex: g = grammar::CompileRegex(key.text); break;
    case Kind::kChoice: g = ChoiceGrammar(key.text); break;
    case Kind::kGrammar: g = grammar::ParseGbnf(key.text); break;
  }
  if (!g.ok()) return Named(key.kind, g.status());
  return g;
}

absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> LoadGrammarVocab(const std::string& model_dir) {
  const std::filesystem::path file = std::filesystem::path(model_dir) / "tokenizer.json";
  std::error_code error;
  if (!std::filesystem::exists(file, error))
    return absl::NotFoundError(absl::StrCat(file.string(), " does not exist"));
  auto tokenizer = Tokenizer::Load(model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  return grammar::TokenVocab::FromTokenizer(**tokenizer);
}

StructuredOutputCompiler::StructuredOutputCompiler(std::shared_ptr<const grammar::TokenVocab> vocab,
                                                   StructuredOutputOptions options)
    : load_([vocab] { return vocab; }), options_(options), cache_(options.cache_size) {}

StructuredOutputCompiler::StructuredOutputCompiler(VocabLoader load, StructuredOutputOptions options)
    : load_(std::move(load)), options_(options), cache_(options.cache_size) {}

absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> StructuredOutputCompiler::Vocab() {
  std::call_once(loaded_, [this] {
    vocab_ = load_();
    if (vocab_.ok() && *vocab_ == nullptr) vocab_ = absl::InternalError("no vocabulary");
    if (!vocab_.ok()) {
      vocab_ = absl::FailedPreconditionError(
          absl::StrCat("structured_output: the model's tokenizer cannot be read as a vocabulary: ",
                       vocab_.status().message()));
    }
  });
  return vocab_;
}

absl::StatusOr<GrammarCache::Compiled> StructuredOutputCompiler::CompileKey(
    const GrammarKey& key, const std::shared_ptr<const grammar::TokenVocab>& vocab,
    GrammarCache::Clock::time_point deadline) const {
  absl::StatusOr<Grammar> g = GrammarOf(key);
  if (!g.ok()) return g.status();
  if (GrammarCache::Clock::now() > deadline) return TookTooLong(options_.compile_timeout);
  auto compiled = grammar::CompiledGrammar::Create(*g, vocab);
  if (!compiled.ok()) return Named(key.kind, compiled.status());
  // Every position's mask now, on this thread, rather than on the engine's
  // step loop at first use. Each position costs one walk of the
  // vocabulary's trie, so the limit is checked between them.
  for (uint32_t pos : (*compiled)->program().byte_positions()) {
    (*compiled)->Classified(pos);
    if (GrammarCache::Clock::now() > deadline) return TookTooLong(options_.compile_timeout);
  }
  return compiled;
}

absl::StatusOr<StructuredOutputCompiler::Compiled> StructuredOutputCompiler::Compile(
    const floe::v1::StructuredOutput& output) {
  auto vocab = Vocab();
  if (!vocab.ok()) return vocab.status();
  const GrammarKey key = GrammarKeyOf(output);
  const auto start = GrammarCache::Clock::now();
  const auto deadline = start + options_.compile_timeout;
  GrammarCache::Lookup lookup = cache_.Get(key, deadline, [&] { return CompileKey(key, *vocab, deadline); });
  if (!lookup.result.ok()) {
    if (absl::IsDeadlineExceeded(lookup.result.status())) return TookTooLong(options_.compile_timeout);
    return lookup.result.status();
  }
  Compiled out;
  out.grammar = *std::move(lookup.result);
  out.cache_hit = lookup.hit;
  if (!lookup.hit) out.compile_seconds = std::chrono::duration<double>(GrammarCache::Clock::now() - start).count();
  return out;
}

}  // namespace floe
