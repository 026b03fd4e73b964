#include "services/worker/backend/rank_group.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

enum Op : int32_t { kStop = 1, kAllocate = 2, kForward = 3, kCopy = 4 };

struct Header {
  int32_t op = 0;
  int32_t reserved = 0;
  int64_t payload_ints = 0;
};
static_assert(sizeof(Header) == 16);

std::span<std::byte> Bytes(void* p, size_t n) { return {static_cast<std::byte*>(p), n}; }

void Append(std::vector<int32_t>& out, std::span<const int32_t> values) {
  out.push_back(static_cast<int32_t>(values.size()));
  out.insert(out.end(), values.begin(), values.end());
}

// The forward batch from its encoding; spans point into `payload`.
absl::Status Decode(const std::vector<int32_t>& payload, std::vector<ForwardSequence>& batch) {
  size_t at = 0;
  auto take = [&](std::span<const int32_t>& into) -> bool {
    if (at >= payload.size()) return false;
    const int32_t n = payload[at++];
    if (n < 0 || at + n > payload.size()) return false;
    into = std::span<const int32_t>(payload).subspan(at, n);
    at += n;
    return true;
  };
  if (payload.empty()) return absl::DataLossError("forward command: empty payload");
  const int32_t count = payload[at++];
  batch.assign(count < 0 ? 0 : count, ForwardSequence{});
  for (ForwardSequence& f : batch) {
    if (at + 2 > payload.size()) return absl::DataLossError("forward command: truncated");
    f.start_pos = payload[at++];
    f.num_logits = payload[at++];
    if (!take(f.tokens) || !take(f.block_table) || !take(f.parents))
      return absl::DataLossError("forward command: truncated");
  }
  return absl::OkStatus();
}

}  // namespace

LeaderBackend::~LeaderBackend() {
  if (!stopped_) (void)Send(kStop, {});
}

absl::Status LeaderBackend::Send(int32_t op, const std::vector<int32_t>& payload) {
  Header h{op, 0, static_cast<int64_t>(payload.size())};
  if (absl::Status s = comm_->Broadcast(Bytes(&h, sizeof(h)), 0); !s.ok()) return s;
  if (op == kStop) stopped_ = true;
  if (payload.empty()) return absl::OkStatus();
  return comm_->Broadcast(Bytes(const_cast<int32_t*>(payload.data()), payload.size() * sizeof(int32_t)), 0);
}

absl::Status LeaderBackend::Failed(absl::Status status) {
  if (!status.ok() && on_failure_) on_failure_(status);
  return status;
}

absl::Status LeaderBackend::AllocateKvCache(int num_blocks, int block_size) {
  if (absl::Status s = Send(kAllocate, {num_blocks, block_size}); !s.ok()) return Failed(s);
  return Failed(local_->AllocateKvCache(num_blocks, block_size));
}

absl::Status LeaderBackend::Forward(std::span<const ForwardSequence> batch, float* logits) {
  payload_.clear();
  payload_.push_back(static_cast<int32_t>(batch.size()));
  for (const ForwardSequence& f : batch) {
    payload_.push_back(f.start_pos);
    payload_.push_back(f.num_logits);
    Append(payload_, f.tokens);
    Append(payload_, f.block_table);
    Append(payload_, f.parents);
  }
  if (absl::Status s = Send(kForward, payload_); !s.ok()) return Failed(s);
  return Failed(local_->Forward(batch, logits));
}

absl::Status LeaderBackend::CopyKvSlots(std::span<const KvSlotCopy> copies) {
  if (copies.empty()) return local_->CopyKvSlots(copies);  // the engine's capability probe: nothing to send
  payload_.clear();
  for (const KvSlotCopy& c : copies) payload_.insert(payload_.end(), {c.src_block, c.src_slot, c.dst_block, c.dst_slot});
  if (absl::Status s = Send(kCopy, payload_); !s.ok()) return Failed(s);
  return Failed(local_->CopyKvSlots(copies));
}

// How long a follower idles between commands before giving up: an idle
// worker sends none, and a dead leader closes the connection long before.
constexpr std::chrono::hours kIdle(24 * 7);

absl::Status RunFollower(Backend& backend, Communicator& comm) {
  std::vector<int32_t> payload;
  std::vector<ForwardSequence> batch;
  std::vector<float> logits;
  for (;;) {
    Header h;
    if (absl::Status s = comm.Broadcast(Bytes(&h, sizeof(h)), 0, kIdle); !s.ok()) return s;
    if (h.payload_ints < 0 || h.payload_ints > (int64_t{1} << 28))
      return absl::DataLossError(absl::StrCat("command ", h.op, " with ", h.payload_ints, " ints"));
    payload.assign(h.payload_ints, 0);
    if (!payload.empty()) {
      if (absl::Status s = comm.Broadcast(Bytes(payload.data(), payload.size() * sizeof(int32_t)), 0); !s.ok())
        return s;
    }
    switch (h.op) {
      case kStop:
        return absl::OkStatus();
      case kAllocate:
        if (payload.size() != 2) return absl::DataLossError("allocate command: expected 2 ints");
        if (absl::Status s = backend.AllocateKvCache(payload[0], payload[1]); !s.ok()) return s;
        break;
      case kForward: {
        if (absl::Status s = Decode(payload, batch); !s.ok()) return s;
        int64_t rows = 0;
        for (const ForwardSequence& f : batch) rows += f.num_logits;
        logits.resize(static_cast<size_t>(rows) * backend.config().vocab_size);
        if (absl::Status s = backend.Forward(batch, logits.data()); !s.ok()) return s;
        break;
      }
      case kCopy: {
        if (payload.size() % 4 != 0) return absl::DataLossError("copy command: not whole copies");
        std::vector<KvSlotCopy> copies;
        for (size_t i = 0; i < payload.size(); i += 4)
          copies.push_back({payload[i], payload[i + 1], payload[i + 2], payload[i + 3]});
        if (absl::Status s = backend.CopyKvSlots(copies); !s.ok()) return s;
        break;
      }
      default:
        return absl::DataLossError(absl::StrCat("unknown command ", h.op));
    }
  }
}

}  // namespace floe
