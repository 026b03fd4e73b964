#include "services/worker/worker_service.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <span>
#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log/log.h"
#include "common/rpc/status_conversion.h"
#include "services/request/resolve_request.h"

namespace floe {
namespace {

using floe::v1::GenerateRequest;
using floe::v1::GenerateResponse;

// Outputs handed from the engine thread to the gRPC thread of one call.
struct OutputQueue {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::pair<int, RequestOutput>> outputs;  // (choice, output)
};

floe::v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return floe::v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop: return floe::v1::FINISH_REASON_STOP;
    case FinishReason::kAbort: return floe::v1::FINISH_REASON_ABORT;
    case FinishReason::kContext: return floe::v1::FINISH_REASON_CONTEXT;
    case FinishReason::kNone: break;
  }
  return floe::v1::FINISH_REASON_UNSPECIFIED;
}

// A resolved request (ResolveRequest) in the engine's terms: no checks left.
EngineRequest FromProto(const GenerateRequest& in, const std::string& default_namespace) {
  EngineRequest out;
  out.prompt.assign(in.token_ids().ids().begin(), in.token_ids().ids().end());
  const auto& s = in.sampling();
  out.sampling.temperature = s.temperature();
  out.sampling.top_k = s.top_k();
  out.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  out.sampling.min_p = s.min_p();
  out.sampling.repetition_penalty = s.repetition_penalty();
  out.sampling.presence_penalty = s.presence_penalty();
  out.sampling.frequency_penalty = s.frequency_penalty();
  for (const auto& [id, bias] : s.logit_bias()) out.sampling.logit_bias.emplace_back(id, bias);
  std::sort(out.sampling.logit_bias.begin(), out.sampling.logit_bias.end());  // a map's order is unspecified
  if (s.has_seed()) {
    out.seeded = true;
    out.sampling.seed = s.seed();
  }
  const auto& stop = in.stopping();
  out.stop.max_tokens = stop.max_tokens();
  out.stop.min_tokens = stop.min_tokens();
  out.stop.stop_token_ids.assign(stop.stop_token_ids().begin(), stop.stop_token_ids().end());
  out.stop.ignore_eos = stop.ignore_eos();
  out.logprobs = in.logprobs().enabled();
  out.top_logprobs = in.logprobs().top_n();
  if (in.logprobs().has_prompt_top_n()) out.prompt_logprobs = in.logprobs().prompt_top_n();
  out.speculation.disable = in.speculation().disable();
  out.speculation.ns = in.speculation().namespace_().empty() ? default_namespace : in.speculation().namespace_();
  out.sampling.forced_tokens.assign(in.forced_output_ids().begin(), in.forced_output_ids().end());
  if (!in.cache_salt().empty()) {
    // FNV-1a then MurmurHash3's finalizer; never 0, the unsalted chain's seed.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : in.cache_salt()) h = (h ^ c) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    out.cache_salt_hash = h == 0 ? 1 : h;
  }
  return out;
}

void FillChunk(const RequestOutput& output, std::span<const int32_t> prompt, floe::v1::Chunk* chunk) {
  chunk->mutable_token_ids()->Add(output.new_tokens.begin(), output.new_tokens.end());
  for (size_t i = 0; i < output.logprobs.size(); ++i) {
    auto* lp = chunk->add_logprobs();
    lp->set_token_id(output.new_tokens[i]);
    lp->set_logprob(output.logprobs[i].logprob);
    lp->mutable_top_ids()->Add(output.logprobs[i].top_ids.begin(), output.logprobs[i].top_ids.end());
    lp->mutable_top_logprobs()->Add(output.logprobs[i].top_logprobs.begin(),
                                    output.logprobs[i].top_logprobs.end());
  }
  if (output.has_prompt_logprobs) chunk->add_prompt_logprobs()->set_token_id(prompt[0]);  // rank 0: none
  for (size_t i = 0; i < output.prompt_logprobs.size(); ++i) {
    const TokenLogprobs& in = output.prompt_logprobs[i];
    auto* lp = chunk->add_prompt_logprobs();
    lp->set_token_id(prompt[i + 1]);
    lp->set_logprob(in.logprob);
    lp->set_rank(in.rank);
    lp->mutable_top_ids()->Add(in.top_ids.begin(), in.top_ids.end());
    lp->mutable_top_logprobs()->Add(in.top_logprobs.begin(), in.top_logprobs.end());
  }
}

}  // namespace

