#include "services/cli/bench/report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace floe::bench {
namespace {

nlohmann::json StatsJson(const LatencyStats& s) {
  return {{"mean", s.mean}, {"std", s.stddev}, {"p50", s.p50}, {"p90", s.p90},
          {"p99", s.p99},   {"min", s.min},    {"max", s.max}, {"count", s.count}};
}

struct Row {
  const char* name;
  double (*get)(const Summary&);
};

const std::vector<Row>& Rows() {
  static const std::vector<Row> kRows = {
      {"completed", [](const Summary& s) { return double(s.completed); }},
      {"failed", [](const Summary& s) { return double(s.failed); }},
      {"duration (s)", [](const Summary& s) { return s.duration_s; }},
      {"input tokens", [](const Summary& s) { return double(s.total_input_tokens); }},
      {"output tokens", [](const Summary& s) { return double(s.total_output_tokens); }},
      {"cached prompt tokens", [](const Summary& s) { return double(s.total_cached_tokens); }},
      {"request throughput (req/s)", [](const Summary& s) { return s.request_throughput; }},
      {"output throughput (tok/s)", [](const Summary& s) { return s.output_throughput; }},
      {"total throughput (tok/s)", [](const Summary& s) { return s.total_token_throughput; }},
      {"peak output (tok/s)", [](const Summary& s) { return s.peak_output_throughput; }},
      {"peak concurrency", [](const Summary& s) { return double(s.peak_concurrency); }},
      {"goodput (req/s)", [](const Summary& s) { return s.goodput; }},
      {"TTFT mean (ms)", [](const Summary& s) { return s.ttft_ms.mean; }},
      {"TTFT p50 (ms)", [](const Summary& s) { return s.ttft_ms.p50; }},
      {"TTFT p90 (ms)", [](const Summary& s) { return s.ttft_ms.p90; }},
      {"TTFT p99 (ms)", [](const Summary& s) { return s.ttft_ms.p99; }},
      {"TPOT mean (ms)", [](const Summary& s) { return s.tpot_ms.mean; }},
      {"TPOT p50 (ms)", [](const Summary& s) { return s.tpot_ms.p50; }},
      {"TPOT p90 (ms)", [](const Summary& s) { return s.tpot_ms.p90; }},
      {"TPOT p99 (ms)", [](const Summary& s) { return s.tpot_ms.p99; }},
      {"ITL mean (ms)", [](const Summary& s) { return s.itl_ms.mean; }},
      {"ITL p50 (ms)", [](const Summary& s) { return s.itl_ms.p50; }},
      {"ITL p90 (ms)", [](const Summary& s) { return s.itl_ms.p90; }},
      {"ITL p99 (ms)", [](const Summary& s) { return s.itl_ms.p99; }},
      {"E2E mean (ms)", [](const Summary& s) { return s.e2e_ms.mean; }},
      {"E2E p50 (ms)", [](const Summary& s) { return s.e2e_ms.p50; }},
      {"E2E p90 (ms)", [](const Summary& s) { return s.e2e_ms.p90; }},
      {"E2E p99 (ms)", [](const Summary& s) { return s.e2e_ms.p99; }},
  };
  return kRows;
}

std::string Title(const std::string& text) {
  const std::string bar(std::max<size_t>(8, (56 - text.size()) / 2), '=');
  return absl::StrCat(bar, " ", text, " ", bar, "\n");
}

// Writes "value cumulative_fraction" lines of one latency metric.
void WriteCdf(const std::string& path, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::ofstream out(path);
  for (size_t i = 0; i < values.size(); ++i) out << values[i] << " " << double(i + 1) / values.size() << "\n";
}

absl::Status RunGnuplot(const std::string& script_path) {
  const std::string command = absl::StrCat("gnuplot '", script_path, "' 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return absl::InternalError("--plot: cannot run gnuplot");
  std::string output;
  char buffer[512];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--plot: gnuplot failed (exit ", rc, "; install the gnuplot-nox package): ", output));
  }
  return absl::OkStatus();
}

}  // namespace

