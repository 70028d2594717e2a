#include "agent/api_server.h"

namespace headroom::agent {

ApiServer::ApiServer(Shared& shared, ApiConfig api, net::ServerLimits limits)
    : shared_(shared), api_(shared, std::move(api)), server_(limits, "agent") {}

ApiServer::~ApiServer() { Stop(); }

Status ApiServer::Start(const std::string& host, int port) {
  if (auto st = server_.Start(host, port, api_); !st) return st;
  MutexLock lock(shared_.mu);
  shared_.wake = [this] { server_.Wake(); };
  shared_.connections = [this] { return server_.counters(); };
  return OkStatus();
}

void ApiServer::Stop() {
  {
    // Under the lock: NotifyDecision never calls a server that is going.
    MutexLock lock(shared_.mu);
    shared_.wake = nullptr;
    shared_.connections = nullptr;
  }
  server_.Stop();
}

}  // namespace headroom::agent