void WorkerService::AttachEngine(Engine* engine, WorkerServiceOptions description) {
  options_ = std::move(description);
  engine_.store(engine);
}

WorkerService::WorkerService(std::shared_ptr<const InternalTrust> internal_trust)
    : internal_trust_(std::move(internal_trust)) {
  std::random_device entropy;
  instance_ = absl::StrFormat("%08x%08x", entropy(), entropy());
}

grpc::Status WorkerService::AuthorizeInternal(const grpc::ServerContext& context, std::string_view call) const {
  return internal_trust_ ? internal_trust_->Authorize(context, call) : grpc::Status::OK;
}

void WorkerService::StartDraining() { draining_.store(true); }

grpc::Status WorkerService::Generate(grpc::ServerContext* context, const GenerateRequest* request,
                                     grpc::ServerWriter<GenerateResponse>* writer) {
  const auto arrival = std::chrono::steady_clock::now();
  if (grpc::Status s = AuthorizeInternal(*context, "Worker.Generate"); !s.ok()) return s;
  Engine* engine = engine_.load();
  if (!engine) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "model loading");
  if (draining_.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining");
  if (request->forced_output_ids_size() > 0 && !options_.allow_forced_decoding)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "forced_output_ids is a benchmark mode: this worker was not started with "
                        "--benchmark-forced-decoding");
  GenerateRequest resolved = *request;
  if (absl::Status s = ResolveRequest(options_.limits, resolved); !s.ok()) return ToGrpcStatus(s);
  EngineRequest engine_request = FromProto(resolved, options_.default_namespace);
  engine_request.arrival = arrival;
  if (resolved.has_structured_output()) {
    // Compiled here, on this request's thread, never on the engine's step
    // loop; the time it takes is this request's queue time.
    auto compiled = CompileStructuredOutput(resolved.structured_output());
    if (!compiled.ok()) return ToGrpcStatus(compiled.status());
    engine_request.grammar = *std::move(compiled);
  }
  // One engine request per choice (GenerateRequest.n), each with its own
  // id; choice i is seeded seed + i when the request is seeded.
  const int choices = std::max(1, resolved.n());
  const std::vector<int32_t> prompt_ids(resolved.token_ids().ids().begin(), resolved.token_ids().ids().end());
  std::vector<std::string> engine_ids;
  for (int i = 0; i < choices; ++i)
    engine_ids.push_back(absl::StrCat(instance_, "-", next_request_number_.fetch_add(1)));
  // What the client sees (its own label, or ours when it set none).
  const std::string id = request->request_id().empty() ? engine_ids[0] : request->request_id();
  {
    std::lock_guard<std::mutex> lock(labels_mu_);
    for (const std::string& engine_id : engine_ids) labels_.emplace(id, engine_id);
  }
  struct LabelGuard {
    WorkerService* self;
    const std::string& label;
    const std::vector<std::string>& engine_ids;
    ~LabelGuard() {
      std::lock_guard<std::mutex> lock(self->labels_mu_);
      for (const std::string& engine_id : engine_ids) {
        auto [begin, end] = self->labels_.equal_range(label);
        for (auto it = begin; it != end; ++it) {
          if (it->second == engine_id) {
            self->labels_.erase(it);
            break;
          }
        }
      }
    }
  } label_guard{this, id, engine_ids};

  auto queue = std::make_shared<OutputQueue>();
  std::vector<EngineRequest> followers;  // choices 1.., submitted after choice 0's prefill
  const EngineRequest base = std::move(engine_request);
  for (int i = 0; i < choices; ++i) {
    EngineRequest r = base;
    r.id = engine_ids[i];
    if (r.seeded) r.sampling.seed += static_cast<uint64_t>(i);
    r.sink = [queue, i](const RequestOutput& output) {
      std::lock_guard<std::mutex> lock(queue->mu);
      queue->outputs.push_back({i, output});
      queue->ready.notify_one();
    };
    if (i > 0) followers.push_back(std::move(r));
    else engine_request = std::move(r);
  }
  in_flight_.fetch_add(1);
  struct InFlightGuard {
    std::atomic<int>& count;
    ~InFlightGuard() { count.fetch_sub(1); }
  } guard{in_flight_};
  absl::Status submitted = engine->Submit(std::move(engine_request));
  if (!submitted.ok()) return ToGrpcStatus(submitted);
  int submitted_choices = 1;
  // The other choices start once choice 0 has prefilled the prompt: its full
  // blocks are then in the prefix cache, so theirs are shared, not recomputed.
  auto submit_followers = [&]() -> absl::Status {
    for (EngineRequest& r : followers) {
      if (absl::Status s = engine->Submit(std::move(r)); !s.ok()) return s;
      ++submitted_choices;
    }
    followers.clear();
    return absl::OkStatus();
  };

  bool abort_sent = false;
  auto abort_all = [&] {
    for (int i = 0; i < submitted_choices; ++i) engine->Abort(engine_ids[i]);  // final kAbort outputs follow
    followers.clear();
    abort_sent = true;
  };
  // Latency metrics read the engine's timestamps (RequestOutput::time), the
  // one clock of the request's timeline, not when this thread woke up.
  using Seconds = std::chrono::duration<double>;
  auto last_token = arrival;
  bool first_token_seen = false;
  int finished = 0;
  for (;;) {
    std::deque<std::pair<int, RequestOutput>> batch;
    {
      std::unique_lock<std::mutex> lock(queue->mu);
      queue->ready.wait_for(lock, std::chrono::milliseconds(20), [&] { return !queue->outputs.empty(); });
      batch.swap(queue->outputs);
    }
    if (context->IsCancelled() && !abort_sent) {
      abort_all();
      LogEvent(LogLevel::kInfo, "worker", "request_cancelled", {{"request_id", id}, {"engine_id", engine_ids[0]}});
    }
    for (const auto& [index, output] : batch) {
      if (!output.status.ok()) {
        if (!abort_sent) abort_all();
        return ToGrpcStatus(output.status);
      }
      if (index == 0 && !followers.empty() && (!output.new_tokens.empty() || output.finished()) && !abort_sent) {
        if (absl::Status s = submit_followers(); !s.ok()) {
          abort_all();
          return ToGrpcStatus(s);
        }
      }
      if (metrics_) {
        const int n = static_cast<int>(output.new_tokens.size());
        if (n > 0 && !first_token_seen) {
          metrics_->ObserveFirstToken(Seconds(output.time - arrival).count());
          first_token_seen = true;
          if (n > 1) metrics_->ObserveTokens(0.0, n - 1);
        } else if (n > 0) {
          metrics_->ObserveTokens(Seconds(output.time - last_token).count(), n);
        }
        if (n > 0) last_token = output.time;
        if (output.finished()) metrics_->ObserveFinished(output);
      }
      GenerateResponse response;
      response.set_request_id(id);
      if (!output.new_tokens.empty()) {
        FillChunk(output, prompt_ids, response.mutable_chunk());
        response.mutable_chunk()->set_index(index);
        if (output.finished() && output.stop_token >= 0) response.mutable_chunk()->set_ends_with_stop_token(true);
        if (output.finished()) {
          // Send the last tokens, then the completion in its own message.
          if (!abort_sent && !writer->Write(response)) abort_all();
          response.Clear();
          response.set_request_id(id);
        }
      }
      if (output.finished()) {
        ++finished;
        if (abort_sent) {
          if (finished == submitted_choices) return grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled");
          continue;
        }
        auto* complete = response.mutable_complete();
        complete->set_index(index);
        complete->set_finish_reason(ToProto(output.finish_reason));
        complete->mutable_usage()->set_prompt_tokens(output.prompt_tokens);
        complete->mutable_usage()->set_completion_tokens(output.completion_tokens);
        complete->mutable_usage()->set_cached_prompt_tokens(output.cached_prompt_tokens);
        if (output.stop_token >= 0) complete->set_stop_reason(absl::StrCat("token:", output.stop_token));
        if (!writer->Write(response)) {
          abort_all();
          continue;
        }
        if (finished == choices) return grpc::Status::OK;
        continue;
      }
      if (!abort_sent && !writer->Write(response)) abort_all();
    }
  }
}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> WorkerService::CompileStructuredOutput(
    const floe::v1::StructuredOutput& output) {
  // Refused, never ignored: unconstrained output under a schema the client
  // relies on would be a silent lie.
  if (!options_.structured_output)
    return absl::FailedPreconditionError(
        "structured_output: this worker has no tokenizer (tokenizer.json in its model folder) to compile "
        "grammars against");
  auto compiled = options_.structured_output->Compile(output);
  if (!compiled.ok()) {
    if (metrics_) metrics_->ObserveGrammarCompileError();
    return compiled.status();
  }
  if (metrics_) metrics_->ObserveGrammarCompile(compiled->cache_hit, compiled->compile_seconds);
  return std::move(compiled->grammar);
}

