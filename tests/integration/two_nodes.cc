#include "tests/integration/two_nodes.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace floe::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[2][9] = {"floe-n0-", "floe-n1-"};
constexpr char kVeth[2][6] = {"veth0", "veth1"};

// Runs `command` under sh; its output (stdout and stderr) in the error.
absl::Status Run(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return absl::InternalError(absl::StrCat("popen: ", std::strerror(errno)));
  std::string output;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int status = pclose(pipe);
  if (status == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("`", command, "` failed (status ", status, "): ", output));
}

// Where `program` is on PATH (and the sbin folders, where `ip` lives); "" if nowhere.
std::string FindProgram(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(absl::StrCat(path ? path : "", ":/usr/sbin:/sbin:/usr/bin:/bin"), ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Kills every process in the namespaces (never the shell running this: a
// signal handler execs it from a thread that may be in one) and deletes
// them. Ends with `exit "$1"`.
std::string CleanupScript(const std::vector<std::string>& names) {
  std::string script;
  for (const std::string& name : names) {
    absl::StrAppend(&script, "for p in $(ip netns pids ", name, " 2>/dev/null); do ",
                    "[ \"$p\" = \"$$\" ] || kill -9 \"$p\" 2>/dev/null; done; ip netns del ", name, " 2>/dev/null; ");
  }
  return script + "exit \"${1:-0}\"";
}

// What the SIGTERM / SIGINT handler execs: set before the first namespace
// exists, cleared when the TwoNodes goes.
char g_cleanup[1024];
struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGTERM, SIGINT};

// Async-signal-safe: unblock, exec the cleanup (it replaces this process,
// whose threads could hold any lock), exit as the signal would have.
void OnSignal(int signal) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_UNBLOCK, &all, nullptr);
  static char sh[] = "sh", dash_c[] = "-c", term[] = "143", interrupt[] = "130";
  char* argv[] = {sh, dash_c, g_cleanup, sh, signal == SIGINT ? interrupt : term, nullptr};
  if (g_cleanup[0] != '\0') execv("/bin/sh", argv);
  _exit(128 + signal);
}

// Namespaces of ours whose test process is gone (SIGKILLed: no cleanup ran).
void RemoveLeftovers() {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/run/netns", error)) {
    const std::string name = entry.path().filename().string();
    for (const char* prefix : kPrefix) {
      int pid = 0;
      absl::string_view rest = name;
      if (!absl::ConsumePrefix(&rest, prefix) || !absl::SimpleAtoi(rest, &pid) || pid <= 0) continue;
      if (kill(pid, 0) != 0 && errno == ESRCH) (void)Run(CleanupScript({name}));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TwoNodes>> TwoNodes::Create() {
  for (const char* program : {"ip", "setpriv"}) {
    if (FindProgram(program).empty())
      return absl::FailedPreconditionError(absl::StrCat("no `", program, "` on this machine (iproute2, util-linux)"));
  }
  RemoveLeftovers();
  std::unique_ptr<TwoNodes> nodes(new TwoNodes());
  for (int node = 0; node < 2; ++node) nodes->names_[node] = absl::StrCat(kPrefix[node], getpid());
  const std::string cleanup = CleanupScript({nodes->names_[0], nodes->names_[1]});
  if (cleanup.size() >= sizeof(g_cleanup)) return absl::InternalError("the cleanup script outgrew its buffer");
  std::memcpy(g_cleanup, cleanup.c_str(), cleanup.size() + 1);
  for (int i = 0; i < 2; ++i) {
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    sigaction(kSignals[i], &action, &g_previous[i]);
  }
  // From here on the destructor removes whatever exists.
  const std::string& n0 = nodes->names_[0];
  const std::string& n1 = nodes->names_[1];
  if (absl::Status made = Run("ip netns add " + n0); !made.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make a network namespace (needs root or CAP_NET_ADMIN): ", made.message()));
  }
  for (const std::string& command : {
           "ip netns add " + n1,
           absl::StrCat("ip -n ", n0, " link add ", kVeth[0], " type veth peer name ", kVeth[1], " netns ", n1),
           absl::StrCat("ip -n ", n0, " addr add ", kAddress[0], "/30 dev ", kVeth[0]),
           absl::StrCat("ip -n ", n1, " addr add ", kAddress[1], "/30 dev ", kVeth[1]),
           absl::StrCat("ip -n ", n0, " link set lo up"),
           absl::StrCat("ip -n ", n1, " link set lo up"),
           absl::StrCat("ip -n ", n0, " link set ", kVeth[0], " up"),
           absl::StrCat("ip -n ", n1, " link set ", kVeth[1], " up"),
       }) {
    if (absl::Status s = Run(command); !s.ok()) return s;
  }
  return nodes;
}

TwoNodes::~TwoNodes() {
  if (left_namespace_fd_ >= 0) {
    if (setns(left_namespace_fd_, CLONE_NEWNET) != 0)
      std::fprintf(stderr, "TwoNodes: cannot leave node 0: %s\n", std::strerror(errno));
    close(left_namespace_fd_);
  }
  if (absl::Status s = Run(CleanupScript({names_[0], names_[1]})); !s.ok())
    std::fprintf(stderr, "TwoNodes: cleanup: %s\n", std::string(s.message()).c_str());
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_cleanup[0] = '\0';
}

absl::Status TwoNodes::EnterNodeZero() {
  if (left_namespace_fd_ >= 0) return absl::OkStatus();
  const int here = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int there = open(("/run/netns/" + names_[0]).c_str(), O_RDONLY | O_CLOEXEC);
  if (here < 0 || there < 0 || setns(there, CLONE_NEWNET) != 0) {
    const absl::Status status =
        absl::InternalError(absl::StrCat("cannot enter ", names_[0], ": ", std::strerror(errno)));
    if (here >= 0) close(here);
    if (there >= 0) close(there);
    return status;
  }
  close(there);
  left_namespace_fd_ = here;
  return absl::OkStatus();
}

std::vector<std::string> TwoNodes::On(int node) const {
  return {FindProgram("setpriv"), "--pdeathsig", "KILL", FindProgram("ip"), "netns", "exec", names_[node]};
}

absl::StatusOr<int64_t> TwoNodes::VethBytes(int node) const {
  // /proc/thread-self/net is the reading thread's namespace: a thread of
  // its own moves there and reads it.
  std::string table;
  absl::Status status;
  std::thread reader([&] {
    const int fd = open(("/run/netns/" + names_[node]).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      status = absl::InternalError(absl::StrCat("cannot enter ", names_[node], ": ", std::strerror(errno)));
    } else {
      std::ifstream in("/proc/thread-self/net/dev");
      std::stringstream text;
      text << in.rdbuf();
      table = text.str();
    }
    if (fd >= 0) close(fd);
  });
  reader.join();
  if (!status.ok()) return status;
  // "  veth0: rx_bytes rx_packets errs drop fifo frame compressed multicast tx_bytes ..."
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, absl::StrCat(kVeth[node], ":"))) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t rx = 0, tx = 0;
    if (fields.size() >= 9 && absl::SimpleAtoi(fields[0], &rx) && absl::SimpleAtoi(fields[8], &tx)) return rx + tx;
  }
  return absl::InternalError(absl::StrCat("no ", kVeth[node], " counters in ", names_[node], ":\n", table));
}

}  // namespace floe::testing
