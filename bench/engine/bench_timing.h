// Wall clock and medians shared by the engine benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace floe {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median (the mean of the middle two for an even count); 0 when empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

}  // namespace floe
