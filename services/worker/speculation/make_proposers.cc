#include "services/worker/speculation/make_proposers.h"

#include "absl/strings/str_cat.h"
#include "services/worker/speculation/lstm_proposer.h"
#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/remote_suffix_source.h"

namespace floe {

namespace {

absl::StatusOr<std::unique_ptr<Proposer>> MakeSuffixProposer(const SpeculationConfig& config) {
  SuffixProposerOptions options;
  if (!config.reference_compatible) suffix_cache::ApplyDefaultMode(&options.params);
  options.params.max_spec_tokens = config.num_tokens;
  options.params.use_tree_spec = config.tree;
  std::unique_ptr<GlobalDraftSource> global;
  if (!config.suffix_cache_addresses.empty()) {
    suffix_cache::ClientOptions client_options;
    client_options.addresses = config.suffix_cache_addresses;
    client_options.credentials = config.credentials;
    client_options.internal_trust = config.internal_trust;
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
  return std::make_unique<SuffixProposer>(options, std::move(global));
}

absl::StatusOr<std::unique_ptr<Proposer>> MakeLstmProposer(const SpeculationConfig& config) {
  auto speculator = LstmSpeculator::Load(config.speculator_dir, config.speculator_threads);
  if (!speculator.ok()) {
    return absl::Status(speculator.status().code(),
                        absl::StrCat("--speculator ", config.speculator_dir, ": ", speculator.status().message()));
  }
  if (config.target_hidden_size > 0) {
    absl::Status fits =
        (*speculator)->CheckFits(config.target_hidden_size, config.target_vocab_size, config.target_name);
    if (!fits.ok()) return absl::Status(fits.code(), absl::StrCat("--speculator ", config.speculator_dir, ": ", fits.message()));
  }
  return std::make_unique<LstmProposer>(std::move(speculator).value());
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Proposer>>> MakeProposers(const SpeculationConfig& config) {
  std::vector<std::unique_ptr<Proposer>> proposers;
  const std::string& method = config.method;
  if (method != "off" && method != "ngram" && method != "suffix" && method != "lstm" && method != "suffix+lstm") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative must be off, ngram, suffix, lstm or suffix+lstm, got \"", method, "\""));
  }
  const bool suffix = method == "suffix" || method == "suffix+lstm";
  const bool lstm = method == "lstm" || method == "suffix+lstm";
  if (!config.suffix_cache_addresses.empty() && !suffix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--suffix-cache is used by --speculative suffix and suffix+lstm only; --speculative is \"", method, "\""));
  }
  if (lstm == config.speculator_dir.empty()) {
    return absl::InvalidArgumentError(
        lstm ? absl::StrCat("--speculative ", method, " needs --speculator DIR (an Arctic speculator checkpoint)")
             : absl::StrCat("--speculator is used by --speculative lstm and suffix+lstm only; --speculative is \"",
                            method, "\""));
  }
  if (method == "off") return proposers;
  if (config.num_tokens < 1 || config.num_tokens > 64)
    return absl::InvalidArgumentError(
        absl::StrCat("--num-speculative-tokens must be in [1, 64], got ", config.num_tokens));
  if (method == "ngram") {
    proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{1, 4, config.num_tokens}));
    return proposers;
  }
  if (suffix) {
    auto proposer = MakeSuffixProposer(config);
    if (!proposer.ok()) return proposer.status();
    proposers.push_back(std::move(proposer).value());
  }
  if (lstm) {
    auto proposer = MakeLstmProposer(config);
    if (!proposer.ok()) return proposer.status();
    proposers.push_back(std::move(proposer).value());
  }
  return proposers;
}

}  // namespace floe
