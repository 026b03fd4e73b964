// The seam between the engine (scheduling, KV block accounting, sampling) and
// the device that runs the model. The engine knows block ids and token
// positions only; device, dtype and rank live behind this interface, so CUDA
// and tensor/sequence parallel backends plug in without touching the scheduler.
//
// Threading: one engine thread calls every method; a backend may use its own
// worker threads inside Forward().
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "services/worker/model/forward_batch.h"
#include "services/worker/model/model_config.h"

namespace floe {

// How the engine wants one logits row of the last Forward handled by a
// backend that samples on its device (Backend::SamplesOnDevice).
struct RowSampling {
  enum class Action : uint8_t {
    kSample,    // draw the token on the device
    kDownload,  // copy the logits to the host (the engine samples: penalties, banned tokens, logprobs)
    kNone,      // neither (a forced token)
  };
  Action action = Action::kSample;
  // The sampler's stages that need no request history (sampling/sampler.h),
  // drawn with CounterUniform(seed, position) as the CPU sampler draws.
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t position = 0;  // the token's index in the output
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const ModelConfig& config() const = 0;

  // Bytes of KV memory one block of `block_size` tokens takes (all layers, K and V).
  virtual size_t KvBytesPerBlock(int block_size) const = 0;

  // Allocates the KV pool: num_blocks blocks of block_size token slots each.
  // Called once before the first Forward.
  virtual absl::Status AllocateKvCache(int num_blocks, int block_size) = 0;

  // Runs the model over every sequence of the batch, writing K/V of each new
  // token into its block slot, and the logits rows (vocab_size floats each) of
  // every sequence's last num_logits tokens into `logits`, sequences in order
  // (null: none wanted, as on a rank other than 0 of a worker over ranks).
  // Token ids are in [0, vocab_size): the engine runs only resolved prompts
  // (ResolveRequest), sampled tokens and range-checked drafts.
  virtual absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) = 0;

  // The mode of the following Forwards on a worker over several ranks
  // (every rank the same; forward_batch.h). One rank ignores it.
  virtual void SetParallelMode(ParallelMode mode) { (void)mode; }

  // The final hidden states of the last Forward's logits rows (hidden_size
  // floats each, after the model's last norm: the lm_head's input), rows in
  // the order of the logits; valid until the next Forward. Model-based
  // speculators (an LSTM head over the target's hidden state) read them.
  // Empty where a backend does not export them.
  virtual std::span<const float> LastHiddenStates() const { return {}; }

  // A backend that keeps the logits on its device and samples there (the
  // vocabulary-wide download of every row then never happens): the engine
  // calls Forward with logits == nullptr, then SampleLogits.
  virtual bool SamplesOnDevice() const { return false; }

  // One entry per logits row of the last Forward, in its order. kSample
  // writes the drawn token to tokens[i], or -1 where the device cannot draw
  // it (then the row's logits are copied as for kDownload); kDownload copies
  // the row's vocab_size logits to logits + i * vocab_size; kNone does
  // neither. tokens[i] is written for kSample rows only; both buffers must
  // be there (any drawn row may come back as a download). A non-greedy row
  // draws what Sampler::Sample draws from the same logits, up to reduction
  // order (a draw at the margin between two tokens may differ).
  virtual absl::Status SampleLogits(std::span<const RowSampling> rows, int32_t* tokens, float* logits) {
    (void)rows, (void)tokens, (void)logits;
    return absl::UnimplementedError("this backend does not sample on its device");
  }

  // Applies the copies in order (a verified tree path is compacted into its
  // chain slots with it). Backends that do not verify trees need not
  // implement it: the engine sends parents only where this works.
  virtual absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) {
    (void)copies;
    return absl::UnimplementedError("this backend cannot copy KV slots (tree drafts)");
  }
};

}  // namespace floe
