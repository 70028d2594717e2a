// A server on a free loopback port that accepts one connection and then trickles an HTTP status
// line a byte every 50 ms, for ever: each read of a client succeeds well within any read
// timeout, so only a deadline for the whole request ends it. Stops (and joins) when it goes.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace headroom::test_support {

class TricklingServer {
 public:
  TricklingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 4) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      const int conn = ::accept(fd_, nullptr, nullptr);
      if (conn < 0) return;
      const std::string head = "HTTP/1.1 200 OK\r\nX-Slow: ";
      std::unique_lock<std::mutex> lock(mu_);
      for (size_t i = 0; !stop_; ++i) {
        const char byte = i < head.size() ? head[i] : 'a';
        if (::send(conn, &byte, 1, MSG_NOSIGNAL) != 1) break;
        cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; });
      }
      ::close(conn);
    });
  }
  ~TricklingServer() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    ::shutdown(fd_, SHUT_RDWR);  // wakes an accept that never came
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace headroom::test_support
