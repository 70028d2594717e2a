#include "net/listen.h"

#include <fmt/format.h>

#include "net/query.h"

namespace headroom::net {

std::string ListenAddress::WithPort(int bound_port) const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, bound_port)
                                             : fmt::format("{}:{}", host, bound_port);
}

Result<ListenAddress> ParseListen(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Error::Usage(fmt::format("'{}': expected HOST:PORT", text));
  }
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return Error::Usage(fmt::format("'{}': expected [IPv6]:PORT", text));
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return Error::Usage(fmt::format("'{}': write an IPv6 address as [ADDR]:PORT", text));
  }
  const auto port = ParseQueryUint(text.substr(colon + 1));
  if (!port || *port > 65535) {
    return Error::Usage(fmt::format("'{}': the port must be 0-65535", text));
  }
  return ListenAddress{std::string(host), static_cast<int>(*port)};
}

}  // namespace headroom::net
