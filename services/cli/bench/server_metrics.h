// Before/after snapshots of the servers' /metrics, turned into what a run did
// on the server side: prefix-cache hit rate, speculative acceptance rate and
// mean accepted length, preemptions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/metrics/http_get.h"

namespace floe::bench {

using MetricsSnapshot = std::map<std::string, double>;  // summed over every URL

// Scrapes every URL (errors are reported on stderr and that URL skipped);
// https:// URLs with the bench's --tls-* files.
MetricsSnapshot ScrapeAll(const std::vector<std::string>& urls, const HttpGetOptions& options);
// ScrapeAll once the counters stop moving: a worker publishes its counters
// after each engine step, while the step's tokens reach clients during it,
// so a scrape right after the last response can miss the last step. Scrapes
// every 50 ms until two agree, at most `max_wait_ms`.
MetricsSnapshot ScrapeSettled(const std::vector<std::string>& urls, const HttpGetOptions& options,
                              int max_wait_ms = 1000);

// The run's deltas and derived rates; rates are null when their denominator is 0.
nlohmann::json ServerDelta(const MetricsSnapshot& before, const MetricsSnapshot& after);

}  // namespace floe::bench
