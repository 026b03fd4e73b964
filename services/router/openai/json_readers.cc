#include "services/router/openai/json_readers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace floe::openai {

using nlohmann::ordered_json;

ApiError Bad(std::string param, std::string message) {
  ApiError e;
  e.param = param;
  e.message = std::move(message);
  return e;
}

std::string TypeName(const ordered_json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::optional<ApiError> Number(const std::string& name, const ordered_json& v, double lo, double hi, double* out) {
  if (!v.is_number()) return Bad(name, absl::StrCat(name, " must be a number, not ", TypeName(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return Bad(name, absl::StrCat(name, " is ", v.dump(), "; it must be in [", lo, ", ", hi, "]"));
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> Integer(const std::string& name, const ordered_json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    return Bad(name, absl::StrCat(name, " must be an integer, not ", v.is_number() ? v.dump() : TypeName(v)));
  const double x = v.get<double>();
  // A float of 2^63 passes `x > hi` for hi = INT64_MAX (which rounds up to
  // 2^63 as a double) but has no int64 value: converting it is undefined.
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi) || (v.is_number_float() && x >= 0x1p63))
    return Bad(name, absl::StrCat(name, " is ", v.dump(), "; it must be in [", lo, ", ", hi, "]"));
  *out = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                : v.get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> Bool(const std::string& name, const ordered_json& v, bool* out) {
  if (!v.is_boolean()) return Bad(name, absl::StrCat(name, " must be a boolean, not ", TypeName(v)));
  *out = v.get<bool>();
  return std::nullopt;
}

std::optional<ApiError> String(const std::string& name, const ordered_json& v, size_t max_bytes, std::string* out) {
  if (!v.is_string()) return Bad(name, absl::StrCat(name, " must be a string, not ", TypeName(v)));
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes) return Bad(name, absl::StrCat(name, " has ", s.size(), " bytes; the limit is ", max_bytes));
  *out = s;
  return std::nullopt;
}

}  // namespace floe::openai
