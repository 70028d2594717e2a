// headroom_fleet_scale's coordinator, a child process (bench/fleet_scale.cc reads top to bottom;
// this is one part).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include "bench/fleet_scale/system.h"
#include "common/thread_annotations.h"
#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord/store.h"
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"
#include "tests/support/etcd_cluster.h"

namespace headroom::bench {

using coord::Acting;
using json = nlohmann::ordered_json;

// ---- The coordinator, a child process ----

class CoordinatorProcess {
 public:
  struct Line {
    double t_s;
    std::string text;
  };

  // Starts `headroom coordinator` with its stdout and stderr into a pipe this process reads
  // (each line stamped on the steady clock, all kept in `log_path`).
  static std::unique_ptr<CoordinatorProcess> Start(const std::vector<std::string>& args,
                                                   const std::string& log_path, std::string* why) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      *why = fmt::format("pipe: {}", std::strerror(errno));
      return nullptr;
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls from here to exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no coordinator outlives a crashed bench
      if (getppid() != parent) _exit(127);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGPIPE, &dfl, nullptr);  // as deployed, not as this process has it
      if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        for (int fd = 3; fd < 1024; ++fd) close(fd);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      *why = fmt::format("fork: {}", std::strerror(errno));
      return nullptr;
    }
    return std::unique_ptr<CoordinatorProcess>(new CoordinatorProcess(pid, fds[0], log_path));
  }

  ~CoordinatorProcess() { Stop(); }

  pid_t pid() const { return pid_; }
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  // The port of its "listening on http://127.0.0.1:PORT/" line; 0 until then.
  int port() const { return port_.load(); }
  // Lines that mention the site budget, and the last lines (for messages).
  std::vector<Line> budget_lines() const {
    MutexLock lock(mu_);
    return budget_lines_;
  }
  std::string tail() const {
    MutexLock lock(mu_);
    std::string out;
    for (const std::string& l : tail_) out += "  " + l + "\n";
    return out;
  }
  uint64_t lines() const { return lines_.load(); }

  // SIGTERM (it resigns and stops), SIGKILL after 5 s; waits for it and for its pipe's end.
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 500 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (waitpid(pid_, &status, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
      }
      pid_ = -1;
    }
    if (reader_.joinable()) reader_.join();
  }

 private:
  CoordinatorProcess(pid_t pid, int fd, const std::string& log_path) : pid_(pid), fd_(fd) {
    reader_ = std::thread([this, log_path] { Read(log_path); });
  }

  void Read(const std::string& log_path) {
    std::ofstream log(log_path);
    std::string buffer;
    char chunk[65536];
    for (;;) {
      const ssize_t n = read(fd_, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const double t_s = NowS();
      buffer.append(chunk, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n', start)) {
        Take(t_s, buffer.substr(start, nl - start), log);
        start = nl + 1;
      }
      buffer.erase(0, start);
    }
    close(fd_);
  }

  void Take(double t_s, std::string line, std::ofstream& log) {
    log << fmt::format("[{:.3f}] {}\n", t_s, line);
    lines_.fetch_add(1);
    constexpr std::string_view kListening = "listening on http://";
    if (const size_t at = line.find(kListening); at != std::string::npos) {
      const std::string address = line.substr(at + kListening.size());
      const size_t colon = address.rfind(':');
      if (colon != std::string::npos) port_.store(std::atoi(address.c_str() + colon + 1));
    }
    MutexLock lock(mu_);
    if (line.find("site budget") != std::string::npos) budget_lines_.push_back({t_s, line});
    tail_.push_back(std::move(line));
    if (tail_.size() > 20) tail_.erase(tail_.begin());
  }

  pid_t pid_;
  const int fd_;
  std::thread reader_;
  std::atomic<int> port_{0};
  std::atomic<uint64_t> lines_{0};
  mutable Mutex mu_;
  std::vector<Line> budget_lines_ GUARDED_BY(mu_);
  std::vector<std::string> tail_ GUARDED_BY(mu_);
};

}  // namespace headroom::bench
