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
absl::Status Decode(const std::vector<int32_t>& payload, std::vector<ForwardSequence>& batch,
                    ParallelMode* parallel_mode) {
  size_t at = 0;
  auto take = [&](std::span<const int32_t>& into) -> bool {
    if (at >= payload.size()) return false;
    const int32_t n = payload[at++];
    if (n < 0 || at + n > payload.size()) return false;
    into = std::span<const int32_t>(payload).subspan(at, n);
    at += n;
    return true;
  };
  if (payload.size() < 2) return absl::DataLossError("forward command: empty payload");
  const int32_t mode = payload[at++];
  if (mode != static_cast<int32_t>(ParallelMode::kTensor) && mode != static_cast<int32_t>(ParallelMode::kSequence))
    return absl::DataLossError(absl::StrCat("forward command: mode ", mode));
  *parallel_mode = static_cast<ParallelMode>(mode);
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
  int64_t tokens = 0;
  for (const ForwardSequence& f : batch) tokens += static_cast<int64_t>(f.tokens.size());
  const ParallelMode mode = policy_.Choose(tokens);
  payload_.clear();
  payload_.push_back(static_cast<int32_t>(mode));
  payload_.push_back(static_cast<int32_t>(batch.size()));
  for (const ForwardSequence& f : batch) {
    payload_.push_back(f.start_pos);
    payload_.push_back(f.num_logits);
    Append(payload_, f.tokens);
    Append(payload_, f.block_table);
    Append(payload_, f.parents);
  }
  if (absl::Status s = Send(kForward, payload_); !s.ok()) return Failed(s);
  local_->SetParallelMode(mode);
  const int64_t collective_before = stats_->collective_ns.load(std::memory_order_relaxed);
  absl::Status s = local_->Forward(batch, logits);
  // Counted for the metrics.
  const int m = static_cast<int>(mode);
  if (stats_->mode.exchange(m) != m && stats_->steps[0] + stats_->steps[1] > 0) stats_->switches.fetch_add(1);
  stats_->steps[m].fetch_add(1);
  stats_->tokens[m].fetch_add(tokens);
  const int64_t ns = stats_->collective_ns.load(std::memory_order_relaxed) - collective_before;
  stats_->step_collective_ns_sum.fetch_add(ns);
  int bucket = 0;
  while (bucket < ParallelStats::kNumBuckets && ns * 1e-9 > ParallelStats::kBuckets[bucket]) ++bucket;
  stats_->step_collective_buckets[bucket].fetch_add(1);
  return Failed(std::move(s));
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
        ParallelMode mode = ParallelMode::kTensor;
        if (absl::Status s = Decode(payload, batch, &mode); !s.ok()) return s;
        backend.SetParallelMode(mode);
        // Only rank 0 receives logits: the others compute their vocabulary
        // slice and send it (a collective), then have nothing to sample.
        if (absl::Status s = backend.Forward(batch, nullptr); !s.ok()) return s;
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
