#include "services/suffix_cache/suffix_tree/eviction_policy.h"

#include "absl/strings/str_cat.h"

namespace floe::suffix_cache {

absl::StatusOr<EvictionKind> ParseEvictionKind(absl::string_view name) {
  if (name == "fifo") return EvictionKind::kFifo;
  if (name == "usage") return EvictionKind::kUsage;
  return absl::InvalidArgumentError(
      absl::StrCat("eviction: unknown policy '", name, "' (fifo, usage)"));
}

const char* EvictionKindName(EvictionKind kind) {
  return kind == EvictionKind::kUsage ? "usage" : "fifo";
}

void EvictionPolicy::PushBack(int32_t id, int64_t credit) {
  const uint64_t order = next_order_++;
  entries_[id] = Entry{order, credit};
  queue_.push_back(Slot{id, order});
}

void EvictionPolicy::Add(int32_t id) { PushBack(id, 0); }

void EvictionPolicy::Remove(int32_t id) {
  entries_.erase(id);
  DropStaleFront();
}

void EvictionPolicy::Credit(int32_t id, int64_t accepted) {
  if (kind_ != EvictionKind::kUsage || accepted <= 0) return;
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.credit += accepted;
}

int64_t EvictionPolicy::credit(int32_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.credit;
}

void EvictionPolicy::DropStaleFront() {
  while (!queue_.empty()) {
    auto it = entries_.find(queue_.front().id);
    if (it != entries_.end() && it->second.order == queue_.front().order) return;
    queue_.pop_front();
  }
}

int32_t EvictionPolicy::PickVictim(int32_t protect) {
  // Each pass over a live slot either evicts it or spends its credit, so
  // this ends after at most two rounds of the queue.
  std::deque<Slot> skipped;  // the protected id, put back in front after
  int32_t victim = -1;
  while (!queue_.empty()) {
    const Slot s = queue_.front();
    queue_.pop_front();
    auto it = entries_.find(s.id);
    if (it == entries_.end() || it->second.order != s.order) continue;  // stale
    if (s.id == protect) {
      skipped.push_back(s);
      continue;
    }
    if (it->second.credit > 0) {  // usage: a second chance, paid with its credit
      PushBack(s.id, 0);
      continue;
    }
    victim = s.id;
    entries_.erase(it);
    break;
  }
  for (auto r = skipped.rbegin(); r != skipped.rend(); ++r) queue_.push_front(*r);
  DropStaleFront();
  return victim;
}

}  // namespace floe::suffix_cache
