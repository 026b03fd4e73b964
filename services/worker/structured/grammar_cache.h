// GrammarCache: compiled grammars shared by every request of a worker,
// keyed by what the request asked for (the constraint's kind, its text,
// strict) and compared in full, never by a hash alone.
//
// Bounded by entries (least recently used evicted first; 0 keeps none);
// an evicted grammar lives on in the requests that hold it. Single flight:
// concurrent misses on one key compile it once, on the first caller's
// thread, while the others wait for that result up to their own deadline.
// A failed compile is not kept (the next request tries again) but is the
// answer of everyone who waited on it.
//
// Thread-safe: called from the worker's gRPC handler threads (std locks).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/grammar/token_mask.h"

namespace floe {

struct GrammarKey {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonSchema;
  // The schema, regex or GBNF text; for choices each one length-prefixed
  // ("3:yes2:no"), so no two lists share a text.
  std::string text;
  bool strict = false;

  bool operator==(const GrammarKey& o) const { return kind == o.kind && strict == o.strict && text == o.text; }
  template <typename H>
  friend H AbslHashValue(H h, const GrammarKey& k) {
    return H::combine(std::move(h), k.kind, k.strict, k.text);
  }
};

class GrammarCache {
 public:
  using Compiled = std::shared_ptr<const grammar::CompiledGrammar>;
  using Clock = std::chrono::steady_clock;

  explicit GrammarCache(size_t capacity) : capacity_(capacity) {}

  struct Lookup {
    absl::StatusOr<Compiled> result;
    // False only for the caller that ran `compile`.
    bool hit = false;
  };
  // The cached grammar of `key`; else the result of another caller's
  // compile of it (DEADLINE_EXCEEDED past `deadline`); else `compile()`,
  // run here, then kept when it succeeded.
  Lookup Get(const GrammarKey& key, Clock::time_point deadline,
             absl::FunctionRef<absl::StatusOr<Compiled>()> compile);

  size_t size() const;     // grammars kept
  int waiting() const;     // callers waiting on another caller's compile
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    bool done = false;
    absl::StatusOr<Compiled> result = absl::UnknownError("compiling");
    bool kept = false;
    std::list<const GrammarKey*>::iterator lru;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable compiled_;
  // Pending and kept entries; the keys' nodes are stable, so lru_ points at them.
  absl::node_hash_map<GrammarKey, std::shared_ptr<Entry>> entries_;
  std::list<const GrammarKey*> lru_;  // kept entries, most recently used first
  int waiting_ = 0;
};

}  // namespace floe
