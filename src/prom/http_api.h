// The one file that talks to a Prometheus server: its HTTP API over cpp-httplib.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "prom/api.h"

namespace headroom::prom {

// "prometheus://HOST:PORT[/PATH-PREFIX]": the server (plain HTTP; PATH-PREFIX for a server behind
// a route prefix, e.g. /prometheus). HOST is a name or an IPv4 address.
struct Endpoint {
  std::string host;
  int port = 0;
  std::string path_prefix;  // "" or "/..." without a trailing slash
};
inline constexpr std::string_view kScheme = "prometheus://";
bool IsPrometheusUrl(std::string_view text);
Result<Endpoint> ParseEndpoint(std::string_view url);

struct HttpOptions {
  double timeout_s = 60.0;             // each query whole: connect to its last byte
  size_t max_body_bytes = 512u << 20;  // an answer larger than this is refused
  std::string bearer_token;            // sent as Authorization: Bearer when set
};

std::unique_ptr<PrometheusApi> MakeHttpApi(const Endpoint& endpoint, const HttpOptions& options);

}  // namespace headroom::prom
