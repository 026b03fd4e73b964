#include "tests/faults/fault_support.h"

#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"

namespace floe::testing {

floe::v1::GenerateRequest GreedyRequest(const std::string& text, int max_tokens, const std::string& session) {
  floe::v1::GenerateRequest r;
  r.set_text(text);
  r.set_session_id(session);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

std::map<std::string, double> Scrape(const std::string& url) {
  auto body = HttpGet(url);
  if (!body.ok()) return {};
  return ParsePrometheusText(*body);
}

double Metric(const std::string& url, const std::string& name, const std::vector<std::string>& labels) {
  return SumByLabels(Scrape(url), name, labels);
}

namespace {

double StatusFieldMiB(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atof(line.c_str() + field.size() + 1) / 1024.0;  // kB
  }
  return -1;
}

}  // namespace

double RssMiB(pid_t pid) { return StatusFieldMiB(pid, "VmRSS"); }
double PeakRssMiB(pid_t pid) { return StatusFieldMiB(pid, "VmHWM"); }

ExitWatch::ExitWatch(Subprocess& process, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  watcher_ = std::thread([this, &process, start, timeout] {
    while (Clock::now() - start < timeout) {
      if (process.Exited()) {
        seconds_ = SecondsSince(start);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
}

ExitWatch::~ExitWatch() {
  if (watcher_.joinable()) watcher_.join();
}

double ExitWatch::Seconds() {
  if (watcher_.joinable()) watcher_.join();
  return seconds_;
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("signal ", WTERMSIG(wait_status));
  return absl::StrCat("wait status ", wait_status);
}

bool ExitedZero(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

BackgroundStream::BackgroundStream(floe::v1::Floe::Stub& stub, floe::v1::GenerateRequest request,
                                   std::chrono::milliseconds deadline) {
  context_.set_deadline(std::chrono::system_clock::now() + deadline);
  outcome_.started = Clock::now();
  reader_ = std::thread([this, &stub, request = std::move(request)] { Run(stub, request); });
}

BackgroundStream::~BackgroundStream() {
  if (reader_.joinable()) reader_.join();
}

void BackgroundStream::Run(floe::v1::Floe::Stub& stub, floe::v1::GenerateRequest request) {
  auto reader = stub.Generate(&context_, request);
  floe::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      const auto& ids = response.chunk().token_ids();
      if (!outcome_.got_tokens() && !ids.empty()) outcome_.first_token = Clock::now();
      outcome_.token_ids.insert(outcome_.token_ids.end(), ids.begin(), ids.end());
      outcome_.text += response.chunk().text();
      tokens_.store(static_cast<int>(outcome_.token_ids.size()));
    } else if (response.has_complete()) {
      outcome_.completed = true;
      outcome_.complete = response.complete();
    }
  }
  outcome_.status = reader->Finish();
  outcome_.ended = Clock::now();
  done_.store(true);
}

bool BackgroundStream::WaitForTokens(int n, std::chrono::milliseconds timeout) const {
  WaitFor([&] { return tokens() >= n || done(); }, timeout);
  return tokens() >= n;
}

const StreamOutcome& BackgroundStream::Join() {
  if (reader_.joinable()) reader_.join();
  return outcome_;
}

StalledStream::StalledStream(const std::string& address, const floe::v1::GenerateRequest& request,
                             std::chrono::milliseconds deadline) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Its own connection: the stall must not share a window with other streams.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  stub_ = floe::v1::Floe::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  if (deadline.count() > 0) context_.set_deadline(std::chrono::system_clock::now() + deadline);
  reader_ = stub_->Generate(&context_, request);  // sends it; nothing is read
}

int WorkerServing(LocalCluster& cluster, const std::string& session) {
  const int workers = static_cast<int>(cluster.worker_addresses().size());
  auto finished = [&](int i) { return Metric(MetricsUrl(cluster.worker(i)), "floe_request_success_total"); };
  std::vector<double> before(workers);
  for (int i = 0; i < workers; ++i) before[i] = finished(i);
  auto stub = cluster.RouterStub();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  floe::v1::GenerateResult result;
  if (!stub->GenerateUnary(&context, GreedyRequest("which worker?", 1, session), &result).ok()) return -1;
  int serving = -1;
  for (int i = 0; i < workers; ++i) {
    const double grew = finished(i) - before[i];
    if (std::isnan(grew)) return -1;
    if (grew == 1) {
      if (serving >= 0) return -1;  // someone else's request: cannot tell
      serving = i;
    }
  }
  return serving;
}

std::string SessionOnWorker(LocalCluster& cluster, int index, int tries) {
  for (int i = 0; i < tries; ++i) {
    const std::string session = absl::StrCat("fault-session-", i);
    if (WorkerServing(cluster, session) == index) return session;
  }
  return "";
}

bool SnapshottingSuffixCache::Start(const std::string& port) {
  auto spawned = Subprocess::Spawn({BinaryPath("floe-suffix-cache"), "--host", "127.0.0.1", "--port", port,
                                    "--metrics-port", "-1", "--snapshot-dir", snapshot_dir_,
                                    "--snapshot-interval-s", std::to_string(interval_s_)});
  if (!spawned.ok()) return false;
  process_ = std::move(spawned).value();
  auto address = process_->WaitForLine("suffix-cache listening on ", std::chrono::seconds(30));
  if (!address.ok()) return false;
  address_ = *address;
  return true;
}

void SnapshottingSuffixCache::Kill() {
  ::kill(process_->pid(), SIGKILL);
  process_->Terminate(std::chrono::seconds(5));  // reaps it
}

grpc::Status SnapshottingSuffixCache::Stats(floe::v1::SuffixStats* stats, std::chrono::milliseconds timeout) {
  auto stub = floe::v1::SuffixCache::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  const auto give_up = Clock::now() + timeout;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::Status status = stub->GetStats(&context, floe::v1::SuffixStatsRequest(), stats);
    if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE || Clock::now() >= give_up) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace floe::testing