nlohmann::json SummaryJson(const Summary& s) {
  nlohmann::json failures = nlohmann::json::object();
  for (const auto& [code, n] : s.failures_by_code) failures[code] = n;
  return {{"completed", s.completed},
          {"failed", s.failed},
          {"duration_s", s.duration_s},
          {"total_input_tokens", s.total_input_tokens},
          {"total_output_tokens", s.total_output_tokens},
          {"total_cached_tokens", s.total_cached_tokens},
          {"request_throughput", s.request_throughput},
          {"output_throughput", s.output_throughput},
          {"total_token_throughput", s.total_token_throughput},
          {"good_requests", s.good_requests},
          {"goodput", s.goodput},
          {"peak_output_throughput", s.peak_output_throughput},
          {"peak_concurrency", s.peak_concurrency},
          {"ttft_ms", StatsJson(s.ttft_ms)},
          {"tpot_ms", StatsJson(s.tpot_ms)},
          {"itl_ms", StatsJson(s.itl_ms)},
          {"e2e_ms", StatsJson(s.e2e_ms)},
          {"failures_by_code", failures}};
}

nlohmann::json RecordJson(const RequestRecord& r) {
  nlohmann::json chunk_ms = nlohmann::json::array(), chunk_tokens = nlohmann::json::array();
  for (const ChunkEvent& c : r.chunks) {
    chunk_ms.push_back(c.t_ms);
    chunk_tokens.push_back(c.tokens);
  }
  return {{"index", r.index},
          {"session_id", r.session_id},
          {"turn", r.turn},
          {"ok", r.ok},
          {"status", absl::StatusCodeToString(static_cast<absl::StatusCode>(r.status_code))},
          {"error", r.error},
          {"finish_reason", r.finish_reason},
          {"start_s", r.start_s},
          {"prompt_tokens", r.prompt_tokens},
          {"max_tokens", r.max_tokens},
          {"output_tokens", r.output_tokens},
          {"usage", {{"prompt_tokens", r.usage_prompt_tokens},
                     {"completion_tokens", r.usage_completion_tokens},
                     {"cached_prompt_tokens", r.usage_cached_tokens}}},
          {"ttft_ms", r.ttft_ms},
          {"tpot_ms", Tpot(r)},
          {"e2e_ms", r.e2e_ms},
          {"chunk_ms", chunk_ms},
          {"chunk_tokens", chunk_tokens}};
}

nlohmann::json RunJson(const LabeledRun& run) {
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& r : run.result.records) requests.push_back(RecordJson(r));
  return {{"label", run.label},
          {"sweep_value", run.sweep_value},
          {"summary", SummaryJson(run.summary)},
          {"aborted", run.result.aborted},
          {"abort_reason", run.result.abort_reason},
          {"not_sent", run.result.not_sent},
          {"requests", requests}};
}

std::string SummaryTable(const LabeledRun& run) {
  std::string out = Title(absl::StrCat("Serving benchmark: ", run.label));
  for (const Row& row : Rows()) absl::StrAppendFormat(&out, "%-32s %14.2f\n", row.name, row.get(run.summary));
  for (const auto& [code, n] : run.summary.failures_by_code) absl::StrAppendFormat(&out, "  failed %-23s %14d\n", code, n);
  if (run.result.aborted) absl::StrAppend(&out, "ABORTED: ", run.result.abort_reason, "\n");
  return out + std::string(58, '=') + "\n";
}

std::string CompareTable(const LabeledRun& a, const LabeledRun& b) {
  std::string out = Title("Comparison");
  absl::StrAppend(&out, "A: ", a.label, "\nB: ", b.label, "\n");
  absl::StrAppendFormat(&out, "%-28s %14s %14s %8s\n", "", "A", "B", "B/A");
  for (const Row& row : Rows()) {
    const double x = row.get(a.summary), y = row.get(b.summary);
    absl::StrAppendFormat(&out, "%-28s %14.2f %14.2f %8s\n", row.name, x, y, x != 0 ? absl::StrFormat("%.3f", y / x) : "-");
  }
  return out;
}

