#include "services/router/worker_pool.h"

#include "common/log/log.h"

namespace floe {

WorkerPool::WorkerPool(const std::vector<std::string>& addresses, WorkerPoolOptions options)
    : options_(options) {
  for (const std::string& address : addresses) {
    auto worker = std::make_unique<WorkerState>();
    worker->address = address;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    // Reconnect quickly after a worker restart.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    worker->channel = grpc::CreateCustomChannel(
        address, options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(), args);
    worker->stub = floe::v1::Worker::NewStub(worker->channel);
    workers_.push_back(std::move(worker));
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void WorkerPool::Start() {
  PollOnce();
  poller_ = std::thread([this] { PollLoop(); });
}

int WorkerPool::healthy_count() const {
  int n = 0;
  for (const auto& w : workers_) n += w->healthy.load() ? 1 : 0;
  return n;
}

void WorkerPool::ReportFailure(WorkerState* worker) {
  if (worker->healthy.exchange(false)) {
    worker->ejections.fetch_add(1);
    LogEvent(LogLevel::kWarning, "router", "worker_ejected", {{"worker", worker->address}});
  }
}

void WorkerPool::PollOnce() {
  for (const auto& worker : workers_) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + options_.poll_deadline);
    PrepareContext(&context);
    floe::v1::LoadReport report;
    grpc::Status status = worker->stub->GetLoad(&context, floe::v1::LoadRequest(), &report);
    if (status.ok()) {
      worker->consecutive_failures.store(0);
      worker->reported_waiting.store(report.waiting());
      worker->reported_running.store(report.running());
      worker->reported_kv_usage.store(report.kv_usage());
      if (!worker->healthy.exchange(true))
        LogEvent(LogLevel::kInfo, "router", "worker_healthy", {{"worker", worker->address}});
    } else if (worker->consecutive_failures.fetch_add(1) + 1 >= options_.eject_after_failures) {
      ReportFailure(worker.get());
    }
  }
}

void WorkerPool::PollLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // Until some worker answers, poll often: the router serves only then, so
    // a start-up should not wait out a whole period after the workers are up.
    const auto period = healthy_count() > 0 ? options_.poll_interval
                                            : std::min(options_.poll_interval, std::chrono::milliseconds(50));
    stop_cv_.wait_for(lock, period, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    PollOnce();
    lock.lock();
  }
}

bool WorkerPool::FetchModelInfo(floe::v1::ModelInfo* info, std::chrono::milliseconds deadline) const {
  for (const auto& worker : workers_) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    PrepareContext(&context);
    if (worker->stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), info).ok()) return true;
  }
  return false;
}

}  // namespace floe
