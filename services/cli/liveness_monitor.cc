#include "services/cli/liveness_monitor.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/liveness_watchdog.h"

namespace floe {
namespace {

// HealthCheckResponse without its generated code: one enum field.
constexpr uint32_t kStatusTag = (1 << 3) | 0;  // field 1, varint
constexpr uint32_t kServing = 1;               // HealthCheckResponse.SERVING

bool AnswersServing(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  uint32_t status = 0;  // UNKNOWN when absent, as proto3 reads it
  while (const uint32_t tag = in.ReadTag()) {
    if (tag == kStatusTag) {
      if (!in.ReadVarint32(&status)) return false;
    } else if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  return status == kServing;
}

}  // namespace

struct LivenessMonitor::Check {
  std::shared_ptr<grpc::Channel> channel;  // outlives the call even once Forgotten
  grpc::ClientContext context;
  grpc::ByteBuffer request;  // HealthCheckRequest{service: ""}: no bytes
  grpc::ByteBuffer response;
  grpc::Status status;  // written by the callback before `done`
  std::atomic<bool> done{false};
};

LivenessMonitor::LivenessMonitor(Options options, std::shared_ptr<grpc::ChannelCredentials> credentials,
                                 std::string bearer)
    : options_(options), credentials_(std::move(credentials)), bearer_(std::move(bearer)) {}

LivenessMonitor::~LivenessMonitor() {
  for (auto& [id, watched] : watched_) {
    if (watched.in_flight) abandoned_.push_back(std::move(watched.in_flight));
  }
  for (const auto& check : abandoned_) check->context.TryCancel();
  // A cancelled call completes promptly; the deadline bounds it anyway.
  for (const auto& check : abandoned_) {
    while (!check->done.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void LivenessMonitor::Watch(size_t id, const std::string& address) {
  Forget(id);
  grpc::ChannelArguments args;
  // A channel of its own, reconnecting at the check rate: a replaced
  // process on the same port is seen at its first answer, not after a
  // shared subchannel's backoff (up to two minutes by default). (Not
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: that is also the connect timeout,
  // and a busy service's handshake may be slow; the check's deadline bounds
  // a connection attempt anyway.)
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const int backoff_ms = static_cast<int>(options_.interval.count());
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  Watched& watched = watched_[id];
  watched.channel = grpc::CreateCustomChannel(address, credentials_, args);
  watched.next_check = std::chrono::steady_clock::now();
}

void LivenessMonitor::Forget(size_t id) {
  auto it = watched_.find(id);
  if (it == watched_.end()) return;
  if (it->second.in_flight) {
    it->second.in_flight->context.TryCancel();
    abandoned_.push_back(std::move(it->second.in_flight));
  }
  watched_.erase(it);
}

void LivenessMonitor::Start(Watched& watched) {
  auto check = std::make_shared<Check>();
  check->channel = watched.channel;
  grpc::Slice no_bytes;
  check->request = grpc::ByteBuffer(&no_bytes, 1);
  check->context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  if (!bearer_.empty()) check->context.AddMetadata("authorization", absl::StrCat("Bearer ", bearer_));
  Check* raw = check.get();  // the monitor owns it until `done`
  grpc::GenericStub(check->channel)
      .UnaryCall(&check->context, kHealthCheckMethod, grpc::StubOptions(), &check->request, &check->response,
                 [raw](grpc::Status status) {
                   raw->status = std::move(status);
                   raw->done.store(true, std::memory_order_release);
                 });
  watched.in_flight = std::move(check);
  watched.next_check = std::chrono::steady_clock::now() + options_.interval;
}

std::vector<LivenessMonitor::Verdict> LivenessMonitor::CheckAllNow() {
  for (auto& [id, watched] : watched_) {
    if (!watched.in_flight) Start(watched);
  }
  for (const auto& [id, watched] : watched_) {
    while (!watched.in_flight->done.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return Poll();
}

std::vector<LivenessMonitor::Verdict> LivenessMonitor::Poll() {
  std::erase_if(abandoned_, [](const auto& check) { return check->done.load(std::memory_order_acquire); });
  std::vector<Verdict> hung;
  for (auto& [id, watched] : watched_) {
    if (watched.in_flight && watched.in_flight->done.load(std::memory_order_acquire)) {
      const std::shared_ptr<Check> check = std::move(watched.in_flight);
      ++watched.checks_finished;
      if (check->status.ok()) {
        watched.consecutive_failures = 0;
        watched.ready = watched.ready || AnswersServing(check->response);
      } else if (watched.ready && ++watched.consecutive_failures >= options_.failures) {
        hung.push_back(
            {id, watched.consecutive_failures,
             absl::StrCat(watched.consecutive_failures, " health checks in a row unanswered (deadline ",
                          options_.deadline.count(), " ms), the last: ",
                          absl::StatusCodeToString(static_cast<absl::StatusCode>(check->status.error_code())), ": ",
                          check->status.error_message())});
        continue;
      }
    }
    if (!watched.in_flight && std::chrono::steady_clock::now() >= watched.next_check) Start(watched);
  }
  for (const Verdict& verdict : hung) Forget(verdict.id);
  return hung;
}

bool LivenessMonitor::ready(size_t id) const {
  auto it = watched_.find(id);
  return it != watched_.end() && it->second.ready;
}

int LivenessMonitor::checks_finished(size_t id) const {
  auto it = watched_.find(id);
  return it == watched_.end() ? 0 : it->second.checks_finished;
}

}  // namespace floe
