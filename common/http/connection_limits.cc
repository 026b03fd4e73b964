#include "common/http/connection_limits.h"

#include <algorithm>
#include <climits>

namespace floe::http {

int ConnectionCapForFdLimit(long soft_limit, int reserve) {
  if (soft_limit < 0) return INT_MAX;
  const long cap = soft_limit - std::max(reserve, 0);
  return static_cast<int>(std::clamp<long>(cap, 1, INT_MAX));
}

bool ConnectionLimits::TryAdmit(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (total_ >= max_total_) return false;
  auto [it, inserted] = by_client_.try_emplace(client, 0);
  if (max_per_client_ > 0 && it->second >= max_per_client_) return false;
  ++it->second;
  ++total_;
  return true;
}

void ConnectionLimits::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_client_.find(client);
  if (it == by_client_.end()) return;
  --total_;
  if (--it->second == 0) by_client_.erase(it);
}

int ConnectionLimits::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

int ConnectionLimits::from(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_client_.find(client);
  return it == by_client_.end() ? 0 : it->second;
}

}  // namespace floe::http
