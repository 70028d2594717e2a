#include "common/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace headroom {

Result<std::vector<int>> FreeLoopbackPorts(int n) {
  std::vector<int> fds;
  std::vector<int> ports;
  std::string why;
  for (int k = 0; k < n && why.empty(); ++k) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      why = std::string("bind 127.0.0.1:0: ") + std::strerror(errno);
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (const int fd : fds) close(fd);
  if (!why.empty()) return Error::Io(why);
  return ports;
}

Result<int> FreeLoopbackPort() {
  auto ports = FreeLoopbackPorts(1);
  if (!ports) return std::move(ports).error();
  return ports->front();
}

}  // namespace headroom
