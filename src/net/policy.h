// Who may ask what of a daemon's API, the same for the agent and the coordinator:
// - Host: absent (HTTP/1.0), an IP literal, a loopback name or one of `allowed_hosts` (any
//   case, with or without a port: 1 to 5 digits, at most 65535, and nothing after it);
//   anything else is 403 — a DNS name rebound to this machine would let a web page read the
//   API;
// - the bearer token, when one is set: `Authorization: Bearer T` (the scheme in any case, T
//   compared in constant time) on writes, and on reads but the static pages with
//   `token_on_reads`; else 401 with WWW-Authenticate;
// - writes carry `Content-Type: application/json` (parameters allowed), else 415: a web page
//   cannot send that cross-origin without a CORS preflight, which nothing here answers.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/http.h"

namespace headroom::net {

struct AccessPolicy {
  std::string token;            // empty: no token needed
  bool token_on_reads = false;  // the token is needed on reads too (not on the static pages)
  // Host header values accepted besides IP literals and loopback names: the names the daemon
  // is reached by.
  std::vector<std::string> allowed_hosts;
};

// Whether `host` (an address or name, no port; IPv6 with or without brackets) is on this
// machine's loopback: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackHost(std::string_view host);
// The Host header's value (nullopt: absent), by the rule above.
bool HostAllowed(const AccessPolicy& policy, std::optional<std::string_view> host);
// Whether the Authorization header carries the token (always, when there is none to carry).
bool Authorized(const AccessPolicy& policy, std::optional<std::string_view> authorization);
// Whether the media type (before any ';') is application/json, in any case.
bool IsJsonContentType(std::optional<std::string_view> content_type);

// The checks, as answers: nullopt when the request may go on. `daemon` names the daemon in
// the 403 ("agent", "coordinator").
std::optional<Response> RefuseHost(const AccessPolicy& policy, const Request& request,
                                   std::string_view daemon);
std::optional<Response> RefuseRead(const AccessPolicy& policy, const Request& request);
// A read that costs the daemon: the token whenever one is set.
std::optional<Response> RefuseCostlyRead(const AccessPolicy& policy, const Request& request);
std::optional<Response> RefuseWrite(const AccessPolicy& policy, const Request& request);

}  // namespace headroom::net
