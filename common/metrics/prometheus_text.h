// Reads the Prometheus text exposition format into sample values, so tools
// (floe bench) can diff a server's counters before and after a run.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace floe {

// Sample name (with its label set as written, e.g. `x_total{proposer="ngram"}`)
// -> value. Comment lines are skipped; malformed lines are ignored.
std::map<std::string, double> ParsePrometheusText(absl::string_view text);

// Sum of every sample of `name` whatever its labels.
double SumByName(const std::map<std::string, double>& samples, const std::string& name);

// Sum of the samples of `name` whose label sets hold every one of `labels`
// (each as written, e.g. `call="step"`); NaN when none does, so a failed
// scrape never reads as 0.
double SumByLabels(const std::map<std::string, double>& samples, const std::string& name,
                   const std::vector<std::string>& labels = {});

}  // namespace floe
