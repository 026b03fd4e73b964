#include "services/worker/engine/engine.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace floe {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Backend> backend,
                                                       EngineOptions options,
                                                       std::vector<std::unique_ptr<Proposer>> proposers) {
  auto core = EngineCore::Create(std::move(backend), std::move(options), std::move(proposers));
  if (!core.ok()) return core.status();
  return std::unique_ptr<Engine>(new Engine(std::move(core).value()));
}

Engine::Engine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {
  load_ = core_->Load();
  counters_ = core_->counters();  // every series exists, at 0, before the first request
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

absl::Status Engine::Submit(EngineRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  if (queued_ >= core_->options().max_waiting)
    return absl::ResourceExhaustedError(absl::StrCat("waiting queue is full (", queued_,
                                                     " requests; limit max_waiting = ",
                                                     core_->options().max_waiting, ")"));
  ++queued_;
  inbox_.push_back(std::move(request));
  wake_.notify_one();
  return absl::OkStatus();
}

void Engine::Abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(request_id);
  wake_.notify_one();
}

EngineLoad Engine::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return load_;
}

EngineCounters Engine::Counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void Engine::Loop() {
  for (;;) {
    std::vector<EngineRequest> arrivals;
    std::vector<std::string> aborts;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !aborts_.empty() || core_->HasWork(); });
      arrivals.swap(inbox_);
      aborts.swap(aborts_);
      stopping = stopping_;
    }
    for (EngineRequest& request : arrivals) core_->Add(std::move(request));
    for (const std::string& id : aborts) core_->Abort(id);
    if (stopping) {
      core_->AbortAll(absl::UnavailableError("server shutting down"));
      std::lock_guard<std::mutex> lock(mu_);
      load_ = core_->Load();
      return;
    }
    if (core_->HasWork()) {
      absl::Status status = core_->Step();
      (void)status;  // failed requests were told why; the engine keeps serving
    }
    std::lock_guard<std::mutex> lock(mu_);
    load_ = core_->Load();
    counters_ = core_->counters();
    queued_ = load_.waiting + static_cast<int>(inbox_.size());
  }
}

}  // namespace floe
