#include "services/worker/parallel/gloo_communicator.h"

#include <csignal>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace floe {
namespace {

// Gloo's messages say "Timed out" (collectives) or "Wait timeout" (the
// store) for deadlines; anything else from a peer is a broken connection.
absl::Status FromException(const char* what, int rank, const std::exception& e) {
  const std::string message = absl::StrCat(what, " on rank ", rank, ": ", e.what());
  const std::string lower = absl::AsciiStrToLower(e.what());
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout"))
    return absl::DeadlineExceededError(message);
  return absl::UnavailableError(message);
}

// A RendezvousStore as Gloo's Store (whose errors are exceptions).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousStore& store, std::chrono::milliseconds wait) : store_(store), wait_(wait) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    const absl::Status s = store_.Set(key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw std::runtime_error(absl::StrCat("store set ", key, ": ", s.ToString()));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_.Get(key, wait_);
    if (!v.ok()) throw std::runtime_error(absl::StrCat("store get ", key, absl::IsDeadlineExceeded(v.status()) ? ": timeout: " : ": ", v.status().ToString()));
    return {v->begin(), v->end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, wait_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      auto v = store_.Get(key, timeout);
      if (!v.ok()) throw std::runtime_error(absl::StrCat("store wait ", key, ": timeout: ", v.status().ToString()));
    }
  }

 private:
  RendezvousStore& store_;
  std::chrono::milliseconds wait_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(const GlooOptions& options) {
  // Gloo's TCP pairs write with writev, without MSG_NOSIGNAL: a write to a
  // peer that just died raises SIGPIPE, whose default action kills this
  // process before the error reaches us (seen as a SIGPIPE death in
  // gloo_communicator_test under load). Ignored once, process-wide: every
  // other writer here (gRPC, our HTTP) handles EPIPE.
  static const bool sigpipe_ignored = [] { return std::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)sigpipe_ignored;
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside a world of ", options.size, " ranks"));
  if (options.store_dir.empty() == (options.store == nullptr))
    return absl::InvalidArgumentError("GlooOptions: give exactly one of store_dir and store");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    std::unique_ptr<gloo::rendezvous::Store> base;
    if (options.store) {
      base = std::make_unique<StoreAdapter>(*options.store, options.rendezvous_timeout);
    } else {
      base = std::make_unique<gloo::rendezvous::FileStore>(options.store_dir);
    }
    gloo::rendezvous::PrefixStore store(options.group, *base);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.rendezvous_timeout);
    context->connectFullMesh(store, device);
    context->setTimeout(options.timeout);
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(std::move(context), options.rank, options.size, options.timeout));
  } catch (const std::exception& e) {
    return FromException("rendezvous", options.rank, e);
  }
}

GlooCommunicator::~GlooCommunicator() = default;

template <class Fn>
absl::Status GlooCommunicator::Run(const char* what, const Fn& fn) {
  if (broken_) return absl::FailedPreconditionError(absl::StrCat(what, ": the communicator failed earlier"));
  try {
    fn(tag_++);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    broken_ = true;
    return FromException(what, rank_, e);
  }
}

absl::Status GlooCommunicator::AllReduceSum(std::span<float> data) {
  if (size_ == 1 || data.empty()) return absl::OkStatus();
  return Run("all-reduce", [&](uint32_t tag) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    opts.setReduceFunction(sum);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCommunicator::AllGather(std::span<const float> in, std::span<float> out) {
  if (out.size() != in.size() * static_cast<size_t>(size_))
    return absl::InvalidArgumentError(absl::StrCat("all-gather: out has ", out.size(), " floats, ", size_,
                                                   " ranks x ", in.size(), " expected"));
  if (size_ == 1) {
    std::memcpy(out.data(), in.data(), in.size_bytes());
    return absl::OkStatus();
  }
  return Run("all-gather", [&](uint32_t tag) {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<float*>(in.data()), in.size());
    opts.setOutput(out.data(), out.size());
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

absl::Status GlooCommunicator::AllToAll(std::span<const float> in, std::span<const int64_t> send_counts,
                                        std::span<float> out, std::span<const int64_t> recv_counts) {
  if (send_counts.size() != static_cast<size_t>(size_) || recv_counts.size() != static_cast<size_t>(size_))
    return absl::InvalidArgumentError(absl::StrCat("all-to-all: ", send_counts.size(), " send and ",
                                                   recv_counts.size(), " receive counts for ", size_, " ranks"));
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    if (send_counts[r] < 0 || recv_counts[r] < 0) return absl::InvalidArgumentError("all-to-all: negative count");
    sent += send_counts[r];
    received += recv_counts[r];
  }
  if (sent != static_cast<int64_t>(in.size()) || received != static_cast<int64_t>(out.size()))
    return absl::InvalidArgumentError(absl::StrCat("all-to-all: counts sum to ", sent, " / ", received,
                                                   " floats, buffers hold ", in.size(), " / ", out.size()));
  if (size_ == 1) {
    std::memcpy(out.data(), in.data(), in.size_bytes());
    return absl::OkStatus();
  }
  return Run("all-to-all", [&](uint32_t tag) {
    gloo::AlltoallvOptions opts(context_);
    // Gloo wants non-null buffers even where a rank's counts are all zero.
    static float empty = 0.0f;
    opts.setInput(in.empty() ? &empty : const_cast<float*>(in.data()),
                  std::vector<int64_t>(send_counts.begin(), send_counts.end()));
    opts.setOutput(out.empty() ? &empty : out.data(), std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::alltoallv(opts);
  });
}

absl::Status GlooCommunicator::Broadcast(std::span<std::byte> data, int root, std::chrono::milliseconds wait) {
  if (root < 0 || root >= size_)
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " outside ", size_, " ranks"));
  if (size_ == 1 || data.empty()) return absl::OkStatus();
  return Run("broadcast", [&](uint32_t tag) {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(reinterpret_cast<uint8_t*>(data.data()), data.size());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(wait.count() > 0 ? wait : timeout_);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Barrier() {
  if (size_ == 1) return absl::OkStatus();
  return Run("barrier", [&](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

absl::StatusOr<GlooGrid> ConnectGlooGrid(const GlooOptions& options, int sequence_parallel_size) {
  const int world = options.size, sp = sequence_parallel_size;
  if (sp < 1 || world % sp != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallel size ", sp, " does not divide the ", world, " ranks"));
  const int tp = world / sp, t = options.rank / sp, s = options.rank % sp;
  GlooGrid grid;
  auto world_comm = GlooCommunicator::Connect(options);
  if (!world_comm.ok()) return world_comm.status();
  grid.world = std::move(world_comm).value();
  if (sp > 1 && tp > 1) {
    GlooOptions o = options;
    o.group = absl::StrCat(options.group, "-sp", t);
    o.rank = s;
    o.size = sp;
    auto sp_comm = GlooCommunicator::Connect(o);
    if (!sp_comm.ok()) return sp_comm.status();
    grid.sequence = std::move(sp_comm).value();
    o.group = absl::StrCat(options.group, "-tp", s);
    o.rank = t;
    o.size = tp;
    auto tp_comm = GlooCommunicator::Connect(o);
    if (!tp_comm.ok()) return tp_comm.status();
    grid.tensor = std::move(tp_comm).value();
  }
  // Every rank has met every group it belongs to before any returns: rank 0
  // may close a rendezvous store it serves once it gets here, while groups
  // without it could still be reading their keys.
  if (absl::Status s = grid.world->Barrier(); !s.ok()) return s;
  return grid;
}

}  // namespace floe
