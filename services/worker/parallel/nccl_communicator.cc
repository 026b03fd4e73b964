#include "services/worker/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace floe {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // one float, for Barrier
};

namespace {

absl::Status FromNccl(const char* what, ncclResult_t r) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

absl::Status FromCuda(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : state_(std::move(state)), rank_(rank), size_(size), timeout_(timeout) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Connect(const NcclOptions& options) {
  if (!options.bootstrap) return absl::InvalidArgumentError("NcclOptions.bootstrap is null");
  const int rank = options.bootstrap->rank(), size = options.bootstrap->size();
  if (absl::Status s = FromCuda("cudaSetDevice", cudaSetDevice(options.device)); !s.ok()) return s;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    if (absl::Status s = FromNccl("ncclGetUniqueId", ncclGetUniqueId(&id)); !s.ok()) return s;
  }
  if (absl::Status s = options.bootstrap->Broadcast({reinterpret_cast<std::byte*>(&id), sizeof(id)}, 0); !s.ok())
    return s;
  auto state = std::make_unique<State>();
  if (absl::Status s = FromNccl("ncclCommInitRank", ncclCommInitRank(&state->comm, size, id, rank)); !s.ok())
    return s;
  if (absl::Status s = FromCuda("cudaStreamCreate", cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
      !s.ok())
    return s;
  if (absl::Status s = FromCuda("cudaMalloc", cudaMalloc(&state->scratch, sizeof(float))); !s.ok()) return s;
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(state), rank, size, options.timeout));
}

NcclCommunicator::~NcclCommunicator() {
  if (state_->scratch) cudaFree(state_->scratch);
  if (state_->stream) cudaStreamDestroy(state_->stream);
  if (state_->comm) broken_ ? ncclCommAbort(state_->comm) : ncclCommDestroy(state_->comm);
}

absl::Status NcclCommunicator::Wait(const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(state_->stream);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      broken_ = true;
      return FromCuda(what, e);
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      broken_ = true;
      return FromNccl(what, async);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      broken_ = true;
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      return absl::DeadlineExceededError(absl::StrCat(what, " on rank ", rank_, ": not done within ",
                                                      timeout_.count(), " ms (a rank died or hangs)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

#define FLOE_NCCL_CALL(what, call)                                                             \
  do {                                                                                         \
    if (broken_) return absl::FailedPreconditionError(absl::StrCat(what, ": the communicator failed earlier")); \
    if (absl::Status s_ = FromNccl(what, (call)); !s_.ok()) {                                  \
      broken_ = true;                                                                          \
      return s_;                                                                               \
    }                                                                                          \
    return Wait(what);                                                                         \
  } while (0)

absl::Status NcclCommunicator::AllReduceSum(std::span<float> data) {
  if (size_ == 1 || data.empty()) return absl::OkStatus();
  FLOE_NCCL_CALL("all-reduce", ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum,
                                             state_->comm, state_->stream));
}

absl::Status NcclCommunicator::AllGather(std::span<const float> in, std::span<float> out) {
  if (out.size() != in.size() * static_cast<size_t>(size_))
    return absl::InvalidArgumentError(absl::StrCat("all-gather: out has ", out.size(), " floats, ", size_,
                                                   " ranks x ", in.size(), " expected"));
  FLOE_NCCL_CALL("all-gather",
                 ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, state_->comm, state_->stream));
}

absl::Status NcclCommunicator::AllToAll(std::span<const float> in, std::span<const int64_t> send_counts,
                                        std::span<float> out, std::span<const int64_t> recv_counts) {
  if (send_counts.size() != static_cast<size_t>(size_) || recv_counts.size() != static_cast<size_t>(size_))
    return absl::InvalidArgumentError("all-to-all: one send and one receive count per rank");
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    sent += send_counts[r];
    received += recv_counts[r];
  }
  if (sent != static_cast<int64_t>(in.size()) || received != static_cast<int64_t>(out.size()))
    return absl::InvalidArgumentError("all-to-all: the counts do not add up to the buffers");
  auto exchange = [&]() -> ncclResult_t {
    ncclResult_t r = ncclGroupStart();
    int64_t s_off = 0, r_off = 0;
    for (int peer = 0; peer < size_ && r == ncclSuccess; ++peer) {
      if (send_counts[peer] > 0)
        r = ncclSend(in.data() + s_off, send_counts[peer], ncclFloat, peer, state_->comm, state_->stream);
      if (r == ncclSuccess && recv_counts[peer] > 0)
        r = ncclRecv(out.data() + r_off, recv_counts[peer], ncclFloat, peer, state_->comm, state_->stream);
      s_off += send_counts[peer];
      r_off += recv_counts[peer];
    }
    const ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  };
  FLOE_NCCL_CALL("all-to-all", exchange());
}

absl::Status NcclCommunicator::Broadcast(std::span<std::byte> data, int root, std::chrono::milliseconds wait) {
  (void)wait;  // ranks idle on the host (a Gloo broadcast); device broadcasts keep the deadline
  if (root < 0 || root >= size_)
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " outside ", size_, " ranks"));
  FLOE_NCCL_CALL("broadcast", ncclBroadcast(data.data(), data.data(), data.size(), ncclUint8, root, state_->comm,
                                            state_->stream));
}

absl::Status NcclCommunicator::Barrier() {
  FLOE_NCCL_CALL("barrier",
                 ncclAllReduce(state_->scratch, state_->scratch, 1, ncclFloat, ncclSum, state_->comm, state_->stream));
}

}  // namespace floe
