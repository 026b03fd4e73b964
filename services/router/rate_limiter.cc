#include "services/router/rate_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace floe {

RateLimiter::RateLimiter(double requests_per_s, double tokens_per_s)
    : requests_per_s_(requests_per_s), tokens_per_s_(tokens_per_s) {}

absl::Status RateLimiter::Charge(const std::string& tenant, int64_t tokens, Clock::time_point now) {
  if (!enabled()) return absl::OkStatus();
  // A bucket holds one second's worth (at least one request), so a burst of
  // a second's budget passes and a steady stream is held to the rate.
  const double request_burst = std::max(1.0, requests_per_s_);
  const double token_burst = tokens_per_s_;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = buckets_.try_emplace(tenant);
  Bucket& b = it->second;
  if (fresh) {
    b.requests = request_burst;
    b.tokens = token_burst;
    b.updated = now;
  }
  const double dt = std::chrono::duration<double>(now - b.updated).count();
  b.updated = now;
  b.requests = std::min(request_burst, b.requests + dt * requests_per_s_);
  b.tokens = std::min(token_burst, b.tokens + dt * tokens_per_s_);
  double wait = 0;
  std::string what;
  if (requests_per_s_ > 0 && b.requests < 1) {
    wait = (1 - b.requests) / requests_per_s_;
    what = absl::StrCat(requests_per_s_, " requests/s");
  }
  if (tokens_per_s_ > 0) {
    if (tokens > token_burst)
      return absl::ResourceExhaustedError(absl::StrCat("request of ", tokens, " tokens (prompt + max_tokens) exceeds tenant \"",
                                                       tenant, "\"'s limit of ", tokens_per_s_, " tokens/s"));
    if (b.tokens < tokens) {
      const double token_wait = (tokens - b.tokens) / tokens_per_s_;
      if (token_wait > wait) {
        wait = token_wait;
        what = absl::StrCat(tokens_per_s_, " tokens/s");
      }
    }
  }
  if (wait > 0)
    return absl::ResourceExhaustedError(absl::StrFormat("rate limit of tenant \"%s\" (%s); retry in %.2f s", tenant,
                                                        what, wait));
  if (requests_per_s_ > 0) b.requests -= 1;
  if (tokens_per_s_ > 0) b.tokens -= static_cast<double>(tokens);
  return absl::OkStatus();
}

}  // namespace floe
