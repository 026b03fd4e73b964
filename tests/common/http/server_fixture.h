// Test helper: a common/http Server on loopback with a handler for each
// behaviour the tests drive: /echo (an inline reply naming what arrived),
// /later (the same, answered from another thread, as a handler waiting on a
// backend does, and not at all once the client is gone), /stream (100 server-sent events, each written before the
// next is queued), /gaps (a stream with an empty Send between its parts),
// /wait (never answered; counts hang-ups) and /stall (writes until the
// client stops reading).
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/http/http_server.h"
#include "gtest/gtest.h"

namespace floe::http {

// What /echo and /later answer: "METHOD TARGET BODY".
inline std::string EchoOf(const Request& request) {
  return request.method + " " + request.target + " " + request.body;
}

struct Fixture {
  std::atomic<int> gone{0};
  std::atomic<int> stall_failed_writes{0};
  std::atomic<int> stall_sent{0};
  std::promise<void> stall_done;
  std::mutex later_mu;
  std::vector<std::thread> later;  // guarded by later_mu
  std::unique_ptr<Server> server;

  explicit Fixture(ServerOptions options = {}) {
    auto started = Server::Start(options, [this](Request request, std::shared_ptr<Exchange> exchange) {
      Handle(std::move(request), std::move(exchange));
    });
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server = *std::move(started);
  }
  ~Fixture() {
    std::lock_guard<std::mutex> lock(later_mu);
    for (auto& t : later) t.join();
  }

  // Streams `n` events, each written before the next is queued.
  static void StreamEvents(std::shared_ptr<Exchange> exchange, int i, int n) {
    if (i == n) {
      exchange->Send("data: [DONE]\n\n", nullptr);
      return exchange->End();
    }
    exchange->Send("data: " + std::to_string(i) + "\n\n", [exchange, i, n](bool ok) {
      if (ok) StreamEvents(exchange, i + 1, n);
    });
  }

  void Stall(std::shared_ptr<Exchange> exchange) {
    exchange->Send(std::string(256 << 10, 'x'), [this, exchange](bool ok) {
      if (!ok) {
        stall_failed_writes++;
        stall_done.set_value();
        return;
      }
      if (++stall_sent < 4096) Stall(exchange);
    });
  }

  void Handle(Request request, std::shared_ptr<Exchange> exchange) {
    if (request.path == "/echo") {
      Response r;
      r.content_type = "text/plain";
      r.body = EchoOf(request);
      r.headers.emplace_back("X-Seen", std::string(request.Header("x-test")));
      return exchange->Reply(std::move(r));
    }
    if (request.path == "/later") {
      // As the router's call to a worker, dropped if the client goes first.
      auto abandoned = std::make_shared<std::atomic<bool>>(false);
      exchange->OnClientGone([abandoned] { *abandoned = true; });
      std::lock_guard<std::mutex> lock(later_mu);
      later.emplace_back([exchange, abandoned, body = EchoOf(request)] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (!*abandoned) exchange->Reply(Response{200, "text/plain", body, {}});
      });
      return;
    }
    if (request.path == "/stream") {
      exchange->StartStream(200, "text/event-stream");
      return StreamEvents(exchange, 0, 100);
    }
    if (request.path == "/gaps") {
      exchange->StartStream(200, "text/plain");
      for (const char* part : {"a", "", "b"}) exchange->Send(part, nullptr);
      return exchange->End();
    }
    if (request.path == "/wait") {
      // Answered never: only the hang-up ends it.
      return exchange->OnClientGone([this, exchange] { gone++; });
    }
    if (request.path == "/stall") {
      exchange->StartStream(200, "text/event-stream");
      return Stall(exchange);
    }
    exchange->Reply(Response{404, "text/plain", "no", {}});
  }
};

}  // namespace floe::http