std::string SweepTable(const std::vector<LabeledRun>& runs) {
  std::string out = Title("Sweep");
  absl::StrAppendFormat(&out, "%-18s %5s %8s %9s %9s %9s %9s %9s %9s %9s\n", "point", "fail", "req/s", "out tok/s",
                        "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99", "E2E p50");
  for (const LabeledRun& r : runs) {
    const Summary& s = r.summary;
    absl::StrAppendFormat(&out, "%-18s %5d %8.2f %9.1f %9.1f %9.1f %9.2f %9.2f %9.2f %9.1f\n", r.label, s.failed,
                          s.request_throughput, s.output_throughput, s.ttft_ms.p50, s.ttft_ms.p99, s.tpot_ms.p50,
                          s.tpot_ms.p99, s.itl_ms.p99, s.e2e_ms.p50);
  }
  return out;
}

absl::Status WritePlots(const std::string& dir, const std::vector<LabeledRun>& runs, bool is_sweep) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--plot: cannot create ", dir, ": ", ec.message()));
  const char* kMetrics[] = {"ttft", "tpot", "itl", "e2e"};
  std::ostringstream script;
  script << "set terminal pngcairo size 900,600 noenhanced\nset grid\nset key bottom right\n"
            "set ylabel 'fraction of requests (ITL: of tokens)'\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<double> ttft, tpot, itl, e2e;
    for (const RequestRecord& r : runs[i].result.records) {
      if (!r.ok) continue;
      if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
      if (r.output_tokens > 1) tpot.push_back(Tpot(r));
      std::vector<double> gaps = TokenItls(r);
      itl.insert(itl.end(), gaps.begin(), gaps.end());
      e2e.push_back(r.e2e_ms);
    }
    const std::vector<double>* series[] = {&ttft, &tpot, &itl, &e2e};
    for (int m = 0; m < 4; ++m) WriteCdf(absl::StrCat(dir, "/", kMetrics[m], "_", i, ".dat"), *series[m]);
  }
  for (const char* metric : kMetrics) {
    script << "set output '" << dir << "/cdf_" << metric << ".png'\nset title '" << metric << " CDF'\nset xlabel '"
           << metric << " (ms)'\nplot ";
    for (size_t i = 0; i < runs.size(); ++i) {
      script << (i ? ", " : "") << "'" << dir << "/" << metric << "_" << i << ".dat' using 1:2 with lines lw 2 title '"
             << runs[i].label << "'";
    }
    script << "\n";
  }
  if (is_sweep && runs.size() > 1) {
    std::ofstream data(dir + "/sweep.dat");
    for (const LabeledRun& r : runs) {
      data << r.sweep_value << " " << r.summary.output_throughput << " " << r.summary.tpot_ms.p50 << " "
           << r.summary.tpot_ms.p99 << " " << r.summary.ttft_ms.p50 << " " << r.summary.ttft_ms.p99 << "\n";
    }
    script << "set output '" << dir << "/throughput_latency.png'\nset title 'throughput vs latency'\n"
              "set xlabel 'output throughput (tok/s)'\nset ylabel 'TPOT (ms)'\nset y2label 'TTFT (ms)'\n"
              "set ytics nomirror\nset y2tics\nset key top left\nplot '"
           << dir << "/sweep.dat' using 2:3 with linespoints title 'TPOT p50', '' using 2:4 with linespoints title "
           << "'TPOT p99', '' using 2:5 axes x1y2 with linespoints title 'TTFT p50', '' using 2:6 axes x1y2 with "
           << "linespoints title 'TTFT p99'\n";
  }
  const std::string script_path = dir + "/plots.gnuplot";
  std::ofstream(script_path) << script.str();
  return RunGnuplot(script_path);
}

}  // namespace floe::bench
