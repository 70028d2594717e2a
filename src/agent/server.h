// The agent's HTTP/1.1 transport (Boost.Asio + Boost.Beast's parser): one event-loop thread
// serves every connection, so slow, idle or long-polling clients cost a socket each and never a
// worker. What it defends against (docs/AGENT.md, "Limits"):
// - slow clients: a request's header must arrive within `header_timeout_s` of its first byte and
//   its body within `body_timeout_s` of the header; an answer must be taken within
//   `write_timeout_s`; a connection that sends nothing for `idle_timeout_s` is closed;
// - many clients: at most `max_connections` open, `max_connections_per_address` from one
//   address; at a cap, the connection idle the longest (between requests, or answered and
//   closing) is closed to make room, and when none is idle the new one gets 503 and is closed;
// - big requests: headers over `max_header_bytes` get 431, bodies over `max_body_bytes` 413;
// - long-polls wait on timers, within the Api's own cap;
// - binding: no SO_REUSEPORT, so a second agent on a port in use fails to start.
// Stop() closes every connection at once: it returns within milliseconds whatever clients do.
// The routes are the Api's (api.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "agent/api.h"
#include "common/error.h"

namespace headroom::agent {

struct ServerLimits {
  int max_connections = 1024;
  int max_connections_per_address = 512;
  double idle_timeout_s = 10.0;
  double header_timeout_s = 5.0;
  double body_timeout_s = 5.0;
  double write_timeout_s = 5.0;
  size_t max_header_bytes = 8 * 1024;
  size_t max_body_bytes = kMaxBodyBytes;
};

class Server {
 public:
  // `shared` outlives the server.
  Server(Shared& shared, ApiConfig api, ServerLimits limits = {});
  ~Server();  // stops and joins

  // Binds host:port (port 0: any free port) and serves on a thread of its own. Fails with one
  // line when the address is in use or not this machine's.
  Status Start(const std::string& host, int port);
  int port() const { return port_; }
  // Closes the listener and every connection and joins the thread. Idempotent.
  void Stop();
  // A snapshot; thread-safe. (Also in /v1/status while serving.)
  ConnectionCounters counters() const;

  class Impl;

 private:
  Shared& shared_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace headroom::agent
