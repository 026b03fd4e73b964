// A minimal HTTP GET (for scraping /metrics and querying Prometheus on
// loopback): returns the body, or an error for a connection failure, a
// timeout or a non-200 status. https:// URLs are verified against `ca_file`
// (else the system's roots) and the URL's host (name or IP), presenting
// `cert_file`/`key_file` when given (mTLS).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace floe {

struct HttpGetOptions {
  std::string ca_file, cert_file, key_file;  // PEM; https:// only
  std::chrono::seconds timeout{10};          // the whole exchange
};

// `url` is http(s)://HOST:PORT/PATH?QUERY (the query must already be URL-encoded).
absl::StatusOr<std::string> HttpGet(const std::string& url, const HttpGetOptions& options = {});
std::string UrlEncode(const std::string& text);

}  // namespace floe
