// A loopback port that takes connections and never says a word: a listening socket whose
// connections the kernel completes (its backlog) and nobody accepts or reads -- a black-holed
// endpoint, as a firewall that drops answers makes one. Closed when the object goes.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace headroom::test_support {

class SilentListener {
 public:
  // Room in the backlog for every connection a test makes.
  static constexpr int kBacklog = 64;

  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, kBacklog) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;

  // 0 when the socket could not be set up.
  int port() const { return port_; }

  // Whether a connection came (it waits in the backlog, not accepted) within `within`.
  bool WaitForConnection(std::chrono::milliseconds within) const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(within.count())) == 1 && (p.revents & POLLIN) != 0;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace headroom::test_support
