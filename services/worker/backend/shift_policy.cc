#include "services/worker/backend/shift_policy.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace floe {

ParallelMode ShiftPolicy::Choose(int64_t scheduled_tokens) const {
  if (pin == Pin::kTensor) return ParallelMode::kTensor;
  if (pin == Pin::kSequence) return ParallelMode::kSequence;
  if (profile.empty()) return scheduled_tokens >= threshold ? ParallelMode::kSequence : ParallelMode::kTensor;
  auto above = std::upper_bound(profile.begin(), profile.end(), scheduled_tokens,
                                [](int64_t n, const ShiftProfilePoint& p) { return n < p.tokens; });
  return above == profile.begin() ? above->mode : std::prev(above)->mode;
}

absl::StatusOr<ShiftPolicy::Pin> ParseParallelMode(const std::string& name) {
  if (name == "tp") return ShiftPolicy::Pin::kTensor;
  if (name == "sp") return ShiftPolicy::Pin::kSequence;
  if (name == "shift") return ShiftPolicy::Pin::kShift;
  return absl::InvalidArgumentError(absl::StrCat("parallel mode \"", name, "\": expected tp, sp or shift"));
}

absl::StatusOr<std::vector<ShiftProfilePoint>> ParseShiftProfile(std::string_view json) {
  if (json.size() > kMaxShiftProfileBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("shift profile: more than ", kMaxShiftProfileBytes, " bytes (the limit)"));
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("shift profile: not JSON");
  if (!doc.is_object() || !doc.contains("points") || !doc["points"].is_array() || doc["points"].empty())
    return absl::InvalidArgumentError("shift profile: expected a non-empty \"points\" array");
  const nlohmann::json& points = doc["points"];
  if (points.size() > kMaxShiftProfilePoints)
    return absl::InvalidArgumentError(
        absl::StrCat("shift profile: ", points.size(), " points, limit ", kMaxShiftProfilePoints));
  std::vector<ShiftProfilePoint> profile;
  for (size_t i = 0; i < points.size(); ++i) {
    const nlohmann::json& p = points[i];
    auto field = [&](const char* name) -> absl::StatusOr<double> {
      if (!p.is_object() || !p.contains(name) || !p[name].is_number())
        return absl::InvalidArgumentError(absl::StrCat("shift profile: points[", i, "].", name, " missing or not a number"));
      const double v = p[name].get<double>();
      if (!std::isfinite(v) || v <= 0)
        return absl::InvalidArgumentError(absl::StrCat("shift profile: points[", i, "].", name, " = ", v,
                                                       ", expected positive and finite"));
      return v;
    };
    auto tokens = field("tokens");
    auto tp = field("tp_s");
    auto sp = field("sp_s");
    for (const auto* s : {&tokens, &tp, &sp})
      if (!s->ok()) return s->status();
    if (!p["tokens"].is_number_integer())
      return absl::InvalidArgumentError(absl::StrCat("shift profile: points[", i, "].tokens is not an integer"));
    if (*tokens > static_cast<double>(kMaxShiftProfileTokens))  // before the conversion: a uint64 may not fit
      return absl::InvalidArgumentError(absl::StrCat("shift profile: points[", i, "].tokens = ", p["tokens"].dump(),
                                                     ", limit ", kMaxShiftProfileTokens));
    const int64_t n = p["tokens"].get<int64_t>();
    if (!profile.empty() && n <= profile.back().tokens)
      return absl::InvalidArgumentError(absl::StrCat("shift profile: points[", i, "].tokens = ", n,
                                                     " after ", profile.back().tokens, ", expected ascending"));
    profile.push_back({n, *sp < *tp ? ParallelMode::kSequence : ParallelMode::kTensor});
  }
  return profile;
}

std::string DescribeShiftProfile(const std::vector<ShiftProfilePoint>& profile) {
  std::string out;
  for (const ShiftProfilePoint& p : profile)
    absl::StrAppend(&out, out.empty() ? "" : " ", p.tokens, p.mode == ParallelMode::kSequence ? ":sp" : ":tp");
  return out;
}

absl::StatusOr<std::vector<ShiftProfilePoint>> LoadShiftProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("shift profile ", path, ": cannot open"));
  std::string text(kMaxShiftProfileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  auto profile = ParseShiftProfile(text);
  if (!profile.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", profile.status().message()));
  return profile;
}

}  // namespace floe
