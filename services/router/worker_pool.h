// The router's view of its workers: a channel and stub for each, how many of
// the router's requests each is serving, and its health, refreshed by a
// background poller (GetLoad with a deadline). A worker that fails
// `eject_after_failures` polls in a row is ejected (no new requests) until a
// poll succeeds again; a failed Generate call ejects it at once. Ejected
// workers still get requests while no worker is healthy (worker_picker.h).
//
// Thread-safe: the poller thread writes health/load, gRPC threads read them
// and bump the outstanding counters.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/auth/internal_trust.h"
#include "floe/v1/worker.grpc.pb.h"

namespace floe {

struct WorkerState {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<floe::v1::Worker::Stub> stub;
  std::atomic<int> outstanding{0};
  std::atomic<bool> healthy{false};
  std::atomic<int> consecutive_failures{0};
  // Last load report (waiting, running, KV usage) as the worker saw it.
  std::atomic<int> reported_waiting{0};
  std::atomic<int> reported_running{0};
  std::atomic<float> reported_kv_usage{0.0f};
  std::atomic<int64_t> ejections{0};
  // Attempts sent while ejected because no untried worker was healthy
  // (panic routing, worker_picker.h).
  std::atomic<int64_t> panic_picks{0};
};

struct WorkerPoolOptions {
  std::chrono::milliseconds poll_interval{250};
  std::chrono::milliseconds poll_deadline{500};
  int eject_after_failures = 2;
  // TLS towards the workers (common/rpc/tls.h); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The internal key every call to a worker carries (common/auth/
  // internal_trust.h); null: none.
  std::shared_ptr<const InternalTrust> internal_trust;
};

class WorkerPool {
 public:
  WorkerPool(const std::vector<std::string>& addresses, WorkerPoolOptions options);
  ~WorkerPool();  // stops the poller

  // Polls every worker once now, then keeps polling in the background.
  void Start();
  const std::vector<std::unique_ptr<WorkerState>>& workers() const { return workers_; }
  int healthy_count() const;
  // A call to this worker failed: stop routing to it until a poll succeeds.
  void ReportFailure(WorkerState* worker);
  // Adds what every call to a worker carries (the internal key): each
  // ClientContext made for a worker goes through here before its call.
  void PrepareContext(grpc::ClientContext* context) const {
    if (options_.internal_trust) options_.internal_trust->Attach(context);
  }
  // The model as the first healthy worker describes it; false if none answers.
  bool FetchModelInfo(floe::v1::ModelInfo* info, std::chrono::milliseconds deadline) const;

 private:
  void PollOnce();
  void PollLoop();

  WorkerPoolOptions options_;
  std::vector<std::unique_ptr<WorkerState>> workers_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread poller_;
};

}  // namespace floe
