// Which sequences one engine step runs, and how many tokens of each: the
// step plan. Running sequences first, oldest admission first, so decodes
// never starve: each its pending tokens (1 while decoding) plus its draft,
// as far as the step's token budget goes. When KV blocks run out, a
// sequence's draft goes first, then the most recently admitted running
// sequence not yet planned is preempted (recompute: its blocks go back and
// it waits at the head of the queue). Then waiting sequences join in FIFO
// order, taking their longest cached prefix, unless the step preempted or
// the batch is full (max_num_seqs).
//
// Not thread-safe: the engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "services/worker/engine/prefix_chain.h"
#include "services/worker/engine/sequence.h"

namespace floe {

struct SchedulerLimits {
  int32_t max_num_batched_tokens = 512;  // tokens of one step, drafts included
  int32_t max_num_seqs = 64;             // running sequences
};

// One sequence of the step plan: it runs num_tokens tokens (its pending
// prompt chunk, or its decode token plus its draft).
struct Planned {
  Sequence* seq = nullptr;
  int32_t num_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerLimits limits, PrefixChain& chain) : limits_(limits), chain_(chain) {}

  // Queues a new sequence at the back of the waiting line.
  void Add(Sequence* seq) { waiting_.push_back(seq); }
  // Forgets a finished or aborted sequence (its blocks are the caller's to release).
  void Remove(Sequence* seq);

  // The next step's plan (empty: nothing can run). Takes blocks for every
  // planned token and may preempt.
  std::vector<Planned> Schedule();

  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  void Preempt(Sequence& seq);
  bool Admit(Sequence& seq, int32_t budget, std::vector<Planned>& plan);

  SchedulerLimits limits_;
  PrefixChain& chain_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;   // FIFO; the preempted at the front
  int64_t admission_counter_ = 0;
  int64_t preemptions_ = 0;
};

}  // namespace floe
