// headroom_fleet_scale's pass-through proxy in front of etcd (bench/fleet_scale.cc reads top to
// bottom; this is one part).
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

// ---- Between the coordinator and etcd: a pass-through proxy that times its requests ----

// Forwards bytes both ways and notes, per request, its path, whether it reads a range of keys
// (a "range_end" in it: the leader's read of the site), when it was sent and when its answer's
// first and last bytes came. EtcdStore sends one request at a time on a connection and waits for
// the answer, so client bytes after answer bytes start the next request. Costs the coordinator
// one loopback hop per request.
class EtcdProxy {
 public:
  struct Request {
    double sent_s = 0;
    double first_byte_s = std::nan("");
    double last_byte_s = std::nan("");
    std::string path;
    bool range_of_keys = false;
    size_t answer_bytes = 0;
  };

  static std::unique_ptr<EtcdProxy> Start(int etcd_port, std::string* why) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      *why = fmt::format("proxy: {}", std::strerror(errno));
      if (fd >= 0) close(fd);
      return nullptr;
    }
    return std::unique_ptr<EtcdProxy>(new EtcdProxy(fd, ntohs(addr.sin_port), etcd_port));
  }
  ~EtcdProxy() {
    stop_.store(true);
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    close(listen_fd_);
  }

  int port() const { return port_; }
  std::vector<Request> requests() const {
    MutexLock lock(mu_);
    return requests_;
  }

 private:
  static constexpr int kPollMs = 100;

  EtcdProxy(int fd, int port, int etcd_port) : listen_fd_(fd), port_(port), etcd_port_(etcd_port) {
    acceptor_ = std::thread([this] { Accept(); });
  }

  void Accept() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, kPollMs) <= 0) continue;
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(etcd_port_));
      if (server < 0 || connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(client);
        if (server >= 0) close(server);
        continue;
      }
      const int yes = 1;
      setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }

  static bool WriteAll(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  void Pump(int client, int server) {
    std::vector<char> buffer(size_t{1} << 16);
    std::optional<size_t> current;  // the request being answered (index into requests_)
    bool answered = true;           // the next client bytes start a request
    while (!stop_.load()) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (poll(p, 2, kPollMs) <= 0) continue;
      if (p[0].revents != 0) {
        const ssize_t n = recv(client, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        const double t_s = NowS();
        const std::string_view data(buffer.data(), static_cast<size_t>(n));
        {
          MutexLock lock(mu_);
          if (answered) {
            Request r;
            r.sent_s = t_s;
            const size_t space = data.find(' ');
            const size_t end = data.find(' ', space + 1);
            if (space != std::string_view::npos && end != std::string_view::npos)
              r.path = std::string(data.substr(space + 1, end - space - 1));
            current = requests_.size();
            requests_.push_back(std::move(r));
            answered = false;
          }
          if (data.find("range_end") != std::string_view::npos)
            requests_[*current].range_of_keys = true;
        }
        if (!WriteAll(server, data.data(), data.size())) break;
      }
      if (p[1].revents != 0) {
        const ssize_t n = recv(server, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        const double t_s = NowS();
        if (current) {
          MutexLock lock(mu_);
          Request& r = requests_[*current];
          if (std::isnan(r.first_byte_s)) r.first_byte_s = t_s;
          r.last_byte_s = t_s;
          r.answer_bytes += static_cast<size_t>(n);
        }
        answered = true;
        if (!WriteAll(client, buffer.data(), static_cast<size_t>(n))) break;
      }
    }
    close(client);
    close(server);
  }

  const int listen_fd_;
  const int port_;
  const int etcd_port_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // the acceptor's
  mutable Mutex mu_;
  std::vector<Request> requests_ GUARDED_BY(mu_);
};

}  // namespace headroom::bench
