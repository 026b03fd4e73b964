// StructuredOutputCompiler: a request's GenerateRequest.structured_output
// as a grammar compiled against the worker's vocabulary, ready for the
// engine (EngineRequest::grammar).
//
// - json_schema: the JSON text parsed as untrusted JSON (common/json), then
//   CompileJsonSchema with `strict`; json_object: any JSON object; regex:
//   the whole output matches (CompileRegex); choice: exactly one of the
//   strings (an alternation of literals); grammar: GBNF (ParseGbnf).
// - Errors are INVALID_ARGUMENT naming the field
//   ("structured_output.json_schema: schema.properties.x: keyword 'not' is
//   not supported"), as are compiles that take longer than the time limit
//   ("structured_output: compiling took longer than 5000 ms").
// - Compiling includes every token mask the grammar's positions can need
//   (CompiledGrammar::Classified for each of them, the time limit checked
//   between positions), so the engine's step loop never classifies a
//   position; only stack-dependent refinements remain for it.
// - Results are cached (grammar_cache.h) per (kind, text, strict): the
//   vocabulary is the worker's one tokenizer's.
//
// Thread-safe: Compile runs on the calling gRPC handler thread (a slow
// schema delays only its own request) and may be called from any number of
// them at once; the first one builds the vocabulary when it is loaded
// lazily, the others wait for it.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/token_mask.h"
#include "common/grammar/vocab.h"
#include "floe/v1/generate.pb.h"
#include "services/worker/structured/grammar_cache.h"

namespace floe {

struct StructuredOutputOptions {
  size_t cache_size = 128;                           // --structured-output-cache-size
  std::chrono::milliseconds compile_timeout{5000};  // --structured-output-compile-timeout-ms
};

// The cache key of `output` (which sets a kind: ResolveRequest checked it).
GrammarKey GrammarKeyOf(const floe::v1::StructuredOutput& output);
// The grammar IR the key asks for, no vocabulary involved. Errors are
// INVALID_ARGUMENT naming the field (StructuredOutputField's names).
absl::StatusOr<grammar::Grammar> GrammarOf(const GrammarKey& key);
// "structured_output.json_schema", ...: the field a key's errors name.
std::string GrammarKeyField(GrammarKey::Kind kind);

// The tokenizer of a checkpoint folder (its tokenizer.json), as the token
// vocabulary the grammars are compiled against. NOT_FOUND when the folder
// has no tokenizer.json (the worker then refuses structured outputs).
absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> LoadGrammarVocab(const std::string& model_dir);

class StructuredOutputCompiler {
 public:
  using VocabLoader = std::function<absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>>()>;

  StructuredOutputCompiler(std::shared_ptr<const grammar::TokenVocab> vocab, StructuredOutputOptions options);
  // The vocabulary is built by `load` on the first Compile (a 128k
  // vocabulary's byte trie is ~20 MiB and ~0.3 s: a worker that never sees
  // a constraint pays neither); a failed load fails that Compile and every
  // later one (FAILED_PRECONDITION naming why).
  StructuredOutputCompiler(VocabLoader load, StructuredOutputOptions options);

  struct Compiled {
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    bool cache_hit = false;
    double compile_seconds = 0;  // this call's compile (0 on a hit)
  };
  absl::StatusOr<Compiled> Compile(const floe::v1::StructuredOutput& output);

  const StructuredOutputOptions& options() const { return options_; }
  size_t cached() const { return cache_.size(); }

 private:
  absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> Vocab();
  absl::StatusOr<GrammarCache::Compiled> CompileKey(const GrammarKey& key,
                                                    const std::shared_ptr<const grammar::TokenVocab>& vocab,
                                                    GrammarCache::Clock::time_point deadline) const;

  VocabLoader load_;
  std::once_flag loaded_;
  absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> vocab_;  // set once, under loaded_
  const StructuredOutputOptions options_;
  GrammarCache cache_;
};

}  // namespace floe
