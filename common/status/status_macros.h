// Early-return helpers for absl::Status / absl::StatusOr (the Abseil in Debian 12
// predates ABSL_RETURN_IF_ERROR).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FLOE_STATUS_CONCAT_INNER(a, b) a##b
#define FLOE_STATUS_CONCAT(a, b) FLOE_STATUS_CONCAT_INNER(a, b)

#define FLOE_RETURN_IF_ERROR(expr)                      \
  do {                                                  \
    ::absl::Status floe_status_ = (expr);               \
    if (!floe_status_.ok()) return floe_status_;        \
  } while (0)

#define FLOE_ASSIGN_OR_RETURN(lhs, expr) \
  FLOE_ASSIGN_OR_RETURN_IMPL(FLOE_STATUS_CONCAT(floe_statusor_, __LINE__), lhs, expr)

#define FLOE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()
