#include "services/worker/structured/grammar_cache.h"

namespace floe {

GrammarCache::Lookup GrammarCache::Get(const GrammarKey& key, Clock::time_point deadline,
                                       absl::FunctionRef<absl::StatusOr<Compiled>()> compile) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    std::shared_ptr<Entry> entry = it->second;
    if (entry->kept) lru_.splice(lru_.begin(), lru_, entry->lru);
    ++waiting_;
    const bool done = compiled_.wait_until(lock, deadline, [&] { return entry->done; });
    --waiting_;
    if (!done) return {absl::DeadlineExceededError("waiting for another request's compile of the same grammar"), true};
    return {entry->result, true};
  }
  auto entry = std::make_shared<Entry>();
  // Node keys never move; iterators may (other keys are added meanwhile).
  const GrammarKey* stored = &entries_.emplace(key, entry).first->first;
  lock.unlock();
  absl::StatusOr<Compiled> result = compile();
  lock.lock();
  entry->result = result;
  entry->done = true;
  if (result.ok() && capacity_ > 0) {
    entry->kept = true;
    lru_.push_front(stored);
    entry->lru = lru_.begin();
    while (lru_.size() > capacity_) {
      const GrammarKey* oldest = lru_.back();
      lru_.pop_back();
      entries_.erase(entries_.find(*oldest));
    }
  } else {
    entries_.erase(entries_.find(*stored));
  }
  compiled_.notify_all();
  return {std::move(result), false};
}

int GrammarCache::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace floe
