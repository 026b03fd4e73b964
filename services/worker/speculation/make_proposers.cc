#include "services/worker/speculation/make_proposers.h"

#include "absl/strings/str_cat.h"
#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/remote_suffix_source.h"

namespace floe {

absl::StatusOr<std::vector<std::unique_ptr<Proposer>>> MakeProposers(const SpeculationConfig& config) {
  std::vector<std::unique_ptr<Proposer>> proposers;
  if (!config.suffix_cache_addresses.empty() && config.method != "suffix") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--suffix-cache is used by --speculative suffix only; --speculative is \"", config.method, "\""));
  }
  if (config.method == "off") return proposers;
  if (config.num_tokens < 1 || config.num_tokens > 64)
    return absl::InvalidArgumentError(
        absl::StrCat("--num-speculative-tokens must be in [1, 64], got ", config.num_tokens));
  if (config.method == "ngram") {
    proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{1, 4, config.num_tokens}));
    return proposers;
  }
  if (config.method == "suffix") {
    SuffixProposerOptions options;
    if (!config.reference_compatible) suffix_cache::ApplyDefaultMode(&options.params);
    options.params.max_spec_tokens = config.num_tokens;
    options.params.use_tree_spec = config.tree;
    std::unique_ptr<GlobalDraftSource> global;
    if (!config.suffix_cache_addresses.empty()) {
      suffix_cache::ClientOptions client_options;
      client_options.addresses = config.suffix_cache_addresses;
      client_options.credentials = config.credentials;
      client_options.step_deadline = std::chrono::milliseconds(config.suffix_cache_deadline_ms);
      // Start/End run on the source's lifecycle thread, never the engine's;
      // a stopped replica still should not hold up the queue for long.
      client_options.call_deadline = std::chrono::milliseconds(100);
      auto client = suffix_cache::SuffixCacheClient::Create(client_options);
      if (!client.ok()) return client.status();
      RemoteSuffixOptions remote;
      remote.stats = config.suffix_cache_stats;
      global = std::make_unique<RemoteSuffixSource>(std::move(client).value(), options.params, std::move(remote));
    }
    proposers.push_back(std::make_unique<SuffixProposer>(options, std::move(global)));
    return proposers;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative must be off, ngram or suffix, got \"", config.method, "\""));
}

}  // namespace floe
