// Test helper: real floe-worker / floe-router (and floe-suffix-cache)
// processes on loopback, serving a tiny random checkpoint written once per
// test binary. Everything is torn down (SIGTERM, then SIGKILL) when the
// helper goes out of scope.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "floe/v1/router.grpc.pb.h"
#include "floe/v1/worker.grpc.pb.h"
#include "services/cli/subprocess.h"

namespace floe::testing {

// Writes (once per process) the tiny preset with the real Llama 3.1
// tokenizer and returns its folder.
const std::string& TinyModelDir();

std::string BinaryPath(const std::string& name);

// How a test takes part in starting the workers (each optional).
struct WorkerHooks {
  // Goes before each worker's argv: a command that execs the rest (the
  // worker keeps its pid), e.g. to send its log to a file.
  std::vector<std::string> wrap;
  // Runs once worker i listens, before the router starts: where a test
  // starts the ranks of a worker that waits for ranks started elsewhere
  // (--rank-launch remote), with the worker's own flags (`worker_argv`,
  // without `wrap`). False: the cluster does not come up.
  std::function<bool(int worker, const std::string& address, const std::vector<std::string>& worker_argv)>
      on_listening;
};

// A WorkerHooks::wrap that appends each worker's stderr (its log) to `path`.
std::vector<std::string> LogTo(const std::string& path);

// What rank 0's log says when it loses rank `rank` (it then exits 1).
std::string RankFailedLog(int rank);

// The file's contents ("" when it cannot be read).
std::string ReadWholeFile(const std::string& path);

class LocalCluster {
 public:
  // Starts `num_workers` workers with `worker_args` added to each, then a router.
  LocalCluster(int num_workers, std::vector<std::string> worker_args = {},
               std::vector<std::string> router_args = {}, WorkerHooks hooks = {});
  ~LocalCluster();

  const std::string& router_address() const { return router_address_; }
  const std::vector<std::string>& worker_addresses() const { return worker_addresses_; }
  Subprocess& worker(int i) { return *workers_[i]; }
  Subprocess& router() { return *router_; }
  // Every process came up and the router has polled every worker healthy.
  bool ok() const { return ok_; }

  std::unique_ptr<floe::v1::Floe::Stub> RouterStub() const;
  std::unique_ptr<floe::v1::Worker::Stub> WorkerStub(int i) const;

 private:
  bool RouterSeesEveryWorker();
  bool ok_ = false;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::unique_ptr<Subprocess> router_;
  std::vector<std::string> worker_addresses_;
  std::string router_address_;
};

// A floe-suffix-cache on loopback (metrics off) that can be killed and
// started again on its port.
class SuffixCacheProcess {
 public:
  // Starts it on `port` ("0": any free one); false when it did not come up.
  bool Start(const std::string& port = "0");
  void Kill();     // SIGKILL, then reaps it
  bool Restart();  // Start on the port it had
  Subprocess& process() { return *process_; }
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<Subprocess> process_;
  std::string address_;
};

// The /metrics URL a floe binary printed ("metrics <who> <url>"); "" when it
// printed none.
std::string MetricsUrl(Subprocess& process);

// The live (not zombie) children of `parent` whose argv[0] ends with
// `binary`, from /proc: how a test finds the processes `floe local` started.
std::vector<pid_t> ChildrenRunning(pid_t parent, const std::string& binary);

// Polls `condition` every 50 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// One Generate call, collected.
struct Generation {
  grpc::Status status;
  std::vector<int32_t> token_ids;
  std::string text;
  floe::v1::Complete complete;
  int chunks = 0;
  // As the client saw them: send -> first chunk with tokens, send -> end.
  double ttft_s = -1.0;
  double e2e_s = 0.0;
};
Generation Generate(floe::v1::Floe::Stub& stub, const floe::v1::GenerateRequest& request,
                    int timeout_ms = 60000);

}  // namespace floe::testing
