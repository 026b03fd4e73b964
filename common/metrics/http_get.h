// A minimal HTTP/1.0 GET (for scraping /metrics and querying Prometheus on loopback): returns the body, or an
// error for a connection failure or a non-200 status.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace floe {

// `url` is http://HOST:PORT/PATH?QUERY (the query must already be URL-encoded).
absl::StatusOr<std::string> HttpGet(const std::string& url);
std::string UrlEncode(const std::string& text);

}  // namespace floe
