#include "net/policy.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>

namespace headroom::net {

namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Constant time in the contents (not in the length, which is not secret enough to matter).
bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

Response Unauthorized() {
  Response r = ErrorResponse(401, "a bearer token is required (Authorization: Bearer T)");
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// A Host header's port: 1 to 5 digits, at most 65535.
bool IsPort(std::string_view text) {
  if (text.empty() || text.size() > 5) return false;
  int port = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + (c - '0');
  }
  return port <= 65535;
}

}  // namespace

bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (EqualsIgnoreCase(host, "localhost") || host == "::1") return true;
  // 127.x.y.z, each part decimal 0-255.
  int parts = 0;
  size_t start = 0;
  while (start <= host.size()) {
    const size_t dot = std::min(host.find('.', start), host.size());
    const std::string_view part = host.substr(start, dot - start);
    if (part.empty() || part.size() > 3) return false;
    int v = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    if (v > 255 || (parts == 0 && v != 127)) return false;
    ++parts;
    start = dot + 1;
  }
  return parts == 4;
}

bool HostAllowed(const AccessPolicy& policy, std::optional<std::string_view> host) {
  if (!host) return true;  // HTTP/1.0 without Host: not a browser
  std::string_view h = Trim(*host);
  // Strip the port: "name:10470", "[::1]:10470", "1.2.3.4:10470". After the host: nothing, or
  // ":" and a port (before: "localhost:x:y" passed as localhost).
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view after = h.substr(close + 1);
    if (!after.empty() && (after.front() != ':' || !IsPort(after.substr(1)))) return false;
    h = h.substr(0, close + 1);
  } else if (const size_t colon = h.find(':'); colon != std::string_view::npos) {
    if (!IsPort(h.substr(colon + 1))) return false;
    h = h.substr(0, colon);
  }
  if (h.empty()) return false;
  if (h.front() == '[') {
    // An IPv6 literal, which a DNS name cannot rebind to: only a well-formed one.
    if (h.size() < 3 || h.back() != ']') return false;
    const std::string inside(h.substr(1, h.size() - 2));
    in6_addr address{};
    return inet_pton(AF_INET6, inside.c_str(), &address) == 1;
  }
  if (IsLoopbackHost(h)) return true;
  // An IPv4 literal: a DNS name cannot rebind to it.
  bool ipv4 = true;
  for (char c : h) ipv4 = ipv4 && ((c >= '0' && c <= '9') || c == '.');
  if (ipv4) return true;
  for (const std::string& allowed : policy.allowed_hosts) {
    if (EqualsIgnoreCase(h, allowed)) return true;
  }
  return false;
}

bool Authorized(const AccessPolicy& policy, std::optional<std::string_view> authorization) {
  if (policy.token.empty()) return true;
  if (!authorization) return false;
  const std::string_view value = Trim(*authorization);
  const size_t space = value.find(' ');
  if (space == std::string_view::npos) return false;
  if (!EqualsIgnoreCase(value.substr(0, space), "bearer")) return false;
  return SameSecret(Trim(value.substr(space + 1)), policy.token);
}

bool IsJsonContentType(std::optional<std::string_view> content_type) {
  if (!content_type) return false;
  return EqualsIgnoreCase(Trim(content_type->substr(0, content_type->find(';'))),
                          "application/json");
}

std::optional<Response> RefuseHost(const AccessPolicy& policy, const Request& request,
                                   std::string_view daemon) {
  if (HostAllowed(policy, request.host)) return std::nullopt;
  return ErrorResponse(403, fmt::format("Host: not a name of this {} (DNS rebinding?); start it "
                                        "with --allow-host NAME to accept it",
                                        daemon));
}

std::optional<Response> RefuseRead(const AccessPolicy& policy, const Request& request) {
  if (!policy.token_on_reads || Authorized(policy, request.authorization)) return std::nullopt;
  return Unauthorized();
}

std::optional<Response> RefuseCostlyRead(const AccessPolicy& policy, const Request& request) {
  if (Authorized(policy, request.authorization)) return std::nullopt;
  return Unauthorized();
}

std::optional<Response> RefuseWrite(const AccessPolicy& policy, const Request& request) {
  if (!Authorized(policy, request.authorization)) return Unauthorized();
  if (!IsJsonContentType(request.content_type)) {
    return ErrorResponse(415, "Content-Type: expected application/json");
  }
  return std::nullopt;
}

}  // namespace headroom::net
