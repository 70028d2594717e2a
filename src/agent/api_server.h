// The agent's API (api.h) served on the shared transport (net/server.h), and the two wired to
// what the runner shares: while serving, Shared::NotifyDecision() wakes the parked long-polls
// and /v1/status reports the transport's connections. The transport's limits are
// docs/AGENT.md's "Limits"; the agent's handlers never block, so it runs no workers.
#pragma once

#include <string>

#include "agent/api.h"
#include "common/error.h"
#include "net/server.h"

namespace headroom::agent {

class ApiServer {
 public:
  // `shared` outlives the server.
  ApiServer(Shared& shared, ApiConfig api, net::ServerLimits limits = {});
  ~ApiServer();  // stops and joins

  // Binds host:port (port 0: any free port) and serves on a thread of its own. Fails with one
  // line when the address is in use or not this machine's.
  Status Start(const std::string& host, int port);
  int port() const { return server_.port(); }
  // Unhooks the runner, closes every connection and joins. Idempotent.
  void Stop();
  net::ConnectionCounters counters() const { return server_.counters(); }

 private:
  Shared& shared_;
  Api api_;
  net::Server server_;
};

}  // namespace headroom::agent
