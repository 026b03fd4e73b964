// The shared bootstrap in the real binaries (issue 41), each started under
// the descriptor limits a test sets (through sh's ulimit before exec):
// - under a 1,024 soft limit, 1,100 idle TCP connections to the gRPC port
//   leave it serving: a health check and a request on a fresh connection
//   are answered within 5 s (the service raised its soft limit to the hard
//   one and logged both);
// - each listener is one listening socket: with --port 0 no second,
//   unprinted port serves the same API;
// - a service held at a hard descriptor limit by a flood of idle
//   connections stops answering its own health checks, and its liveness
//   watchdog ends it (exit 1, "liveness_failed" naming the listener) so its
//   supervisor restarts it.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/liveness_watchdog.h"
#include "floe/v1/suffix_cache.grpc.pb.h"
#include "gtest/gtest.h"
#include "floe/v1/router.grpc.pb.h"
#include "tests/common/http/http_test_client.h"
#include "tests/common/rpc/listening_ports.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A floe binary started through `sh -c 'ulimit ...; exec BIN ARGS 2>>LOG'`,
// so the limit holds from its first instruction and its structured log can
// be read back.
struct Service {
  std::unique_ptr<Subprocess> process;
  std::string log_path;
  std::string address;  // the printed gRPC address
  int port = 0;

  ~Service() {
    process.reset();  // terminates it first
    std::remove(log_path.c_str());
  }

  std::string Log() const {
    std::ifstream in(log_path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  bool WaitForLog(const std::string& needle, milliseconds timeout) const {
    return WaitFor([&] { return absl::StrContains(Log(), needle); }, timeout);
  }
};

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// `ulimit`: sh's arguments, e.g. "-S -n 1024". `listening_line`: what the
// binary prints before its gRPC address.
std::unique_ptr<Service> Start(const std::string& ulimit, const std::string& binary, std::vector<std::string> args,
                               const std::string& listening_line) {
  auto service = std::make_unique<Service>();
  static int count = 0;
  service->log_path = absl::StrCat(::testing::TempDir(), "service_listeners_", getpid(), "_", ++count, ".log");
  std::string command = absl::StrCat("ulimit ", ulimit, " && exec ", Quoted(BinaryPath(binary)));
  for (const std::string& arg : args) absl::StrAppend(&command, " ", Quoted(arg));
  absl::StrAppend(&command, " 2>>", Quoted(service->log_path));
  auto spawned = Subprocess::Spawn({"/bin/sh", "-c", command});
  EXPECT_TRUE(spawned.ok()) << spawned.status();
  if (!spawned.ok()) return nullptr;
  service->process = *std::move(spawned);
  auto address = service->process->WaitForLine(listening_line, seconds(120), /*keep_reading=*/true);
  EXPECT_TRUE(address.ok()) << binary << ": " << address.status() << "\n" << service->Log();
  if (!address.ok()) return nullptr;
  service->address = *address;
  EXPECT_TRUE(absl::SimpleAtoi(address->substr(address->rfind(':') + 1), &service->port)) << *address;
  return service;
}

std::vector<std::string> WorkerArgs() {
  return {"--model", TinyModelDir(), "--port", "0", "--threads", "1", "--kv-cache-gb", "0.1",
          "--max-model-len", "1024", "--speculative-cost-curve", "linear"};
}

// This process needs more descriptors than the services it floods.
void RaiseOwnLimit() {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
}

// `n` TCP connections to 127.0.0.1:`port` that never send a byte (the
// kernel completes each handshake; the server may or may not accept it).
// Closed on destruction.
class IdleConnections {
 public:
  IdleConnections(int port, int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) break;
      timeval timeout{5, 0};  // a full backlog must not hang the test
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(fd);
        break;
      }
      fds_.push_back(fd);
    }
  }
  ~IdleConnections() {
    for (int fd : fds_) close(fd);
  }
  size_t size() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

std::shared_ptr<grpc::Channel> FreshChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

