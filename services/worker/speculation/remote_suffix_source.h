// The cluster-wide global suffix tree (floe-suffix-cache) as a
// GlobalDraftSource for SuffixProposer, through SuffixCacheClient.
//
// Per step: one SuffixCacheClient::Step for the batch (the client fans out
// per replica and drops answers later than its step_deadline, a few ms), each
// entry carrying the response tokens emitted since the last acknowledged
// offset. A request is registered (StartRequest) the first time it is asked
// about and ended (a last append-only Step, then EndRequest) when it leaves
// the engine, so its response joins the shared tree. Lifecycle calls are
// synchronous on the engine thread under the client's call_deadline (keep it
// short; a down replica fails fast with UNAVAILABLE). After a late or lost
// answer the next Step's offset check (FAILED_PRECONDITION naming the
// server's count) resynchronises the request.
//
// Thread: the engine thread only (as Proposer).
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "services/suffix_cache/client/suffix_cache_client.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"
#include "services/worker/speculation/suffix_proposer.h"

namespace floe {

class RemoteSuffixSource final : public GlobalDraftSource {
 public:
  // `client` must outlive this source.
  RemoteSuffixSource(suffix_cache::SuffixCacheClient* client, suffix_cache::DraftParams params);
  // Owns the client.
  RemoteSuffixSource(std::unique_ptr<suffix_cache::SuffixCacheClient> client, suffix_cache::DraftParams params);
  void Query(std::span<const SpecSequence> batch, int max_spec_tokens, std::span<DraftProposal> out) override;
  void Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
              int32_t prompt_len) override;

  struct Counters {
    int64_t steps = 0;
    int64_t failed_entries = 0;  // late, unavailable or out of order
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Remote {
    std::string ns;
    int64_t acknowledged = 0;  // response tokens the server has
    bool broken = false;       // Start failed: never asked again
  };
  Remote* Track(const SpecSequence& s);
  void AddEntry(floe::v1::SuffixStepRequest& step, const std::string& id, const Remote& r,
                std::span<const int32_t> tokens, int32_t prompt_len, bool speculate);
  void Absorb(Remote& r, const floe::v1::SuffixDraft& result, int64_t sent_to);

  std::unique_ptr<suffix_cache::SuffixCacheClient> owned_;
  suffix_cache::SuffixCacheClient* client_;
  suffix_cache::DraftParams params_;
  absl::flat_hash_map<std::string, Remote> live_;
  Counters counters_;
};

}  // namespace floe
