#include "services/worker/engine/scheduler.h"

#include <algorithm>

namespace floe {

void Scheduler::Remove(Sequence* seq) {
  auto r = std::find(running_.begin(), running_.end(), seq);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
}

void Scheduler::Preempt(Sequence& seq) {
  chain_.Release(seq);
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  waiting_.push_front(&seq);
  ++preemptions_;
}

bool Scheduler::Admit(Sequence& seq, int32_t budget, std::vector<Planned>& plan) {
  chain_.AcquireCachedPrefix(seq);
  const int32_t n = std::min(seq.pending(), budget);
  if (!chain_.EnsureBlocks(seq, n)) {
    chain_.Release(seq);
    return false;
  }
  if (!seq.admitted_once) {
    seq.cached_prompt_tokens = seq.num_computed;
    seq.admitted_once = true;
    seq.first_scheduled = Sequence::Clock::now();
    seq.scheduled_once = true;
  }
  seq.admission = admission_counter_++;
  running_.push_back(&seq);
  plan.push_back({&seq, n});
  return true;
}

std::vector<Planned> Scheduler::Schedule() {
  std::vector<Planned> plan;
  int32_t budget = limits_.max_num_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const int32_t pending = seq.pending();
    // Drafts only ride on a decode, and only as far as the budget goes.
    if (pending != 1) seq.draft.clear();
    if (static_cast<int32_t>(seq.draft.size()) > budget - 1) seq.draft.resize(std::max(0, budget - 1));
    int32_t n = std::min(pending + static_cast<int32_t>(seq.draft.size()), budget);
    bool placed = true;
    while (!chain_.EnsureBlocks(seq, n)) {
      if (!seq.draft.empty()) {  // drop the draft before evicting anyone
        seq.draft.clear();
        n = std::min(pending, budget);
        continue;
      }
      // Evict the most recently admitted other running sequence not yet planned.
      Sequence* victim = nullptr;
      for (Sequence* other : running_) {
        if (other == &seq) continue;
        bool planned = std::any_of(plan.begin(), plan.end(), [&](const Planned& p) { return p.seq == other; });
        if (planned) continue;
        if (!victim || other->admission > victim->admission) victim = other;
      }
      preempted = true;
      if (!victim) {
        Preempt(seq);
        placed = false;
        break;
      }
      Preempt(*victim);
    }
    if (!placed) continue;  // running_[i] now holds the next sequence
    plan.push_back({&seq, n});
    budget -= n;
    ++i;
  }
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < limits_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    if (!Admit(seq, budget, plan)) break;
    waiting_.pop_front();
    budget -= plan.back().num_tokens;
  }
  return plan;
}

}  // namespace floe
