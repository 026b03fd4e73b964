#include "services/cli/bench/server_metrics.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"

namespace floe::bench {
namespace {

constexpr const char* kCounters[] = {
    "floe_prefix_cache_queries_total",       "floe_prefix_cache_hits_total",
    "floe_spec_decode_num_draft_tokens_total",   "floe_spec_decode_num_accepted_tokens_total",
    "floe_spec_decode_num_drafts_total",         "floe_num_preemptions_total",
    "floe_generation_tokens_total",          "floe_prompt_tokens_total",
};

}  // namespace

MetricsSnapshot ScrapeAll(const std::vector<std::string>& urls, const HttpGetOptions& options) {
  MetricsSnapshot snapshot;
  for (const std::string& url : urls) {
    auto body = HttpGet(url, options);
    if (!body.ok()) {
      std::fprintf(stderr, "floe bench: warning: cannot scrape %s: %s\n", url.c_str(),
                   std::string(body.status().message()).c_str());
      continue;
    }
    auto samples = ParsePrometheusText(*body);
    for (const char* name : kCounters) snapshot[name] += SumByName(samples, name);
  }
  return snapshot;
}

MetricsSnapshot ScrapeSettled(const std::vector<std::string>& urls, const HttpGetOptions& options,
                              int max_wait_ms) {
  MetricsSnapshot last = ScrapeAll(urls, options);
  if (urls.empty()) return last;
  for (int waited = 0; waited < max_wait_ms; waited += 50) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    MetricsSnapshot next = ScrapeAll(urls, options);
    if (next == last) break;
    last = std::move(next);
  }
  return last;
}

nlohmann::json ServerDelta(const MetricsSnapshot& before, const MetricsSnapshot& after) {
  auto delta = [&](const char* name) {
    auto a = after.find(name), b = before.find(name);
    return (a == after.end() ? 0.0 : a->second) - (b == before.end() ? 0.0 : b->second);
  };
  auto ratio = [](double num, double den) { return den > 0 ? nlohmann::json(num / den) : nlohmann::json(nullptr); };
  nlohmann::json out;
  for (const char* name : kCounters) out["delta"][name] = delta(name);
  out["prefix_hit_rate"] = ratio(delta("floe_prefix_cache_hits_total"), delta("floe_prefix_cache_queries_total"));
  out["spec_acceptance_rate"] =
      ratio(delta("floe_spec_decode_num_accepted_tokens_total"), delta("floe_spec_decode_num_draft_tokens_total"));
  out["spec_mean_accepted_length"] =
      ratio(delta("floe_spec_decode_num_accepted_tokens_total"), delta("floe_spec_decode_num_drafts_total"));
  out["preemptions"] = delta("floe_num_preemptions_total");
  return out;
}

}  // namespace floe::bench
