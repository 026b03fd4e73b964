#include "tests/common/rpc/listening_ports.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace floe::testing {
namespace {

constexpr char kListen[] = "0A";  // TCP_LISTEN in /proc/net/tcp's "st" column

std::set<unsigned long> SocketInodes(pid_t pid) {
  std::set<unsigned long> inodes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    char target[128];
    const ssize_t n = readlink(entry.path().c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<size_t>(n));
    if (link.rfind("socket:[", 0) == 0) inodes.insert(std::stoul(link.substr(8)));
  }
  return inodes;
}

}  // namespace

std::vector<int> ListeningTcpPorts(pid_t pid) {
  const std::set<unsigned long> inodes = SocketInodes(pid);
  std::vector<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long inode = 0;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != kListen || !inodes.count(inode)) continue;
      ports.push_back(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

}  // namespace floe::testing
