// The self-probe liveness watchdog against real gRPC servers on loopback:
// it arms on the first answer (NOT_SERVING included), stays quiet while the
// listener answers, fires after N unanswered probes once armed, never fires
// unarmed, stops promptly, and reaches a TLS/mTLS listener whose
// certificate does not name the loopback address it dials.
#include "common/rpc/liveness_watchdog.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/rpc/server_runner.h"

namespace floe {
namespace {

using std::chrono::milliseconds;

bool WaitUntil(const std::function<bool()>& condition, milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

std::unique_ptr<ServerRunner> StartServer(const TlsOptions& tls = {}) {
  ServerOptions options;
  options.tls = tls;
  options.reflection = true;  // a synchronous service: the server starts
  auto runner = ServerRunner::Start(options, {});
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? *std::move(runner) : nullptr;
}

ProbeCredentials Plaintext() { return {grpc::InsecureChannelCredentials(), ""}; }
constexpr LivenessOptions kFast{.interval = milliseconds(50), .deadline = milliseconds(500), .failures = 3};

TEST(LivenessWatchdogTest, ArmsOnNotServingAndStaysQuietWhileAnswered) {
  auto server = StartServer();  // health NOT_SERVING until SetServing(true)
  ASSERT_TRUE(server);
  std::atomic<bool> dead{false};
  LivenessWatchdog watchdog("test", ProbeTarget("127.0.0.1", server->port()), Plaintext(),
                            kFast, [&] { dead = true; });
  ASSERT_TRUE(WaitUntil([&] { return watchdog.probes() >= 10; }, milliseconds(30000)));
  EXPECT_TRUE(watchdog.armed());
  EXPECT_FALSE(dead.load());
}

TEST(LivenessWatchdogTest, FiresOnceArmedWhenTheListenerStopsAnswering) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  server->SetServing(true);
  std::atomic<int> dead{0};
  LivenessWatchdog watchdog("test", ProbeTarget("127.0.0.1", server->port()), Plaintext(),
                            kFast, [&] { ++dead; });
  ASSERT_TRUE(WaitUntil([&] { return watchdog.armed(); }, milliseconds(30000)));
  EXPECT_EQ(dead.load(), 0);
  const int probes_before = watchdog.probes();
  server->Shutdown(milliseconds(0));  // the port closes: every probe is refused
  ASSERT_TRUE(WaitUntil([&] { return dead.load() > 0; }, milliseconds(30000)));
  EXPECT_GE(watchdog.probes() - probes_before, kFast.failures) << "fired before N failures in a row";
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(dead.load(), 1) << "fires once, then its thread ends";
}

// A port nothing listens on: probes fail from the start, the watchdog never
// arms and so never judges (a probe that cannot reach its own listener
// proves nothing).
TEST(LivenessWatchdogTest, NeverFiresUnarmed) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);  // bound, never listening: connections are refused
  std::atomic<bool> dead{false};
  {
    LivenessWatchdog watchdog("test", ProbeTarget("127.0.0.1", port), Plaintext(), kFast,
                              [&] { dead = true; });
    ASSERT_TRUE(WaitUntil([&] { return watchdog.probes() >= 3 * kFast.failures; }, milliseconds(30000)));
    EXPECT_FALSE(watchdog.armed());
  }
  EXPECT_FALSE(dead.load());
  close(fd);
}

TEST(LivenessWatchdogTest, StopEndsProbing) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  std::atomic<bool> dead{false};
  LivenessWatchdog watchdog("test", ProbeTarget("127.0.0.1", server->port()), Plaintext(),
                            {.interval = milliseconds(60000), .deadline = milliseconds(500), .failures = 1},
                            [&] { dead = true; });
  ASSERT_TRUE(WaitUntil([&] { return watchdog.probes() >= 1; }, milliseconds(30000)));
  const auto start = std::chrono::steady_clock::now();
  watchdog.Stop();  // mid-interval: wakes at once
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000));
  const int probes = watchdog.probes();
  server->Shutdown(milliseconds(0));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(watchdog.probes(), probes);
  EXPECT_FALSE(dead.load());
}

TEST(LivenessWatchdogTest, CertificateNameIsOneItIsValidFor) {
  EXPECT_EQ(CertificateName("not a certificate"), "");
}

TEST(LivenessWatchdogTest, ProbeTargetDialsLoopbackForWildcards) {
  EXPECT_EQ(ProbeTarget("0.0.0.0", 5), "127.0.0.1:5");
  EXPECT_EQ(ProbeTarget("", 5), "127.0.0.1:5");
  EXPECT_EQ(ProbeTarget("::", 5), "localhost:5");
  EXPECT_EQ(ProbeTarget("[::]", 5), "localhost:5");
  EXPECT_EQ(ProbeTarget("10.1.2.3", 5), "10.1.2.3:5");
  EXPECT_EQ(ProbeTarget("[::1]", 5), "[::1]:5");
}

// Certificates made with the openssl CLI: a CA and a server certificate for
// "floe-test" only, so the probe's loopback dial does not match its name.
class TlsProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("floe_probe_tls_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string script =
        "set -e; cd '" + d + "'; "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=probe-ca "
        "-keyout ca.key -out ca.pem; "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=floe-test "
        "-keyout svc.key -out svc.csr; "
        "printf 'subjectAltName=DNS:floe-test\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext.cnf; "
        "openssl x509 -req -in svc.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile ext.cnf "
        "-out svc.pem";
    ASSERT_EQ(std::system(("(" + script + ") >/dev/null 2>&1").c_str()), 0) << "openssl failed in " << d;
    tls_.cert_file = d + "/svc.pem";
    tls_.key_file = d + "/svc.key";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void ExpectArms(const TlsOptions& tls) {
    auto server = StartServer(tls);
    ASSERT_TRUE(server);
    auto credentials = MakeProbeCredentials(tls);
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    LivenessWatchdog watchdog("test", ProbeTarget("127.0.0.1", server->port()), *credentials, kFast,
                              [] { ADD_FAILURE() << "the watchdog fired on a live TLS listener"; });
    EXPECT_TRUE(WaitUntil([&] { return watchdog.armed(); }, milliseconds(30000)));
  }

  std::filesystem::path dir_;
  TlsOptions tls_;
};

TEST_F(TlsProbeTest, ArmsOnATlsListener) { ExpectArms(tls_); }

TEST_F(TlsProbeTest, ProbesAsANameTheCertificateHolds) {
  auto credentials = MakeProbeCredentials(tls_);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_EQ(credentials->target_name, "floe-test");
}

TEST_F(TlsProbeTest, ArmsOnAnMtlsListenerWithItsOwnCertificate) {
  TlsOptions mtls = tls_;
  mtls.client_ca_file = dir_.string() + "/ca.pem";
  ExpectArms(mtls);
}

TEST_F(TlsProbeTest, PlaintextProbeOfATlsListenerNeverArms) {
  auto server = StartServer(tls_);
  ASSERT_TRUE(server);
  LivenessWatchdog watchdog("test", ProbeTarget("127.0.0.1", server->port()), Plaintext(),
                            kFast, [] { ADD_FAILURE() << "fired unarmed"; });
  ASSERT_TRUE(WaitUntil([&] { return watchdog.probes() >= 2 * kFast.failures; }, milliseconds(30000)));
  EXPECT_FALSE(watchdog.armed());
}

}  // namespace
}  // namespace floe
