// Where a daemon listens: "host:port" or "[ipv6]:port", port 0-65535 (0: any free port).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace headroom::net {

inline constexpr std::string_view kDefaultListenHost = "127.0.0.1";

struct ListenAddress {
  std::string host;  // an address or a name, without brackets
  int port = 0;
  // host:port as others reach it, with the port bound: "[::1]:10471" for IPv6.
  std::string WithPort(int bound_port) const;
};

// A usage error quoting `text` when malformed (the caller names its flag).
Result<ListenAddress> ParseListen(std::string_view text);

}  // namespace headroom::net
