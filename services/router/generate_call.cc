#include "services/router/generate_call.h"

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/rpc/status_conversion.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/stop_string_matcher.h"

namespace floe {

using floe::v1::GenerateRequest;
using floe::v1::GenerateResponse;

namespace {

// How a worker stream that broke after the client got some of it ends. gRPC's
// own text ("recvmsg:Connection reset by peer") names no worker and does not
// say the answer is cut: the client (and the log) get both, with gRPC's
// detail kept after them and its code unchanged.
grpc::Status MidStreamFailure(const std::string& worker, int tokens, const GenerateRequest& request,
                              const grpc::Status& status) {
  const std::string where =
      status.ok() ? absl::StrCat("worker ", worker, " ended the stream after ", tokens, " tokens without completing it")
                  : absl::StrCat("worker ", worker, " failed mid-stream after ", tokens, " tokens");
  LogEvent(LogLevel::kWarning, "router", "worker_failed_mid_stream",
           {{"request_id", request.request_id()},
            {"worker", worker},
            {"tokens", static_cast<int64_t>(tokens)},
            {"error", status.error_message()}});
  if (status.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, where);
  return grpc::Status(status.error_code(), absl::StrCat(where, ": ", status.error_message()), status.error_details());
}

}  // namespace

// One worker call; deletes itself after OnDone. No gRPC operation is started
// with the owner's mu_ held: a reaction may run inline and take it.
class GenerateCall::Attempt final : public grpc::ClientReadReactor<GenerateResponse> {
 public:
  Attempt(std::shared_ptr<GenerateCall> owner, WorkerState* worker, std::shared_ptr<grpc::ClientContext> context)
      : owner_(std::move(owner)),
        worker_(worker),
        context_(std::move(context)) {
    const std::vector<std::string> stops(owner_->request_.stopping().stop().begin(),
                                         owner_->request_.stopping().stop().end());
    for (int i = 0; i < std::max(1, owner_->request_.n()); ++i)
      choices_.push_back(std::make_unique<Choice>(owner_->parts_.tokenizer, SkipSpecialTokens(owner_->request_), stops));
    worker_->outstanding.fetch_add(1);
  }

  // Each choice's text: its own detokenizer and stop strings.
  struct Choice {
    Choice(const Tokenizer* tokenizer, bool skip_special, const std::vector<std::string>& stops)
        : detokenizer(tokenizer, skip_special), matcher(stops) {}
    IncrementalDetokenizer detokenizer;
    StopStringMatcher matcher;
    bool done = false;
    int completion_tokens = 0;
  };

  // The owner set read_pending_ for the first read.
  void Begin() {
    worker_->stub->async()->Generate(context_.get(), &owner_->request_, this);
    AddHold();  // keeps OnDone back until no further read will be started
    StartRead(&in_);
    StartCall();
  }
  void ReadNext() { StartRead(&in_); }
  void ReleaseHold() { RemoveHold(); }
  const std::shared_ptr<grpc::ClientContext>& context() const { return context_; }
  WorkerState* worker() const { return worker_; }
  // Null for an index the request has no choice for.
  Choice* choice(int index) {
    return index >= 0 && index < static_cast<int>(choices_.size()) ? choices_[index].get() : nullptr;
  }
  int choices_left() const {
    int left = 0;
    for (const auto& c : choices_) left += c->done ? 0 : 1;
    return left;
  }

  void OnReadDone(bool ok) override {
    GenerateCall& owner = *owner_;
    bool release = false, cancelled;
    {
      std::lock_guard<std::mutex> lock(owner.mu_);
      owner.read_pending_ = false;
      cancelled = owner.cancelled_;
      if ((!ok || cancelled) && !owner.reading_done_) release = owner.reading_done_ = true;
    }
    if (!ok || cancelled) {
      if (release) RemoveHold();  // last: OnDone may follow at once
      return;
    }
    std::vector<GenerateResponse> events;
    const bool more = owner.Relay(*this, in_, &events);
    if (!more) {
      // A stop string matched or the text failed: the worker aborts and frees the KV.
      context_->TryCancel();
      std::lock_guard<std::mutex> lock(owner.mu_);
      if (!owner.reading_done_) release = owner.reading_done_ = true;
    }
    if (!events.empty()) {
      owner.sink_.on_events(owner, std::move(events));  // the sink calls Resume()
    } else if (more) {
      owner.Resume();
    }
    if (release) RemoveHold();
  }
  void OnDone(const grpc::Status& status) override {
    // Released before the owner hears: AttemptDone may finish the call, and
    // once the last call is finished the router may shut down and free the
    // worker pool while this thread is still unwinding.
    worker_->outstanding.fetch_sub(1);
    std::shared_ptr<GenerateCall> owner = std::move(owner_);
    owner->AttemptDone(this, status);
    delete this;
  }

