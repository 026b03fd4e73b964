// The https:// half of HttpGet (its own translation unit: Beast and OpenSSL
// are heavy to compile and only TLS scrapes need them).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/http_get.h"

namespace floe::internal {

absl::StatusOr<std::string> HttpsGet(const std::string& host, int port, const std::string& target,
                                     const HttpGetOptions& options);

}  // namespace floe::internal
