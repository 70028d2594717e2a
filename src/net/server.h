// The HTTP/1.1 transport of both daemons, the agent and the coordinator (Boost.Asio +
// Boost.Beast's parser): one event-loop thread serves every connection, so slow, idle or
// long-polling clients cost a socket each and never a thread. What it defends against
// (docs/AGENT.md, "Limits"; docs/SITE.md, "The coordinator's API"):
// - slow clients: a request's header must arrive within `header_timeout_s` of its first byte and
//   its body within `body_timeout_s` of the header; an answer must be taken within
//   `write_timeout_s`; a connection that sends nothing for `idle_timeout_s` is closed;
// - many clients: at most `max_connections` open, `max_connections_per_address` from one
//   address; at a cap, the connection idle the longest (between requests, or answered and
//   closing) is closed to make room, and when none is idle the new one gets 503 and is closed;
// - big requests: headers over `max_header_bytes` get 431, bodies over `max_body_bytes` 413;
// - ambiguous framing: what beast_request.h's FramingError names (a repeated Content-Length or
//   Host, Transfer-Encoding with Content-Length, a control byte) gets 400, and the connection
//   is closed;
// - parked requests (long-polls) wait on timers, not threads; Wake() asks the handler again;
// - work that blocks (Response::offload: a store's I/O) runs on `worker_threads` threads, at
//   most `max_queued_work` waiting; beyond that 503 at once; long CPU work (Lane::kBulk) on
//   `bulk_threads` of its own at a lower priority. The loop never waits for either;
// - binding: no SO_REUSEPORT, so a second daemon on a port in use fails to start.
// Stop() closes every connection at once: it returns within milliseconds whatever clients do,
// once the offloaded work in progress (if any) has returned.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "common/error.h"
#include "net/http.h"

namespace headroom::net {

struct ServerLimits {
  int max_connections = 1024;
  int max_connections_per_address = 512;
  double idle_timeout_s = 10.0;
  double header_timeout_s = 5.0;
  double body_timeout_s = 5.0;
  double write_timeout_s = 5.0;
  size_t max_header_bytes = 8 * 1024;
  size_t max_body_bytes = kDefaultMaxBodyBytes;
  // 0: Response::offload runs on the loop itself (for handlers that never block).
  int worker_threads = 0;
  int max_queued_work = 16;
  // Response::offload on Lane::kBulk: its own threads (0: the store's workers), at most
  // `max_queued_bulk` waiting (503 beyond), each at nice `bulk_nice` above the daemon's so that
  // the loop and the store's workers win the CPU.
  int bulk_threads = 0;
  int max_queued_bulk = 16;
  int bulk_nice = 10;
};

class Server {
 public:
  // `daemon` names it in errors: "coordinator: cannot listen on ...".
  explicit Server(ServerLimits limits = {}, std::string daemon = "server");
  ~Server();  // stops and joins
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: any free port) and listens; nothing is accepted before Serve.
  // Fails with one line when the address is in use or not this machine's. Raises the
  // descriptor limit as far as max_connections needs, and lowers the cap to what it allows.
  // REQUIRES: not bound yet.
  Status Bind(const std::string& host, int port);
  // Serves on a thread of its own (and the workers). `handler` outlives Stop().
  // REQUIRES: Bind succeeded; called once.
  void Serve(Handler& handler);
  // Bind, then Serve.
  Status Start(const std::string& host, int port, Handler& handler);
  int port() const { return port_; }
  // Asks the handler again (Handler::Ready) about every parked request. Thread-safe; does not
  // block.
  void Wake();
  // Closes the listener and every connection, joins the loop and the workers. Idempotent.
  void Stop();
  // A snapshot; thread-safe.
  ConnectionCounters counters() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace headroom::net