grpc::Status WorkerService::Abort(grpc::ServerContext* context, const floe::v1::AbortRequest* request,
                                  floe::v1::AbortResponse* response) {
  if (grpc::Status s = AuthorizeAdminOrInternal(admin_keys_, internal_trust_.get(), *context, "Worker.Abort"); !s.ok())
    return s;
  Engine* engine = engine_.load();
  if (!engine) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "model loading");
  std::vector<std::string> engine_ids;
  {
    std::lock_guard<std::mutex> lock(labels_mu_);
    auto [begin, end] = labels_.equal_range(request->request_id());
    for (auto it = begin; it != end; ++it) engine_ids.push_back(it->second);
  }
  for (const std::string& engine_id : engine_ids) engine->Abort(engine_id);
  response->set_found(!engine_ids.empty());  // aborts are asynchronous
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetLoad(grpc::ServerContext* context, const floe::v1::LoadRequest*,
                                    floe::v1::LoadReport* response) {
  if (grpc::Status s = AuthorizeInternal(*context, "Worker.GetLoad"); !s.ok()) return s;
  Engine* engine = engine_.load();
  if (!engine) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "model loading");
  EngineLoad load = engine->Load();
  response->set_running(load.running);
  response->set_waiting(load.waiting);
  response->set_kv_usage(load.kv_usage);
  response->set_block_size(load.block_size);
  response->set_total_blocks(load.total_blocks);
  response->set_preemptions_total(load.preemptions);
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetModelInfo(grpc::ServerContext* context, const floe::v1::GetModelInfoRequest*,
                                         floe::v1::ModelInfo* response) {
  if (grpc::Status s = AuthorizeInternal(*context, "Worker.GetModelInfo"); !s.ok()) return s;
  Engine* engine = engine_.load();
  if (!engine) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "model loading");
  const ModelConfig& config = engine->model_config();
  response->set_name(options_.model_name);
  response->set_architecture(config.architecture_name);
  WriteLimits(options_.limits, response);
  response->set_num_layers(config.num_layers);
  response->set_hidden_size(config.hidden_size);
  response->set_dtype(options_.dtype_name);
  response->set_bos_token_id(options_.bos_token_id);
  response->mutable_eos_token_ids()->Add(options_.eos_token_ids.begin(), options_.eos_token_ids.end());
  return grpc::Status::OK;
}

}  // namespace floe
