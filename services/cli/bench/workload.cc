#include "services/cli/bench/workload.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace floe::bench {
namespace {

class TokenSource {
 public:
  TokenSource(const RandomSpec& spec) : rng_(spec.seed), dist_(0, spec.vocab_size - 1) {
    excluded_.insert(spec.excluded_ids.begin(), spec.excluded_ids.end());
  }
  std::vector<int32_t> Draw(int n) {
    std::vector<int32_t> ids;
    ids.reserve(n);
    while (static_cast<int>(ids.size()) < n) {
      const int32_t id = dist_(rng_);
      if (!excluded_.count(id)) ids.push_back(id);
    }
    return ids;
  }
  int Length(int len, double ratio) {
    const int lo = std::max(1, static_cast<int>(len * (1 - ratio)));
    const int hi = std::max(lo, static_cast<int>(len * (1 + ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int32_t> dist_;
  std::unordered_set<int32_t> excluded_;
};

absl::Status CheckIdSpec(const RandomSpec& spec) {
  if (spec.vocab_size <= static_cast<int>(spec.excluded_ids.size()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", spec.vocab_size, " leaves no token ids to draw"));
  }
  return absl::OkStatus();
}

struct TraceLine {
  std::string session;
  std::vector<int32_t> prompt;
  int output_len;
};

absl::StatusOr<std::vector<TraceLine>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("trace ", path, ": cannot open"));
  std::vector<TraceLine> lines;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_array() ||
        !j.contains("output") || !j["output"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace ", path, ":", number, ": need a JSON object with arrays \"prompt\" and \"output\""));
    }
    TraceLine t;
    t.prompt = j["prompt"].get<std::vector<int32_t>>();
    t.output_len = static_cast<int>(j["output"].size());
    if (j.contains("session")) t.session = j["session"].is_string() ? j["session"].get<std::string>() : j["session"].dump();
    if (t.prompt.empty()) return absl::InvalidArgumentError(absl::StrCat("trace ", path, ":", number, ": empty prompt"));
    lines.push_back(std::move(t));
  }
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": no requests"));
  return lines;
}

int OutputLen(int from_trace, int override_len) { return override_len > 0 ? override_len : std::max(1, from_trace); }

}  // namespace

int CountRequests(const std::vector<Job>& jobs) {
  int n = 0;
  for (const Job& job : jobs) n += static_cast<int>(job.turns.size());
  return n;
}

absl::StatusOr<std::vector<Job>> RandomWorkload(const RandomSpec& spec) {
  if (spec.num_requests <= 0) return absl::InvalidArgumentError("--num-requests must be > 0");
  if (spec.input_len <= 0 || spec.output_len <= 0) {
    return absl::InvalidArgumentError("random workload: --input-len and --output-len must be > 0");
  }
  if (spec.range_ratio < 0 || spec.range_ratio >= 1) return absl::InvalidArgumentError("--range-ratio must be in [0, 1)");
  if (spec.prefix_len < 0) return absl::InvalidArgumentError("--prefix-len must be >= 0");
  if (absl::Status s = CheckIdSpec(spec); !s.ok()) return s;
  TokenSource source(spec);
  const std::vector<int32_t> prefix = source.Draw(spec.prefix_len);
  std::vector<Job> jobs(spec.num_requests);
  for (Job& job : jobs) {
    Turn turn;
    turn.prompt = prefix;
    const std::vector<int32_t> body = source.Draw(source.Length(spec.input_len, spec.range_ratio));
    turn.prompt.insert(turn.prompt.end(), body.begin(), body.end());
    turn.output_len = source.Length(spec.output_len, spec.range_ratio);
    job.turns.push_back(std::move(turn));
  }
  return jobs;
}

absl::StatusOr<std::vector<Job>> TraceWorkload(const std::string& path, int num_requests, int output_len) {
  if (num_requests <= 0) return absl::InvalidArgumentError("--num-requests must be > 0");
  auto lines = ReadTrace(path);
  if (!lines.ok()) return lines.status();
  std::vector<Job> jobs(num_requests);
  for (int i = 0; i < num_requests; ++i) {
    const TraceLine& t = (*lines)[i % lines->size()];
    jobs[i].turns.push_back({t.prompt, OutputLen(t.output_len, output_len)});
  }
  return jobs;
}

