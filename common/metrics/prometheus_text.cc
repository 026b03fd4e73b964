#include "common/metrics/prometheus_text.h"

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

double SumByName(const std::map<std::string, double>& samples, const std::string& name) {
  double sum = 0;
  for (auto it = samples.lower_bound(name); it != samples.end() && it->first.compare(0, name.size(), name) == 0; ++it) {
    if (it->first.size() == name.size() || it->first[name.size()] == '{') sum += it->second;
  }
  return sum;
}

}  // namespace floe
