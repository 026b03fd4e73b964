#include "common/metrics/prometheus_text.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace floe {

std::map<std::string, double> ParsePrometheusText(absl::string_view text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    // The value follows the last space outside braces: labels may hold spaces.
    size_t close = line.rfind('}');
    size_t space = line.find(' ', close == absl::string_view::npos ? 0 : close);
    if (space == absl::string_view::npos) continue;
    absl::string_view value_text = line.substr(space + 1);
    if (size_t next = value_text.find(' '); next != absl::string_view::npos) value_text = value_text.substr(0, next);
    double value;
    if (!absl::SimpleAtod(value_text, &value)) continue;
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

namespace {

// Calls fn(key, value) for every sample of `name` (any labels).
template <class Fn>
void ForEachSample(const std::map<std::string, double>& samples, const std::string& name, const Fn& fn) {
  for (auto it = samples.lower_bound(name); it != samples.end() && it->first.compare(0, name.size(), name) == 0; ++it) {
    if (it->first.size() == name.size() || it->first[name.size()] == '{') fn(it->first, it->second);
  }
}

// Whether `key` (name{labels}) holds `label` as one whole label.
bool HasLabel(absl::string_view key, absl::string_view label) {
  for (size_t at = key.find(label); at != absl::string_view::npos; at = key.find(label, at + 1)) {
    const size_t end = at + label.size();
    if (at > 0 && (key[at - 1] == '{' || key[at - 1] == ',') && end < key.size() &&
        (key[end] == ',' || key[end] == '}')) {
      return true;
    }
  }
  return false;
}

}  // namespace

double SumByName(const std::map<std::string, double>& samples, const std::string& name) {
  double sum = 0;
  ForEachSample(samples, name, [&](const std::string&, double value) { sum += value; });
  return sum;
}

double SumByLabels(const std::map<std::string, double>& samples, const std::string& name,
                   const std::vector<std::string>& labels) {
  double sum = 0;
  bool found = false;
  ForEachSample(samples, name, [&](const std::string& key, double value) {
    for (const std::string& label : labels) {
      if (!HasLabel(key, label)) return;
    }
    sum += value;
    found = true;
  });
  return found ? sum : std::nan("");
}

}  // namespace floe
