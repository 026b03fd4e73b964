// How many connections a listener admits: a total cap, which a caller can
// size from the process's descriptor limit (ConnectionCapForFdLimit), and a
// cap per client address, so that one client holding connections cannot
// starve the others (issue 41: 256 idle connections from one client kept
// /metrics from every scraper).
//
// Thread-safe: admissions happen on the accept path, releases wherever a
// connection is destroyed.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace floe::http {

// The most connections a listener may hold under a descriptor soft limit
// (RLIMIT_NOFILE's rlim_cur; negative: unlimited) while `reserve`
// descriptors stay free for the process's own work (files, backends, other
// listeners): soft_limit - reserve, at least 1, at most INT_MAX.
int ConnectionCapForFdLimit(long soft_limit, int reserve);

class ConnectionLimits {
 public:
  // `max_per_client` <= 0: no per-client cap.
  ConnectionLimits(int max_total, int max_per_client) : max_total_(max_total), max_per_client_(max_per_client) {}

  // Counts a new connection from `client` (its address, as text) and returns
  // true, or returns false (nothing counted) when either cap is reached.
  bool TryAdmit(const std::string& client);
  // Uncounts one admitted connection from `client`.
  void Release(const std::string& client);

  int total() const;
  int from(const std::string& client) const;
  int max_total() const { return max_total_; }
  int max_per_client() const { return max_per_client_; }

 private:
  const int max_total_;
  const int max_per_client_;
  mutable std::mutex mu_;
  int total_ = 0;                        // guarded by mu_
  std::map<std::string, int> by_client_;  // guarded by mu_; only clients with connections
};

}  // namespace floe::http
