#include "common/metrics/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/https_get.h"

namespace floe {

absl::StatusOr<std::string> HttpGet(const std::string& url, const HttpGetOptions& options) {
  const bool tls = url.rfind("https://", 0) == 0;
  if (!tls && url.rfind("http://", 0) != 0) return absl::InvalidArgumentError("not an http:// or https:// URL: " + url);
  std::string rest = url.substr(url.find("//") + 2);
  size_t slash = rest.find('/');
  std::string host_port = rest.substr(0, slash), path = slash == std::string::npos ? "/" : rest.substr(slash);
  size_t colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  int port = tls ? 443 : 80;
  if (colon != std::string::npos && !absl::SimpleAtoi(host_port.substr(colon + 1), &port))
    return absl::InvalidArgumentError("bad port in " + url);
  if (tls) return internal::HttpsGet(host, port, path, options);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{static_cast<time_t>(options.timeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError("cannot connect to " + host_port);
  }
  std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\nConnection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) < 0) {
    close(fd);
    return absl::UnavailableError("write failed");
  }
  std::string response;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::UnavailableError("malformed HTTP response from " + url);
  if (response.find(" 200 ") > response.find("\r\n")) return absl::UnavailableError(response.substr(0, response.find("\r\n")));
  return response.substr(body + 4);
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace floe
