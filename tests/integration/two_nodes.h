// Two "nodes" on this machine, for tests of a worker whose ranks run on
// several hosts: network namespaces floe-n0-PID and floe-n1-PID joined by a
// veth pair, node 0 at 198.18.0.1/30 and node 1 at 198.18.0.2/30 (RFC
// 2544's benchmarking range: never a private or a public address), lo up in
// both. Traffic between the two addresses crosses the veth pair and nothing
// else, as between two pods on two machines.
//
// Needs CAP_NET_ADMIN (root), `ip` (iproute2) and `setpriv` (util-linux):
// Create() answers FAILED_PRECONDITION with the reason otherwise, for the
// test to skip. The namespaces are deleted, and every process still in them
// killed, when the TwoNodes goes and when the test process gets SIGTERM or
// SIGINT; what a SIGKILLed test left behind, the next Create() removes.
//
// Thread: the test's main thread (Create, EnterNodeZero, the destructor).
// One TwoNodes at a time per process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace floe::testing {

class TwoNodes {
 public:
  static constexpr const char* kAddress[2] = {"198.18.0.1", "198.18.0.2"};

  static absl::StatusOr<std::unique_ptr<TwoNodes>> Create();
  // Back to the namespace EnterNodeZero left, then the cleanup above.
  ~TwoNodes();
  TwoNodes(const TwoNodes&) = delete;
  TwoNodes& operator=(const TwoNodes&) = delete;

  const std::string& name(int node) const { return names_[node]; }

  // Moves the calling thread into node 0: the sockets it opens from then on,
  // and the threads and processes it starts, are node 0's. Call it before
  // the process starts gRPC (whose threads would stay where they began).
  absl::Status EnterNodeZero();

  // The argv prefix that runs a command on `node` under the command's own
  // pid, SIGKILLed if the thread that started it ends first.
  std::vector<std::string> On(int node) const;

  // Bytes `node`'s end of the veth pair has received and sent (its counters).
  absl::StatusOr<int64_t> VethBytes(int node) const;

 private:
  TwoNodes() = default;
  std::string names_[2];
  int left_namespace_fd_ = -1;  // where EnterNodeZero was called from
};

}  // namespace floe::testing
