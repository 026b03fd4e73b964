// Proposers and speculators the speculation tests share: oracles that
// draft a request's known continuation (from a reference run) as a chain or
// a tree, corrupted where a test wants rejections, and the random Arctic
// LSTM speculator written for the tiny test model.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "services/worker/speculation/lstm_proposer.h"
#include "services/worker/speculation/proposer.h"
#include "services/worker/speculation/speculator_writer.h"
#include "tests/services/worker/engine/engine_test_harness.h"

namespace floe {

// Proposes each request's known continuation (from a reference run), with
// draft position `corrupt_at` (if >= 0) changed so it is rejected there.
// Past the reference's end it proposes token 7, so drafts may cross max_tokens.
class OracleProposer final : public Proposer {
 public:
  OracleProposer(std::map<std::string, Result> reference, int corrupt_at)
      : reference_(std::move(reference)), corrupt_at_(corrupt_at) {}
  std::string_view name() const override { return "oracle"; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::vector<int32_t>& want = reference_.at(std::string(batch[i].request_id)).tokens;
      const size_t produced = batch[i].tokens.size() - batch[i].prompt_len;
      for (int j = 0; j < batch[i].max_draft; ++j) {
        int32_t t = produced + j < want.size() ? want[produced + j] : 7;
        if (j == corrupt_at_) t = (t + 1) % 128000;
        out[i].tokens.push_back(t);
      }
      out[i].score = 1.0f;
    }
    ++calls_;
  }
  int calls() const { return calls_; }

 private:
  std::map<std::string, Result> reference_;
  int corrupt_at_;
  int calls_ = 0;
};

enum class TreeShape {
  kFirst,   // the true path is every node's first child, decoy branches after it
  kSecond,  // at every depth a decoy subtree (two nodes) comes before the true child
  kReject,  // only decoys under the root
  kBroken,  // like kSecond, but the true path is cut at depth 2 (a decoy there instead)
};

inline int32_t Decoy(int32_t t, int salt) { return (t + 1 + salt) % 128000; }

// Builds a tree of at most max_draft nodes around the request's known
// continuation (from a reference run; token 7 past its end).
class TreeOracleProposer final : public Proposer {
 public:
  TreeOracleProposer(std::map<std::string, Result> reference, TreeShape shape)
      : reference_(std::move(reference)), shape_(shape) {}
  std::string_view name() const override { return "tree-oracle"; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::vector<int32_t>& want = reference_.at(std::string(batch[i].request_id)).tokens;
      const size_t produced = batch[i].tokens.size() - batch[i].prompt_len;
      auto truth = [&](int d) { return produced + d < want.size() ? want[produced + d] : 7; };
      DraftProposal& p = out[i];
      auto add = [&](int32_t token, int32_t parent) {
        if (static_cast<int32_t>(p.tokens.size()) >= batch[i].max_draft) return -1;
        p.tokens.push_back(token);
        p.parents.push_back(parent);
        return static_cast<int32_t>(p.tokens.size()) - 1;
      };
      int32_t parent = -1;
      for (int d = 0; parent >= -1 && static_cast<int32_t>(p.tokens.size()) < batch[i].max_draft; ++d) {
        const int32_t t = truth(d);
        if (shape_ == TreeShape::kReject) {
          const int32_t decoy = add(Decoy(t, d), -1);
          add(Decoy(t, d + 50), decoy);
          continue;
        }
        if (shape_ != TreeShape::kFirst) {
          const int32_t decoy = add(Decoy(t, 0), parent);
          if (decoy >= 0) add(truth(d + 1), decoy);  // a decoy subtree under it
        }
        const int32_t node = add(shape_ == TreeShape::kBroken && d == 2 ? Decoy(t, 9) : t, parent);
        if (shape_ == TreeShape::kFirst) add(Decoy(t, 1), parent);
        if (node < 0) break;
        parent = node;
      }
      p.score = 1.0f;
    }
  }

 private:
  std::map<std::string, Result> reference_;
  TreeShape shape_;
};

// A random LSTM speculator (seed 5) fitted to `config`, written to `dir`.
inline void WriteTestSpeculator(const ModelConfig& config, const std::string& dir) {
  SpeculatorSpec spec;
  spec.hidden_size = config.hidden_size;
  spec.vocab_size = config.vocab_size;
  spec.dtype = DType::kF32;
  spec.seed = 5;
  ASSERT_TRUE(WriteRandomSpeculator(spec, dir).ok());
}

inline std::unique_ptr<Proposer> LoadTestLstm(const ModelConfig& config, const std::string& dir) {
  auto speculator = LstmSpeculator::Load(dir, 1);
  EXPECT_TRUE(speculator.ok()) << speculator.status();
  EXPECT_TRUE((*speculator)->CheckFits(config.hidden_size, config.vocab_size, "t").ok());
  return std::make_unique<LstmProposer>(std::move(speculator).value());
}

}  // namespace floe
