// What the tests that start a real server of their own share (etcd, Prometheus): a free loopback
// port, and a child process whose output goes to a log file and that dies with the test.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/free_port.h"

namespace headroom::test_support {

// Concatenation by appending: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
template <class... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

// A port the kernel hands out for port 0, free when this returns (0 when none):
// common/free_port.h, the one helper.
inline int FreeLoopbackPort() {
  auto port = headroom::FreeLoopbackPort();
  return port ? *port : 0;
}

// Starts `binary` with `args` (args[0] included), its stdout and stderr appended to `log_path`,
// killed (SIGKILL) when the test process dies, holding none of the test's descriptors (its
// connections and listening sockets stay the test's). The child's pid, or -1 and *why.
inline pid_t SpawnLogged(const char* binary, const std::vector<std::string>& args,
                         const std::string& log_path, std::string* why) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    *why = Cat("open ", log_path, ": ", std::strerror(errno));
    return -1;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // nothing outlives a crashed test
    if (getppid() != parent) _exit(127);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
      for (int fd = 3; fd < 1024; ++fd) close(fd);
    }
    execv(binary, argv.data());
    _exit(127);
  }
  close(log);
  if (pid < 0) {
    *why = Cat("fork: ", std::strerror(errno));
    return -1;
  }
  return pid;
}

}  // namespace headroom::test_support