 private:
  static bool SkipSpecialTokens(const GenerateRequest& r) {
    return !r.has_skip_special_tokens() || r.skip_special_tokens();
  }

  std::shared_ptr<GenerateCall> owner_;
  WorkerState* const worker_;
  std::shared_ptr<grpc::ClientContext> context_;
  std::vector<std::unique_ptr<Choice>> choices_;
  GenerateResponse in_;
};

std::shared_ptr<GenerateCall> GenerateCall::Start(const RouterParts& parts, GenerateRequest request,
                                                  MakeContext make_context, Sink sink) {
  std::shared_ptr<GenerateCall> call(
      new GenerateCall(parts, std::move(request), std::move(make_context), std::move(sink)));
  call->pick_.session_id = call->request_.session_id();
  parts.gate->EnterAsync([call](absl::Status admitted) { call->Admitted(std::move(admitted)); });
  return call;
}

GenerateCall::GenerateCall(const RouterParts& parts, GenerateRequest request, MakeContext make_context, Sink sink)
    : parts_(parts), request_(std::move(request)), make_context_(std::move(make_context)), sink_(std::move(sink)) {}

GenerateCall::~GenerateCall() = default;

void GenerateCall::Admitted(absl::Status status) {
  if (!status.ok()) return Finish(ToGrpcStatus(status));
  admitted_ = true;
  parts_.in_flight->fetch_add(1);
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled = cancelled_;
  }
  if (cancelled) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled while queued"));
  StartAttempt();
}

void GenerateCall::StartAttempt() {
  WorkerState* worker = parts_.picker->Pick(pick_);
  if (!worker) {
    if (attempt_number_ == 0 || last_status_.ok())
      return Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker left to try"));
    return Finish(last_status_);
  }
  ++attempt_number_;
  received_ = false;
  std::shared_ptr<grpc::ClientContext> context = make_context_();
  parts_.pool->PrepareContext(context.get());  // the internal key
  const auto limit = std::chrono::system_clock::now() + parts_.max_request_time;
  if (context->deadline() > limit) context->set_deadline(limit);
  auto* attempt = new Attempt(shared_from_this(), worker, context);
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attempt_ = attempt;
    attempt_context_ = context;
    read_pending_ = true;  // Begin starts the first read
    reading_done_ = false;
    cancelled = cancelled_;
  }
  if (cancelled) context->TryCancel();
  attempt->Begin();
}

