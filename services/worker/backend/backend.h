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

  // Applies the copies in order (a verified tree path is compacted into its
  // chain slots with it). Backends that do not verify trees need not
  // implement it: the engine sends parents only where this works.
  virtual absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) {
    (void)copies;
    return absl::UnimplementedError("this backend cannot copy KV slots (tree drafts)");
  }
};

}  // namespace floe
