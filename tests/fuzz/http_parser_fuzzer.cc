// Fuzzes the HTTP/1.x server (common/http) with arbitrary bytes on a real
// loopback connection: Beast's request parser under our limits (512 header
// bytes, 256 body bytes), pipelining, chunked bodies, header floods,
// `Expect: 100-continue`, HTTP/1.0, HEAD, and what the server does between
// requests. The input is the byte stream a client sends, written in pieces
// whose sizes a hash of the input picks (TCP_NODELAY: each its own segment).
//
// Invariant: the server answers exactly what a sequential model predicts,
// however the bytes arrive. The model reads the same bytes with the same
// parser and limits, one request at a time, as the server does (the header
// parsed whole once its end or the header limit is in, then the body):
// every complete request gets 200 echoing "METHOD TARGET BODY" (streamed,
// for a path under /s), in order; a `100 Continue` precedes the body of an
// HTTP/1.1 request that expects it; the first malformed or oversized request
// gets 400, 413 naming the body limit, or 431 naming the header limit, and
// the connection closes; so does it after a request that does not keep it
// alive, and after a stream to HTTP/1.0 (close-delimited). Answers are
// HTTP/1.1; to HTTP/1.0 they carry Content-Length or end with the close,
// never chunks; to HEAD no body. When the bytes end inside a request (or
// between requests) the server waits: the answers so far, then nothing.
// The client's parser (tests/common/http) is Beast's response parser.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include "common/http/http_server.h"
#include "tests/common/http/http_test_client.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe::http {
namespace {

namespace bhttp = boost::beast::http;
using floe::testing::ParseResponses;
using floe::testing::RawConnection;
using floe::testing::WireResponse;

constexpr size_t kHeaderLimit = 512;
constexpr size_t kBodyLimit = 256;
constexpr size_t kMaxInput = 64 << 10;  // well under the server's lingering drain
constexpr int kTimeoutMs = 10000;

std::string EchoOf(std::string_view method, std::string_view target, std::string_view body) {
  return std::string(method) + " " + std::string(target) + " " + std::string(body);
}

bool Streamed(std::string_view target) { return target.rfind("/s", 0) == 0; }

Server& TheServer() {
  static Server* server = [] {
    ServerOptions options;
    options.max_header_bytes = kHeaderLimit;
    options.max_body_bytes = kBodyLimit;
    options.max_connections_per_client = 0;  // every input comes from 127.0.0.1
    auto started = Server::Start(options, [](Request request, std::shared_ptr<Exchange> exchange) {
      if (!Streamed(request.target)) {
        return exchange->Reply(Response{200, "text/plain", EchoOf(request.method, request.target, request.body), {}});
      }
      exchange->StartStream(200, "text/plain");
      exchange->Send(request.method + " " + request.target + " ", nullptr);
      exchange->Send("", nullptr);  // writes nothing: as a chunk it would end the stream
      exchange->Send(request.body, nullptr);
      exchange->End();
    });
    FUZZ_CHECK(started.ok(), "cannot start the server: %s", started.status().ToString().c_str());
    return started->release();  // lives for the process
  }();
  return *server;
}

// One answer the model expects.
struct Expected {
  bool continue_first = false;  // `100 Continue` precedes it
  int status = 0;               // 0: only the `100 Continue` (the body never came)
  std::string body;             // a 200's echo
  bool head = false;
  bool streamed = false;
  bool http10 = false;
};

struct Prediction {
  std::vector<Expected> answers;
  bool closes = false;  // else the server waits for more bytes
};

int StatusFor(boost::beast::error_code ec) {
  if (ec == bhttp::error::header_limit) return 431;
  if (ec == bhttp::error::body_limit) return 413;
  return 400;
}

// The header, fed as the server feeds it: in one piece, once its end is in
// or kHeaderLimit bytes are. False when the input ends first (the server
// would wait).
bool FeedHeader(bhttp::request_parser<bhttp::string_body>& parser, std::string_view input, size_t* at,
                boost::beast::error_code* ec) {
  const size_t window = std::min(input.size() - *at, kHeaderLimit);
  const std::string_view bytes = input.substr(*at, window);
  if (window < kHeaderLimit && bytes.find("\r\n\r\n") == std::string_view::npos) return false;
  size_t fed = 0;
  while (!parser.is_header_done() && fed < window) {
    const size_t used = parser.put(boost::asio::buffer(bytes.data() + fed, window - fed), *ec);
    fed += used;
    if (*ec == bhttp::error::need_more) {
      *ec = {};
      if (used == 0) break;
      continue;
    }
    if (*ec) break;
  }
  *at += fed;
  if (*ec || parser.is_header_done()) return true;
  if (window < kHeaderLimit) return false;
  *ec = bhttp::error::header_limit;
  return true;
}

// The body, fed as Beast's read does. False when the input ends first.
bool FeedBody(bhttp::request_parser<bhttp::string_body>& parser, std::string_view input, size_t* at,
              boost::beast::error_code* ec) {
  while (!parser.is_done()) {
    if (*at == input.size()) return false;
    const size_t used = parser.put(boost::asio::buffer(input.data() + *at, input.size() - *at), *ec);
    *at += used;
    if (*ec == bhttp::error::need_more) {
      *ec = {};
      if (used == 0) return false;
      continue;
    }
    if (*ec) return true;
    if (used == 0) return false;
  }
  return true;
}

Prediction Predict(std::string_view input) {
  Prediction out;
  for (size_t at = 0; at < input.size();) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(kHeaderLimit));
    parser.body_limit(kBodyLimit);
    boost::beast::error_code ec;
    Expected e;
    parser.eager(false);
    if (!FeedHeader(parser, input, &at, &ec)) return out;
    if (!ec && !parser.is_done()) {
      const auto& header = parser.get();
      e.continue_first =
          header.version() >= 11 && boost::beast::iequals(header[bhttp::field::expect], "100-continue");
      parser.eager(true);
      if (!FeedBody(parser, input, &at, &ec)) {
        if (e.continue_first) out.answers.push_back(e);  // asked for the body, which never came
        return out;
      }
    }
    if (ec) {
      e.status = StatusFor(ec);
      out.answers.push_back(e);
      out.closes = true;
      return out;
    }
    const auto& m = parser.get();
    e.status = 200;
    e.head = m.method() == bhttp::verb::head;
    const std::string target(m.target());
    e.streamed = Streamed(target);
    e.http10 = m.version() < 11;
    e.body = EchoOf(std::string(m.method_string()), target, m.body());
    out.answers.push_back(e);
    if (!m.keep_alive() || (e.streamed && e.http10)) {
      out.closes = true;
      return out;
    }
  }
  return out;
}

