// Byte-pair-encoding model over raw bytes: the vocabulary and merges of a
// byte-level BPE tokenizer.json, with both sides already mapped back from the
// byte-level alphabet to bytes. Immutable after Create apart from its internal
// (thread-safe) piece cache; Encode is thread-safe (callers pass their own
// scratch space).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/piece_cache.h"

namespace floe {

class BpeModel {
 public:
  // Per-thread working memory for Encode; reuse it across calls to avoid allocations.
  struct Scratch {
    std::vector<int32_t> ids;
    std::vector<int32_t> ranks;
    std::vector<int32_t> merged;
    std::vector<int32_t> prev;
    std::vector<int32_t> next;
    struct Candidate {
      int32_t rank;
      int32_t pos;
      int32_t left;
      int32_t right;
      int32_t merged;
    };
    std::vector<Candidate> heap;
  };

  struct Options {
    // A piece that is itself in the vocabulary is emitted whole (Llama 3).
    bool ignore_merges = false;
    // Initial symbols are single bytes (byte-level BPE); otherwise UTF-8
    // characters (SentencePiece-style BPE, Llama 2 / Mistral).
    bool byte_level = true;
    // Character mode: a character outside the vocabulary becomes its <0xXX>
    // byte tokens when they all exist, else the unknown token (if any).
    bool byte_fallback = false;
    std::optional<int32_t> unk_id;
    bool fuse_unk = false;  // Consecutive unknown characters give one unknown token.
  };

  // `vocab` maps token strings (bytes in byte-level mode) to ids; `merges` lists
  // (left, right) pairs in priority order (a later duplicate overrides an
  // earlier one, as in Hugging Face). A merge whose parts or result are not in
  // the vocabulary is an error.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, const Options& options);

  // Appends the ids for one pre-tokenized piece (valid UTF-8). Symbols with no
  // token and no fallback are dropped, as Hugging Face does without unk_token.
  void Encode(absl::string_view piece, Scratch* scratch, std::vector<int32_t>* out) const;

  std::optional<int32_t> Find(absl::string_view bytes) const;
  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  BpeModel() = default;
  const Merge* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                           static_cast<uint32_t>(right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void InitialCharSymbols(absl::string_view piece, std::vector<int32_t>* ids) const;
  void MergeSmall(Scratch* s, std::vector<int32_t>* out) const;
  void MergeLarge(Scratch* s, std::vector<int32_t>* out) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];           // Single-byte tokens (byte-level mode).
  int32_t byte_fallback_ids_[256];  // <0xXX> tokens, -1 when missing.
  Options options_;
  PieceCache cache_;
};

}  // namespace floe
