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

  // `vocab` maps token bytes to ids; `merges` lists (left, right) byte strings in
  // priority order (a later duplicate overrides an earlier one, as in Hugging Face).
  // A merge whose parts or result are not in the vocabulary is an error.
  // `ignore_merges`: a piece that is itself in the vocabulary is emitted whole.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);

  // Appends the ids for one pre-tokenized piece. Bytes with no single-byte token
  // are dropped (there is no unknown token in byte-level vocabularies).
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
  void MergeSmall(Scratch* s, std::vector<int32_t>* out) const;
  void MergeLarge(Scratch* s, std::vector<int32_t>* out) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  bool ignore_merges_ = false;
  PieceCache cache_;
};

}  // namespace floe
