// headroom_fleet_scale's clocks and /proc (bench/fleet_scale.cc reads top to bottom; this is one
// part).
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
#include "bench/fleet_scale/options.h"
#include "common/stats.h"
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

// ---- Clocks, /proc ----

using SteadyClock = std::chrono::steady_clock;
inline const SteadyClock::time_point kEpoch = SteadyClock::now();

inline double NowS() { return std::chrono::duration<double>(SteadyClock::now() - kEpoch).count(); }

// This thread's CPU time.
inline double ThreadCpuS() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline void SleepUntilS(double t_s) {
  const double wait_s = t_s - NowS();
  if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
}

// utime + stime of a process (seconds); nullopt when it is gone.
inline std::optional<double> ProcCpuS(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  // Fields from 3 (state) on: utime is 14, stime 15.
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// VmRSS and VmHWM of a process, MiB.
inline std::pair<double, double> ProcMemoryMiB(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  double rss_kib = 0, hwm_kib = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) rss_kib = std::stod(line.substr(6));
    if (line.starts_with("VmHWM:")) hwm_kib = std::stod(line.substr(6));
  }
  return {rss_kib / 1024.0, hwm_kib / 1024.0};
}

// The machine's busy and total CPU seconds (every core), from /proc/stat.
inline std::pair<double, double> MachineCpuS() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  double total = 0, idle = 0, v = 0;
  for (int i = 0; i < 8 && in >> v; ++i) {
    total += v;
    if (i == 3 || i == 4) idle += v;  // idle, iowait
  }
  const auto tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {(total - idle) / tick, total / tick};
}

// The nearest-rank q-quantile (common/stats.h); NaN when empty.
inline double NearestRank(std::vector<double> v, double q) {
  return v.empty() ? std::nan("") : QuantileNearestRank(v, q);
}

inline json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace headroom::bench