bool GenerateCall::Relay(Attempt& attempt, const GenerateResponse& in, std::vector<GenerateResponse>* out) {
  received_ = true;
  const std::string& id = request_.request_id();
  auto event = [&]() -> GenerateResponse& {
    out->emplace_back();
    out->back().set_request_id(id);
    return out->back();
  };
  if (in.has_chunk()) {
    Attempt::Choice* choice = attempt.choice(in.chunk().index());
    if (!choice) {
      relay_error_ = grpc::Status(grpc::StatusCode::INTERNAL,
                                  absl::StrCat("worker sent choice ", in.chunk().index(), " of a request with n = ",
                                               std::max(1, request_.n())));
      return false;
    }
    if (choice->done) return true;  // ended by a stop string; the others go on
    if (!first_token_seen_ && in.chunk().token_ids_size() > 0) {
      first_token_seen_ = true;
      if (parts_.metrics)
        parts_.metrics->ObserveFirstToken(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    completion_tokens_ += in.chunk().token_ids_size();
    choice->completion_tokens += in.chunk().token_ids_size();
    absl::Span<const int32_t> ids(in.chunk().token_ids().data(), in.chunk().token_ids_size());
    if (in.chunk().ends_with_stop_token() && !ids.empty()) ids.remove_suffix(1);
    auto text = choice->detokenizer.Add(ids);
    if (!text.ok()) {
      relay_error_ = ToGrpcStatus(text.status());
      return false;
    }
    StopStringMatcher::Result matched = choice->matcher.Consume(*text);
    GenerateResponse& chunk = event();
    *chunk.mutable_chunk() = in.chunk();
    chunk.mutable_chunk()->set_text(matched.text);
    if (matched.stopped) {
      floe::v1::Complete* complete = event().mutable_complete();
      complete->set_index(in.chunk().index());
      complete->set_finish_reason(floe::v1::FINISH_REASON_STOP);
      complete->set_stop_reason(matched.matched);
      complete->mutable_usage()->set_prompt_tokens(request_.token_ids().ids_size());
      complete->mutable_usage()->set_completion_tokens(choice->completion_tokens);
      choice->done = true;
      if (attempt.choices_left() > 0) return true;  // the worker finishes the others
      complete_ = true;
      return false;
    }
    return true;
  }
  if (in.has_complete()) {
    Attempt::Choice* choice = attempt.choice(in.complete().index());
    if (!choice) {
      relay_error_ = grpc::Status(grpc::StatusCode::INTERNAL,
                                  absl::StrCat("worker completed choice ", in.complete().index(),
                                               " of a request with n = ", std::max(1, request_.n())));
      return false;
    }
    if (choice->done) return true;
    StopStringMatcher::Result tail = choice->matcher.Consume(choice->detokenizer.Finish());
    std::string text = tail.text + (tail.stopped ? "" : choice->matcher.Flush());
    if (!text.empty()) {
      floe::v1::Chunk* chunk = event().mutable_chunk();
      chunk->set_text(text);
      chunk->set_index(in.complete().index());
    }
    GenerateResponse& done = event();
    *done.mutable_complete() = in.complete();
    if (tail.stopped) {
      done.mutable_complete()->set_finish_reason(floe::v1::FINISH_REASON_STOP);
      done.mutable_complete()->set_stop_reason(tail.matched);
    }
    choice->done = true;
    if (attempt.choices_left() == 0) complete_ = true;
    return true;  // read on to the end of the worker's stream
  }
  return true;  // other events are the worker's own; nothing to relay
}

void GenerateCall::Resume() {
  Attempt* attempt = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!attempt_ || reading_done_ || read_pending_) return;
    read_pending_ = true;  // holds the attempt alive: its hold stays until the read ends
    attempt = attempt_;
  }
  attempt->ReadNext();
}

void GenerateCall::Cancel() {
  Attempt* release = nullptr;
  std::shared_ptr<grpc::ClientContext> context;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (!attempt_) return;
    context = attempt_context_;
    if (!read_pending_ && !reading_done_) {
      reading_done_ = true;
      release = attempt_;
    }
  }
  context->TryCancel();
  if (release) release->ReleaseHold();
}

void GenerateCall::AttemptDone(Attempt* attempt, const grpc::Status& status) {
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attempt_ = nullptr;
    attempt_context_.reset();
    cancelled = cancelled_;
  }
  if (complete_) return Finish(grpc::Status::OK);
  if (!relay_error_.ok()) return Finish(relay_error_);
  if (cancelled) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled"));
  // Retry elsewhere only if nothing reached the client and the worker itself failed.
  const bool worker_failed = status.error_code() == grpc::StatusCode::UNAVAILABLE || (status.ok() && !received_);
  if (received_) return Finish(MidStreamFailure(attempt->worker()->address, completion_tokens_, request_, status));
  if (!worker_failed || attempt_number_ > parts_.max_retries) {
    if (status.ok()) return Finish(grpc::Status(grpc::StatusCode::INTERNAL, "worker ended the stream early"));
    return Finish(status);
  }
  parts_.pool->ReportFailure(attempt->worker());
  pick_.exclude.push_back(attempt->worker());
  if (parts_.metrics) parts_.metrics->ObserveRetry();
  LogEvent(LogLevel::kWarning, "router", "retry_on_other_worker",
           {{"request_id", request_.request_id()},
            {"worker", attempt->worker()->address},
            {"error", status.error_message()}});
  last_status_ = status;
  StartAttempt();
}

void GenerateCall::Finish(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  if (admitted_) parts_.gate->Leave();
  if (parts_.metrics)
    parts_.metrics->ObserveFinished(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  // The drain waits for in_flight to reach 0 before main frees the gate, the
  // metrics and the pool, so the count drops last.
  sink_.on_done(status);
  if (admitted_) parts_.in_flight->fetch_sub(1);
}

}  // namespace floe
