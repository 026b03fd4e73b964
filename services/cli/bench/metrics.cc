#include "services/cli/bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace floe::bench {

double Tpot(const RequestRecord& r) {
  if (r.output_tokens <= 1 || r.ttft_ms < 0) return 0;
  return (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1);
}

std::vector<double> TokenItls(const RequestRecord& r) {
  std::vector<double> itls;
  bool first = true;
  double previous_ms = 0;
  for (const ChunkEvent& chunk : r.chunks) {
    if (chunk.tokens <= 0) continue;  // text-only chunks carry no token
    if (first) {
      itls.insert(itls.end(), chunk.tokens - 1, 0.0);
      first = false;
    } else {
      itls.insert(itls.end(), chunk.tokens, (chunk.t_ms - previous_ms) / chunk.tokens);
    }
    previous_ms = chunk.t_ms;
  }
  return itls;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - lo);
}

LatencyStats Stats(const std::vector<double>& values) {
  LatencyStats s;
  s.count = static_cast<int>(values.size());
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(squares / values.size());  // population std, as numpy.std
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

absl::StatusOr<Slo> ParseSlo(const std::string& text) {
  Slo slo;
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(" ,"), absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(item, ':');
    double ms;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &ms) || ms <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: \"", item, "\" is not NAME:MILLISECONDS with a positive value"));
    }
    if (kv[0] == "ttft") {
      slo.ttft_ms = ms;
    } else if (kv[0] == "tpot") {
      slo.tpot_ms = ms;
    } else if (kv[0] == "e2el" || kv[0] == "e2e") {
      slo.e2e_ms = ms;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--goodput: unknown metric \"", kv[0], "\" (ttft, tpot, e2el)"));
    }
  }
  if (slo.empty()) return absl::InvalidArgumentError("--goodput: no SLO given (e.g. \"ttft:500 tpot:50\")");
  return slo;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms >= 0 && r.ttft_ms > slo.ttft_ms) return false;
  if (slo.tpot_ms >= 0 && Tpot(r) > slo.tpot_ms) return false;
  if (slo.e2e_ms >= 0 && r.e2e_ms > slo.e2e_ms) return false;
  return true;
}

Summary Summarize(const std::vector<RequestRecord>& records, const Slo& slo) {
  Summary s;
  if (records.empty()) return s;
  double first_s = records.front().start_s, last_s = first_s;
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end)
  std::map<int64_t, int64_t> tokens_per_second;
  for (const RequestRecord& r : records) {
    const double end_s = r.start_s + r.e2e_ms / 1000.0;
    first_s = std::min(first_s, r.start_s);
    last_s = std::max(last_s, end_s);
    edges.push_back({r.start_s, +1});
    edges.push_back({end_s, -1});
    if (!r.ok) {
      ++s.failed;
      ++s.failures_by_code[absl::StatusCodeToString(static_cast<absl::StatusCode>(r.status_code))];
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    s.total_cached_tokens += r.usage_cached_tokens;
    if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
    if (r.output_tokens > 1) tpot.push_back(Tpot(r));
    e2e.push_back(r.e2e_ms);
    std::vector<double> request_itls = TokenItls(r);
    itl.insert(itl.end(), request_itls.begin(), request_itls.end());
    for (const ChunkEvent& c : r.chunks) {
      tokens_per_second[static_cast<int64_t>(std::floor(r.start_s + c.t_ms / 1000.0))] += c.tokens;
    }
    if (!slo.empty() && MeetsSlo(r, slo)) ++s.good_requests;
  }
  // Ends sort before starts at equal times: a request that ends as another
  // begins does not overlap it.
  std::sort(edges.begin(), edges.end());
  int in_flight = 0;
  for (const auto& edge : edges) s.peak_concurrency = std::max(s.peak_concurrency, in_flight += edge.second);
  for (const auto& bucket : tokens_per_second) {
    s.peak_output_throughput = std::max(s.peak_output_throughput, static_cast<double>(bucket.second));
  }
  s.duration_s = last_s - first_s;
  if (s.duration_s > 0) {
    s.request_throughput = s.completed / s.duration_s;
    s.output_throughput = s.total_output_tokens / s.duration_s;
    s.total_token_throughput = (s.total_input_tokens + s.total_output_tokens) / s.duration_s;
    s.goodput = s.good_requests / s.duration_s;
  }
  s.ttft_ms = Stats(ttft);
  s.tpot_ms = Stats(tpot);
  s.itl_ms = Stats(itl);
  s.e2e_ms = Stats(e2e);
  return s;
}

}  // namespace floe::bench
