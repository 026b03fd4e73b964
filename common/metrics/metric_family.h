// A Prometheus metric family with no samples yet, for collectors that build
// their families at scrape time (engine, pool and store state).
#pragma once

#include <string>

#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

namespace floe {

inline prometheus::MetricFamily MakeFamily(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

}  // namespace floe
