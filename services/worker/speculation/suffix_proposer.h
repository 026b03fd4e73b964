// Suffix Decoding drafts in process: a per-request suffix tree over prompt +
// own output, and a worker-wide global tree of this worker's responses (the
// library's SuffixSpeculator, one per namespace so tenants never draft from
// each other's text). Path drafts, or tree drafts with
// params.use_tree_spec (floe-worker --speculative-tree; the engine verifies a
// tree in one pass). The remote tree always drafts paths.
//
// The cluster-wide tree (floe-suffix-cache) plugs in as a GlobalDraftSource:
// asked once per step for the same sequences, under its own deadline (late
// answers come back empty); per sequence the better-scoring draft wins, the
// local one on ties.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "services/suffix_cache/suffix_tree/suffix_speculator.h"
#include "services/worker/speculation/proposer.h"

namespace floe {

// A remote draft source (the suffix-cache service). Same threading and
// lifecycle contract as Proposer; Query must return within its deadline.
class GlobalDraftSource {
 public:
  virtual ~GlobalDraftSource() = default;
  virtual void Query(std::span<const SpecSequence> batch, int max_spec_tokens, std::span<DraftProposal> out) = 0;
  // The request's final tokens, so the remote tree gets the whole response.
  virtual void Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
                      int32_t prompt_len) = 0;
};

struct SuffixProposerOptions {
  int max_depth = 64;
  int64_t max_cached_requests = 10000;  // per namespace; 0: no global tree
  suffix_cache::DraftParams params;     // max_spec_tokens is capped by SpecSequence::max_draft
};

class SuffixProposer final : public Proposer {
 public:
  explicit SuffixProposer(SuffixProposerOptions options, std::unique_ptr<GlobalDraftSource> global = nullptr);
  ~SuffixProposer() override;
  std::string_view name() const override { return "suffix"; }
  bool scores_expected_accepted() const override { return true; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override;
  void Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
              int32_t prompt_len) override;

 private:
  suffix_cache::SuffixSpeculator& SpeculatorFor(std::string_view ns);
  // Brings the speculator's copy of the request up to `tokens`.
  void Sync(suffix_cache::SuffixSpeculator& speculator, std::string_view request_id,
            std::span<const int32_t> tokens, int32_t prompt_len);

  SuffixProposerOptions options_;
  std::unique_ptr<GlobalDraftSource> global_;
  absl::flat_hash_map<std::string, std::unique_ptr<suffix_cache::SuffixSpeculator>> by_namespace_;
  absl::flat_hash_map<std::string, size_t> appended_;  // live request id -> tokens handed over
  std::vector<DraftProposal> remote_;
};

}  // namespace floe
