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
#include "common/status/status_macros.h"

namespace floe {
namespace {

// Gloo's messages say "Timed out" (collectives) or "Wait timeout" (the
// store) for deadlines; anything else from a peer is a broken connection.
// `lost`: the world rank of the peer the message names (-1: none).
absl::Status FromException(const char* what, int rank, const std::exception& e, int lost = -1) {
  const std::string message =
      absl::StrCat(what, " on rank ", rank, lost >= 0 ? absl::StrCat(" (lost rank ", lost, ")") : "", ": ", e.what());
  const std::string lower = absl::AsciiStrToLower(e.what());
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout"))
    return WithLostRank(absl::DeadlineExceededError(message), lost);
  return WithLostRank(absl::UnavailableError(message), lost);
}

// Room for "[IPv6]:PORT" and a terminating zero.
constexpr size_t kAddressBytes = 64;

// The "[IP]:PORT" addresses in a Gloo message (its "[file.cc:123]" source
// location is not one: no port follows it).
std::vector<absl::string_view> AddressesIn(absl::string_view text) {
  std::vector<absl::string_view> out;
  for (size_t close = text.find("]:"); close != absl::string_view::npos; close = text.find("]:", close + 1)) {
    const size_t open = text.rfind('[', close);
    size_t end = close + 2;
    while (end < text.size() && absl::ascii_isdigit(text[end])) ++end;
    if (open != absl::string_view::npos && end > close + 2) out.push_back(text.substr(open, end - open));
  }
  return out;
}

// "[IP]:PORT" -> "IP".
absl::string_view IpOf(absl::string_view address) {
  const size_t close = address.rfind(']');
  return address.size() > 1 && close != absl::string_view::npos ? address.substr(1, close - 1) : address;
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
    std::unique_ptr<GlooCommunicator> comm(
        new GlooCommunicator(std::move(context), options.rank, options.size, options.timeout, options.world_ranks));
    if (absl::Status s = comm->ExchangePeerAddresses(); !s.ok()) return s;
    return comm;
  } catch (const std::exception& e) {
    return FromException("rendezvous", options.rank, e);
  }
}

// Gloo names a broken pair only by an address of the peer (PeerIn), and
// each pair listens on a port of its own: every rank tells the others the
// address of its end of their pair (row r of the gather: rank r's pair
// addresses, by rank).
absl::Status GlooCommunicator::ExchangePeerAddresses() {
  peer_addresses_.assign(size_, "");
  if (size_ == 1) return absl::OkStatus();
  std::vector<char> mine(size_ * kAddressBytes, '\0'), all(size_ * mine.size(), '\0');
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) context_->getPair(r)->address().str().copy(&mine[r * kAddressBytes], kAddressBytes - 1);
  }
  FLOE_RETURN_IF_ERROR(Run("rendezvous", [&](uint32_t tag) {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(mine.data(), mine.size());
    opts.setOutput(all.data(), all.size());
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  }));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const char* address = &all[(r * size_ + rank_) * kAddressBytes];
    peer_addresses_[r].assign(address, strnlen(address, kAddressBytes));
  }
  return absl::OkStatus();
}

// Gloo names the peer of a broken pair by an address: the peer's listening
// one where this rank made the connection, else the peer's end of it (a
// port the peer's kernel chose). The first names the rank; the second only
// its IP, which names the rank where no other peer of this group has it.
int GlooCommunicator::PeerIn(const char* error) const {
  std::vector<absl::string_view> ips;
  for (const std::string& address : peer_addresses_) ips.push_back(IpOf(address));
  for (const absl::string_view address : AddressesIn(error)) {
    int exact = -1, same_ip = -1, with_ip = 0;
    for (int r = 0; r < static_cast<int>(peer_addresses_.size()); ++r) {
      if (peer_addresses_[r].empty()) continue;
      if (peer_addresses_[r] == address) exact = r;
      if (ips[r] == IpOf(address)) same_ip = r, ++with_ip;
    }
    const int peer = exact >= 0 ? exact : with_ip == 1 ? same_ip : -1;
    if (peer >= 0) return world_ranks_.empty() ? peer : world_ranks_[peer];
  }
  return -1;
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
    return FromException(what, rank_, e, PeerIn(e.what()));
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
    o.world_ranks.clear();
    for (int j = 0; j < sp; ++j) o.world_ranks.push_back(t * sp + j);
    auto sp_comm = GlooCommunicator::Connect(o);
    if (!sp_comm.ok()) return sp_comm.status();
    grid.sequence = std::move(sp_comm).value();
    o.group = absl::StrCat(options.group, "-tp", s);
    o.rank = t;
    o.size = tp;
    o.world_ranks.clear();
    for (int i = 0; i < tp; ++i) o.world_ranks.push_back(i * sp + s);
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
