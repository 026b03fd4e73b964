// Per-tenant rate limits: token buckets for requests per second and tokens
// per second (a request costs its prompt tokens plus its max_tokens, charged
// when it is admitted). Over the limit: RESOURCE_EXHAUSTED saying when to
// retry. A rate of 0 turns that bucket off. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace floe {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // burst: how much may be spent at once (at least one request / the rate).
  RateLimiter(double requests_per_s, double tokens_per_s);

  bool enabled() const { return requests_per_s_ > 0 || tokens_per_s_ > 0; }
  // Charges one request of `tokens` to `tenant`, or nothing and
  // RESOURCE_EXHAUSTED ("... retry in X s").
  absl::Status Charge(const std::string& tenant, int64_t tokens, Clock::time_point now = Clock::now());

 private:
  struct Bucket {
    double requests = 0, tokens = 0;
    Clock::time_point updated;
  };
  const double requests_per_s_, tokens_per_s_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_;  // one per tenant (bounded by the key file)
};

}  // namespace floe
