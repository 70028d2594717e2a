// headroom_fleet_scale's HTTP reads (the coordinator's API, etcd's metrics) (bench/fleet_scale.cc
// reads top to bottom; this is one part).
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

// ---- HTTP: the coordinator's API, etcd's metrics ----

inline std::unique_ptr<httplib::Client> Client(int port, double timeout_s) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  const auto s = static_cast<time_t>(timeout_s);
  c->set_connection_timeout(s, 0);
  c->set_read_timeout(s, 0);
  c->set_write_timeout(s, 0);
  return c;
}

inline std::optional<std::string> HttpGet(int port, const std::string& path,
                                          double timeout_s = 5.0) {
  auto r = Client(port, timeout_s)->Get(path);
  if (!r || r->status != 200) return std::nullopt;
  return r->body;
}

inline int PortOf(const std::string& url) { return std::atoi(url.c_str() + url.rfind(':') + 1); }

// Unlabelled samples by name, grpc_server_started_total summed by grpc_method ("grpc:Range"...:
// calls, a stream counting once) and grpc_server_msg_received_total by grpc_method
// ("grpc_msg:LeaseKeepAlive"...: a stream's every message).
inline std::map<std::string, double> ScrapeEtcd(int port) {
  std::map<std::string, double> out;
  const std::optional<std::string> text = HttpGet(port, "/metrics");
  if (!text) return out;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string name = line.substr(0, space);
    const double v = std::strtod(line.c_str() + space + 1, nullptr);
    if (name.find('{') == std::string::npos) {
      out[name] = v;
    } else if (name.starts_with("grpc_server_started_total{")) {
      constexpr std::string_view kMethod = "grpc_method=\"";
      const size_t at = name.find(kMethod);
      if (at == std::string::npos) continue;
      const size_t begin = at + kMethod.size();
      out["grpc:" + name.substr(begin, name.find('"', begin) - begin)] += v;
    } else if (name.starts_with("grpc_server_msg_received_total{")) {
      constexpr std::string_view kMethod = "grpc_method=\"";
      const size_t at = name.find(kMethod);
      if (at == std::string::npos) continue;
      const size_t begin = at + kMethod.size();
      out["grpc_msg:" + name.substr(begin, name.find('"', begin) - begin)] += v;
    }
  }
  return out;
}

}  // namespace headroom::bench
