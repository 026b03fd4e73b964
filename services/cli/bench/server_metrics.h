// Before/after snapshots of the servers' /metrics, turned into what a run did
// on the server side: prefix-cache hit rate, speculative acceptance rate and
// mean accepted length, preemptions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace floe::bench {

using MetricsSnapshot = std::map<std::string, double>;  // summed over every URL

// Scrapes every URL (errors are reported on stderr and that URL skipped).
MetricsSnapshot ScrapeAll(const std::vector<std::string>& urls);

// The run's deltas and derived rates; rates are null when their denominator is 0.
nlohmann::json ServerDelta(const MetricsSnapshot& before, const MetricsSnapshot& after);

}  // namespace floe::bench
