#include "common/tokenizer/stop_string_matcher.h"

#include <algorithm>

namespace floe {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::Consume(absl::string_view chunk) {
  Result result;
  if (stopped_) return result;
  held_.append(chunk.data(), chunk.size());
  const absl::string_view buffer(held_);
  // The stop string completed first wins (the one a token-by-token feed
  // would see first, so the result does not depend on how the text was
  // chunked); of those ending at the same byte, the longer one.
  size_t best = absl::string_view::npos;
  size_t best_end = absl::string_view::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& stop : stops_) {
    const size_t at = buffer.find(stop);
    if (at == absl::string_view::npos) continue;
    const size_t end = at + stop.size();
    if (end < best_end || (end == best_end && at < best)) {
      best = at;
      best_end = end;
      best_stop = &stop;
    }
  }
  if (best_stop != nullptr) {
    result.text.assign(held_, 0, best);
    result.stopped = true;
    result.matched = *best_stop;
    stopped_ = true;
    held_.clear();
    return result;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  // Earlier text was already checked the same way, so no stop string can start
  // in what was emitted before.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, buffer.size()); len > keep; --len) {
      if (buffer.substr(buffer.size() - len) == absl::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  result.text.assign(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStringMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace floe
