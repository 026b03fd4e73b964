// Which parallel mode each step of a multi-rank worker runs in (Shift
// Parallelism): TP while a step's scheduled tokens are few, SP x TP from a
// threshold on, or pinned to one mode. The threshold comes from the cost
// model (parallel/cost_model.h) or a flag; a measured profile
// (bench_shift's JSON) replaces it where a host's step times do not
// follow one crossover, e.g. where SP wins the 1-token step because its
// idle rank leaves a core to the collectives' I/O thread.
//
// Plain values: copied to the leader once, read on the engine thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/model/forward_batch.h"

namespace floe {

// The faster mode measured at one step size.
struct ShiftProfilePoint {
  int64_t tokens = 0;
  ParallelMode mode = ParallelMode::kTensor;
};

struct ShiftPolicy {
  enum class Pin { kTensor, kSequence, kShift };
  Pin pin = Pin::kShift;
  // kShift: steps of at least this many scheduled tokens (prompt chunks,
  // decode and draft tokens) run SP x TP, the others TP.
  int64_t threshold = 256;
  // kShift with a profile (sizes ascending): a step runs the mode measured
  // at the largest profiled size not above its tokens (below the smallest:
  // the smallest's). The threshold is then unused.
  std::vector<ShiftProfilePoint> profile;

  ParallelMode Choose(int64_t scheduled_tokens) const;
};

// "tp", "sp" or "shift"; INVALID_ARGUMENT otherwise.
absl::StatusOr<ShiftPolicy::Pin> ParseParallelMode(const std::string& name);

// Limits on a profile: more than any step-size sweep needs (bench_shift
// prints 1-2 KB per point, every sample included).
inline constexpr size_t kMaxShiftProfileBytes = size_t{16} << 20;
inline constexpr size_t kMaxShiftProfilePoints = 4096;
inline constexpr int64_t kMaxShiftProfileTokens = int64_t{1} << 30;

// A profile from bench_shift's JSON ({"points": [{"tokens", "tp_s",
// "sp_s"}, ...]}, any other field ignored): each point's faster mode, ties
// to TP. INVALID_ARGUMENT naming the point and field on anything else:
// not JSON, no points, a size not a JSON integer (2.0 is refused) in
// [1, kMaxShiftProfileTokens] or not ascending, a time not positive and
// finite, past the limits above.
absl::StatusOr<std::vector<ShiftProfilePoint>> ParseShiftProfile(std::string_view json);

// "1:sp 2:tp 4:tp ...", for logs.
std::string DescribeShiftProfile(const std::vector<ShiftProfilePoint>& profile);

// ParseShiftProfile of a file (NOT_FOUND / INVALID_ARGUMENT naming it).
absl::StatusOr<std::vector<ShiftProfilePoint>> LoadShiftProfile(const std::string& path);

}  // namespace floe
