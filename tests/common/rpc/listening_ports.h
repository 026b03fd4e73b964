// Test helper: the TCP ports a process listens on, from the kernel's own
// tables (its socket inodes in /proc/PID/fd, their LISTEN rows in
// /proc/net/tcp and /proc/net/tcp6), so a test sees every listener a
// process opened, printed or not.
#pragma once

#include <sys/types.h>

#include <vector>

namespace floe::testing {

// Sorted and distinct: a port bound on several addresses ("localhost" as
// 127.0.0.1 and ::1) is one port.
std::vector<int> ListeningTcpPorts(pid_t pid);

}  // namespace floe::testing