absl::StatusOr<std::vector<Job>> SessionWorkload(const std::string& path, int num_requests, int output_len) {
  if (num_requests <= 0) return absl::InvalidArgumentError("--num-requests must be > 0");
  auto lines = ReadTrace(path);
  if (!lines.ok()) return lines.status();
  std::vector<Job> jobs;
  std::map<std::string, size_t> index;
  for (const TraceLine& t : *lines) {
    auto [it, added] = index.emplace(t.session, jobs.size());
    if (added) {
      jobs.emplace_back();
      jobs.back().session_id = t.session.empty() ? absl::StrCat("bench-session-", jobs.size() - 1) : t.session;
      jobs.back().grow_history = true;
    }
    jobs[it->second].turns.push_back({t.prompt, OutputLen(t.output_len, output_len)});
  }
  std::vector<Job> taken;
  int remaining = num_requests;
  for (Job& job : jobs) {
    if (remaining == 0) break;
    if (static_cast<int>(job.turns.size()) > remaining) job.turns.resize(remaining);
    remaining -= static_cast<int>(job.turns.size());
    taken.push_back(std::move(job));
  }
  if (remaining > 0) {
    return absl::InvalidArgumentError(absl::StrCat("sessions ", path, ": only ", num_requests - remaining,
                                                   " turns, --num-requests asks for ", num_requests));
  }
  return taken;
}

absl::StatusOr<std::vector<Job>> ArrivalTraceWorkload(const std::string& path, const RandomSpec& ids) {
  if (absl::Status s = CheckIdSpec(ids); !s.ok()) return s;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("arrival trace ", path, ": cannot open"));
  struct Row {
    double t;
    int input_len, output_len;
  };
  std::vector<Row> rows;
  std::string line;
  std::vector<std::string> header;
  auto pick = [](const std::map<std::string, double>& fields, std::initializer_list<const char*> names, double* out) {
    for (const char* name : names) {
      if (auto it = fields.find(name); it != fields.end()) return *out = it->second, true;
    }
    return false;
  };
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    std::map<std::string, double> fields;
    if (text[0] == '{') {
      nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat("arrival trace ", path, ":", number, ": not a JSON object"));
      }
      for (auto& [key, value] : j.items()) {
        if (value.is_number()) fields[key] = value.get<double>();
      }
    } else if (header.empty()) {
      for (absl::string_view h : absl::StrSplit(text, ',')) header.emplace_back(absl::StripAsciiWhitespace(h));
      continue;
    } else {
      std::vector<std::string> cells = absl::StrSplit(text, ',');
      for (size_t c = 0; c < cells.size() && c < header.size(); ++c) {
        double v;
        if (absl::SimpleAtod(absl::StripAsciiWhitespace(cells[c]), &v)) fields[header[c]] = v;
      }
    }
    double t, in_len, out_len;
    if (!pick(fields, {"timestamp", "time", "t"}, &t) || !pick(fields, {"input_len", "input_length", "input_tokens"}, &in_len) ||
        !pick(fields, {"output_len", "output_length", "output_tokens"}, &out_len) || in_len < 1 || out_len < 1 || t < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "arrival trace ", path, ":", number, ": need timestamp >= 0, input_len >= 1 and output_len >= 1"));
    }
    rows.push_back({t, static_cast<int>(in_len), static_cast<int>(out_len)});
  }
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat("arrival trace ", path, ": no rows"));
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.t < b.t; });
  if (ids.num_requests > 0 && static_cast<int>(rows.size()) > ids.num_requests) rows.resize(ids.num_requests);
  TokenSource source(ids);
  std::vector<Job> jobs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    jobs[i].arrival_s = rows[i].t - rows.front().t;
    jobs[i].turns.push_back({source.Draw(rows[i].input_len), rows[i].output_len});
  }
  return jobs;
}

}  // namespace floe::bench
