// What the fault tests share: a Generate stream read on its own thread and
// observable while it runs (so a test can act mid-stream and then check how
// the stream ended), metric scrapes, a process's RSS, a signalled process's
// exit, and a floe-suffix-cache that snapshots to a folder. Everything runs
// real binaries on 127.0.0.1 (tests/integration/local_cluster.h); every client
// call here carries a deadline, so a fault can fail a test but never hang it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "floe/v1/router.grpc.pb.h"
#include "floe/v1/suffix_cache.grpc.pb.h"
#include "services/cli/subprocess.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {

using Clock = std::chrono::steady_clock;

inline double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}
inline double SecondsSince(Clock::time_point from) { return SecondsBetween(from, Clock::now()); }

// A greedy request that runs to exactly `max_tokens` (EOS ignored), so its
// length and output are known in advance.
floe::v1::GenerateRequest GreedyRequest(const std::string& text, int max_tokens, const std::string& session = "");

// The samples at a /metrics URL; empty when the scrape failed.
std::map<std::string, double> Scrape(const std::string& url);
// Sum of `name`'s samples holding every one of `labels` at `url`; NaN when
// there is none or the scrape failed (so a dead endpoint never reads as 0).
double Metric(const std::string& url, const std::string& name, const std::vector<std::string>& labels = {});

// VmRSS and VmHWM (peak) of a live process from /proc/PID/status, in MiB; -1
// when unreadable.
double RssMiB(pid_t pid);
double PeakRssMiB(pid_t pid);

// Times a signalled process's exit: from construction (just after the
// signal) it polls every 10 ms, for at most `timeout`. Nothing else may
// touch `process` until Seconds() returned.
class ExitWatch {
 public:
  ExitWatch(Subprocess& process, std::chrono::milliseconds timeout);
  ~ExitWatch();
  // Seconds from construction to the exit; -1 if it still ran at the timeout.
  double Seconds();

 private:
  double seconds_ = -1;
  std::thread watcher_;
};
// "exit 0", "exit 3", "signal 9": for messages.
std::string DescribeExit(int wait_status);
bool ExitedZero(int wait_status);

// How one stream ended, as its client saw it.
struct StreamOutcome {
  grpc::Status status;
  std::vector<int32_t> token_ids;
  std::string text;
  bool completed = false;  // a Complete message arrived
  floe::v1::Complete complete;
  Clock::time_point started;
  Clock::time_point first_token;  // epoch when no token came
  Clock::time_point ended;
  bool got_tokens() const { return first_token != Clock::time_point(); }
};

// One Generate stream on the router, read on its own thread from
// construction. The destructor waits for its end, which the deadline bounds.
class BackgroundStream {
 public:
  BackgroundStream(floe::v1::Floe::Stub& stub, floe::v1::GenerateRequest request, std::chrono::milliseconds deadline);
  ~BackgroundStream();
  BackgroundStream(const BackgroundStream&) = delete;
  BackgroundStream& operator=(const BackgroundStream&) = delete;

  int tokens() const { return tokens_.load(); }
  bool done() const { return done_.load(); }
  // True once at least `n` tokens arrived, false when the stream ended or
  // `timeout` passed first.
  bool WaitForTokens(int n, std::chrono::milliseconds timeout) const;
  // Waits for the end (bounded by the deadline) and returns how it ended.
  const StreamOutcome& Join();
  // Cancels the call as a client that goes away does.
  void Cancel() { context_.TryCancel(); }

 private:
  void Run(floe::v1::Floe::Stub& stub, floe::v1::GenerateRequest request);

  grpc::ClientContext context_;
  StreamOutcome outcome_;  // written by the reader thread until done_
  std::atomic<int> tokens_{0};
  std::atomic<bool> done_{false};
  std::thread reader_;  // last: starts once the rest is constructed
};

// A client that sends its request on a connection of its own and never
// reads the response: its HTTP/2 receive window is shrunk (1 KiB lookahead,
// no BDP probing) so the server's writes to it block after a few KiB.
class StalledStream {
 public:
  // `deadline` 0: none.
  StalledStream(const std::string& address, const floe::v1::GenerateRequest& request,
                std::chrono::milliseconds deadline);
  void Cancel() { context_.TryCancel(); }
  // Only once the call ended (its deadline, Cancel(), the server ending it):
  // it waits for the end.
  grpc::Status Finish() { return reader_->Finish(); }

 private:
  std::unique_ptr<floe::v1::Floe::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<floe::v1::GenerateResponse>> reader_;
};

// The index of the worker whose floe_request_success_total grew by one
// while a 1-token request of `session` ran; -1 when it could not be told.
int WorkerServing(LocalCluster& cluster, const std::string& session);
// A session id that the router's session affinity sends to worker `index`
// (found by probing; "" when none of `tries` sessions maps there).
std::string SessionOnWorker(LocalCluster& cluster, int index, int tries = 64);

// A floe-suffix-cache that snapshots into `snapshot_dir` every
// `interval_s` seconds, can be SIGKILLed, and restarted on its port from
// that folder.
class SnapshottingSuffixCache {
 public:
  SnapshottingSuffixCache(std::string snapshot_dir, int interval_s)
      : snapshot_dir_(std::move(snapshot_dir)), interval_s_(interval_s) {}
  bool Start(const std::string& port = "0");
  bool Restart() { return Start(address_.substr(address_.rfind(':') + 1)); }
  void Kill();
  const std::string& address() const { return address_; }
  Subprocess& process() { return *process_; }
  std::string snapshot_path() const { return snapshot_dir_ + "/suffix-cache.snap"; }
  // GetStats, retried while the service restores its snapshot (it answers
  // UNAVAILABLE until then), for at most `timeout`.
  grpc::Status Stats(floe::v1::SuffixStats* stats, std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  std::string snapshot_dir_;
  int interval_s_;
  std::unique_ptr<Subprocess> process_;
  std::string address_;
};

}  // namespace floe::testing