bool WorkerServes(const std::string& address, milliseconds deadline) {
  auto stub = floe::v1::Worker::NewStub(FreshChannel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  floe::v1::ModelInfo info;
  return stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info).ok();
}

bool SuffixCacheServes(const std::string& address, milliseconds deadline) {
  auto stub = floe::v1::SuffixCache::NewStub(FreshChannel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  floe::v1::SuffixStats stats;
  return stub->GetStats(&context, floe::v1::SuffixStatsRequest(), &stats).ok();
}

// 1,100 idle connections under a 1,024 soft limit, then a health check and
// a request on a fresh connection, each answered within 5 s.
void ExpectServesPastTheSoftLimit(Service& service, const std::function<bool(milliseconds)>& serves) {
  rlimit own{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &own), 0);
  if (own.rlim_max != RLIM_INFINITY && own.rlim_max < 1400) GTEST_SKIP() << "hard limit " << own.rlim_max;
  EXPECT_TRUE(service.WaitForLog("\"soft_was\":1024", seconds(10))) << service.Log();
  RaiseOwnLimit();
  IdleConnections idle(service.port, 1100);
  ASSERT_EQ(idle.size(), 1100u);
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status health = CheckHealth(FreshChannel(service.address), milliseconds(5000));
  EXPECT_TRUE(health.ok()) << health.error_code() << " " << health.error_message();
  EXPECT_TRUE(serves(milliseconds(5000)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_FALSE(service.process->Exited());
  EXPECT_FALSE(absl::StrContains(service.Log(), "Too many open files")) << service.Log();
}

TEST(ServiceListenersTest, SuffixCacheServesPast1100IdleConnectionsUnderA1024SoftLimit) {
  auto service = Start("-S -n 1024", "floe-suffix-cache", {"--port", "0"}, "suffix-cache listening on ");
  ASSERT_TRUE(service);
  ASSERT_TRUE(WaitFor([&] { return SuffixCacheServes(service->address, milliseconds(1000)); }, seconds(60)));
  ExpectServesPastTheSoftLimit(*service, [&](milliseconds d) { return SuffixCacheServes(service->address, d); });
}

TEST(ServiceListenersTest, WorkerServesPast1100IdleConnectionsUnderA1024SoftLimit) {
  auto service = Start("-S -n 1024", "floe-worker", WorkerArgs(), "worker listening on ");
  ASSERT_TRUE(service);
  ASSERT_TRUE(WaitFor([&] { return WorkerServes(service->address, milliseconds(1000)); }, seconds(120)));
  ExpectServesPastTheSoftLimit(*service, [&](milliseconds d) { return WorkerServes(service->address, d); });
}

bool RouterServes(const std::string& address, milliseconds deadline) {
  auto stub = floe::v1::Floe::NewStub(FreshChannel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  floe::v1::TokenizeRequest request;
  request.set_text("hello");
  floe::v1::TokenizeResponse response;
  return stub->Tokenize(&context, request, &response).ok() && response.ids_size() > 0;
}

// The router's two public ports, each flooded with 1,100 idle connections
// from 127.0.0.1 under a 1,024 soft limit: its gRPC API still answers, and
// its HTTP port answers another client (127.0.0.2; the flood's own address
// is held to the per-client cap).
TEST(ServiceListenersTest, RouterServesPast1100IdleConnectionsOnEachPortUnderA1024SoftLimit) {
  auto worker = Start("-S -n 1024", "floe-worker", WorkerArgs(), "worker listening on ");
  ASSERT_TRUE(worker);
  auto router = Start("-S -n 1024", "floe-router",
                      {"--workers", worker->address, "--tokenizer", TinyModelDir(), "--port", "0", "--http-port", "0"},
                      "router bound to ");
  ASSERT_TRUE(router);
  const std::string http = HttpBoundAddress(router->process->lines());
  ASSERT_FALSE(http.empty());
  ASSERT_TRUE(WaitFor([&] { return RouterServes(router->address, milliseconds(1000)); }, seconds(120)))
      << router->Log();
  int http_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(http.substr(http.rfind(':') + 1), &http_port));
  rlimit own{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &own), 0);
  if (own.rlim_max != RLIM_INFINITY && own.rlim_max < 2600) GTEST_SKIP() << "hard limit " << own.rlim_max;
  RaiseOwnLimit();
  IdleConnections grpc_idle(router->port, 1100);
  IdleConnections http_idle(http_port, 1100);
  ASSERT_EQ(grpc_idle.size(), 1100u);
  ASSERT_EQ(http_idle.size(), 1100u);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(CheckHealth(FreshChannel(router->address), milliseconds(5000)).ok());
  EXPECT_TRUE(RouterServes(router->address, milliseconds(5000)));
  RawConnection client(http, "127.0.0.2", 5000);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  client.ReadToClose(5000);
  EXPECT_TRUE(absl::StartsWith(client.received(), "HTTP/1.1 200")) << client.received();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_FALSE(router->process->Exited());
  EXPECT_FALSE(absl::StrContains(router->Log(), "Too many open files")) << router->Log();
}

// The ports a binary printed ("... HOST:PORT", "metrics NAME URL", "http
// bound to HOST:PORT").
std::vector<int> PrintedPorts(const Subprocess& process) {
  std::vector<int> ports;
  for (const std::string& line : process.lines()) {
    std::string rest = line;
    if (absl::StartsWith(rest, "metrics ")) rest = rest.substr(0, rest.rfind("/metrics"));
    int port = 0;
    if (absl::SimpleAtoi(rest.substr(rest.rfind(':') + 1), &port)) ports.push_back(port);
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

TEST(ServiceListenersTest, EachListenerIsOneSocketOnThePrintedPort) {
  struct Case {
    std::string binary;
    std::vector<std::string> args;
    std::string listening_line;
    size_t listeners;
  };
  const Case cases[] = {
      {"floe-suffix-cache", {"--port", "0", "--metrics-port", "0"}, "suffix-cache listening on ", 2},
      {"floe-worker", WorkerArgs(), "worker listening on ", 2},
      {"floe-router",
       {"--workers", "127.0.0.1:1", "--tokenizer", TinyModelDir(), "--port", "0", "--http-port", "0"},
       "router bound to ",
       3},
  };
  for (const Case& c : cases) {
    auto service = Start("-S -n 1024", c.binary, c.args, c.listening_line);
    ASSERT_TRUE(service) << c.binary;
    // The suffix cache prints its metrics line after the listening line.
    if (c.binary == "floe-suffix-cache") ASSERT_TRUE(service->process->WaitForLine("metrics ", seconds(10)).ok());
    const std::vector<int> printed = PrintedPorts(*service->process);
    ASSERT_EQ(printed.size(), c.listeners) << c.binary;
    EXPECT_EQ(ListeningTcpPorts(service->process->pid()), printed) << c.binary << ": a listener it did not print";
  }
}

// Held at a hard limit of 128 descriptors by 300 idle connections, the
// suffix cache can neither accept nor open its probe's connection: three
// unanswered self-probes 300 ms apart end it.
TEST(ServiceListenersTest, LivenessWatchdogEndsAServiceStuckAtItsDescriptorLimit) {
  auto service = Start("-n 128", "floe-suffix-cache",
                       {"--port", "0", "--liveness-probe-interval-ms", "300", "--liveness-probe-failures", "3"},
                       "suffix-cache listening on ");
  ASSERT_TRUE(service);
  ASSERT_TRUE(service->WaitForLog("\"event\":\"liveness_armed\"", seconds(30))) << service->Log();
  RaiseOwnLimit();
  IdleConnections idle(service->port, 300);
  ASSERT_EQ(idle.size(), 300u);
  ASSERT_TRUE(WaitFor([&] { return service->process->Exited(); }, seconds(60)))
      << "still running at its descriptor limit\n" << service->Log();
  const int status = service->process->exit_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "wait status " << status;
  const std::string log = service->Log();
  EXPECT_TRUE(absl::StrContains(log, "\"event\":\"liveness_failed\"")) << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("127.0.0.1:", service->port))) << log;
}

}  // namespace
}  // namespace floe::testing