size_t Count(const Prediction& p) {
  size_t n = 0;
  for (const Expected& e : p.answers) n += (e.continue_first ? 1 : 0) + (e.status != 0 ? 1 : 0);
  return n;
}

std::vector<bool> HeadFlags(const Prediction& p) {
  std::vector<bool> head;
  for (const Expected& e : p.answers)
    if (e.status != 0) head.push_back(e.head);
  return head;
}

std::string Printable(std::string_view bytes) {
  std::string out;
  for (char c : bytes.substr(0, 2048)) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n\n";
    else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) out += '.';
    else out += c;
  }
  return out;
}

void CheckAnswer(const Expected& e, const WireResponse& r, size_t i, const std::string& received) {
  FUZZ_CHECK(r.version == 11, "answer %zu is HTTP/%u.%u", i, r.version / 10, r.version % 10);
  FUZZ_CHECK(r.status == e.status, "answer %zu: status %d, the model expects %d; received:\n%s", i, r.status,
             e.status, Printable(received).c_str());
  if (e.status == 431) {
    FUZZ_CHECK(r.body.find("the limit is 512 header bytes") != std::string::npos, "431 without the limit: %s",
               r.body.c_str());
  } else if (e.status == 413) {
    FUZZ_CHECK(r.body.find("the limit is 256 body bytes") != std::string::npos, "413 without the limit: %s",
               r.body.c_str());
  } else if (e.status == 400) {
    FUZZ_CHECK(r.body.find("bad HTTP request") != std::string::npos, "400 without a reason: %s", r.body.c_str());
  }
  if (e.status != 200) {
    FUZZ_CHECK(r.Header("connection") == "close", "an error answer keeps the connection");
    return;
  }
  FUZZ_CHECK(r.body == (e.head ? "" : e.body), "answer %zu: body \"%s\", the model expects \"%s\"", i,
             Printable(r.body).c_str(), Printable(e.head ? "" : e.body).c_str());
  if (e.http10) FUZZ_CHECK(!r.chunked && r.Header("transfer-encoding").empty(), "chunks to HTTP/1.0 (answer %zu)", i);
  if (e.streamed && !e.http10) FUZZ_CHECK(r.chunked, "an HTTP/1.1 stream without chunks (answer %zu)", i);
  if (e.streamed && e.http10) FUZZ_CHECK(!r.has_content_length, "a close-delimited stream with a length");
  if (!e.streamed) {
    FUZZ_CHECK(r.Header("content-length") == std::to_string(e.body.size()), "answer %zu: Content-Length %s for %zu",
               i, r.Header("content-length").c_str(), e.body.size());
  }
}

}  // namespace
}  // namespace floe::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe::http;
  if (size == 0 || size > kMaxInput) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const Prediction want = Predict(input);
  Server& server = TheServer();

  RawConnection c(server.address());
  FUZZ_CHECK(c.connected(), "cannot connect to %s", server.address().c_str());
  // Pieces of 1 to 64 bytes, picked by an FNV-1a hash of the input.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : input) h = (h ^ b) * 1099511628211ull;
  for (size_t at = 0; at < input.size();) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    const size_t n = std::min<size_t>(input.size() - at, 1 + (h >> 58));
    if (!c.Send(input.substr(at, n))) break;  // closed after an answer that ended it
    at += n;
  }
  const std::vector<bool> head = HeadFlags(want);
  const size_t count = Count(want);
  if (want.closes) {
    FUZZ_CHECK(c.ReadToClose(kTimeoutMs), "the server did not close within %d ms; received:\n%s", kTimeoutMs,
               Printable(c.received()).c_str());
  } else {
    const bool got = c.ReadUntil(
        [&](const std::string& bytes) { return ParseResponses(bytes, false, nullptr, nullptr, head).size() >= count; },
        kTimeoutMs);
    FUZZ_CHECK(got && !c.closed(), "expected %zu answers and an open connection; %s; received:\n%s", count,
               c.closed() ? "closed" : "timed out", Printable(c.received()).c_str());
  }
  std::string rest, error;
  const std::vector<WireResponse> got = ParseResponses(c.received(), c.closed(), &rest, &error, head);
  FUZZ_CHECK(error.empty(), "unparseable answer: %s; received:\n%s", error.c_str(), Printable(c.received()).c_str());
  FUZZ_CHECK(got.size() == count && rest.empty(), "%zu answers (+%zu bytes), the model expects %zu; received:\n%s",
             got.size(), rest.size(), count, Printable(c.received()).c_str());
  size_t i = 0;
  for (const Expected& e : want.answers) {
    if (e.continue_first) {
      FUZZ_CHECK(got[i].status == 100 && got[i].body.empty(), "answer %zu: %d, expected 100 Continue", i,
                 got[i].status);
      ++i;
    }
    if (e.status != 0) {
      CheckAnswer(e, got[i], i, c.received());
      ++i;
    }
  }
  c.Reset();  // no TIME_WAIT left per input
  return 0;
}
