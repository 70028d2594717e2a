// The agent's HTTP/JSON API (docs/AGENT.md), on cpp-httplib:
//   GET  /v1/actuation[?after=SEQ&timeout_s=T]  the current decision; with `after`, long-polls
//        until a newer one exists or T (default 10, at most 30) seconds pass (at most
//        kMaxLongPolls wait at once; more answer at once)
//   POST /v1/report   {"step", "phase", "tokens", "in_flight"[, "progress", "group_size"]} from
//        the trainer
//   GET  /v1/status   power, actuation, violations per window, counters
//   GET  /v1/history[?after=T]  the decisions after agent time T of the last 5 minutes
//   GET  /metrics     the same in Prometheus text format
//   GET  /            the live dashboard (agent/dashboard.h)
// Binds to 127.0.0.1 unless told otherwise; with a token, POST needs `Authorization: Bearer T`;
// bodies are capped at 64 KiB (413); malformed or invalid JSON gets 400 with the reason. No
// endpoint runs commands or touches files.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "common/error.h"

namespace httplib {
class Server;
}

namespace headroom::agent {

inline constexpr size_t kMaxBodyBytes = 64 * 1024;
inline constexpr size_t kServerThreads = 64;  // connections served at once
// Long-polls waiting at once; beyond this a long-poll answers at once (as with timeout_s=0), so
// that waiting clients can never hold every worker and starve the other endpoints.
inline constexpr int kMaxLongPolls = 48;

// What the runner and the server share. The runner ticks the agent under `mu` and then notifies
// `cv`; every handler reads under `mu`.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  Agent* agent = nullptr;
  std::function<double()> now_s;  // the runner's clock
  bool stopping = false;
  int long_polls = 0;  // waiting now (under mu)
};

class Server {
 public:
  Server(Shared& shared, std::string token);
  ~Server();  // stops and joins

  // Binds host:port (port 0: any free port) and serves on a thread.
  Status Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

 private:
  Shared& shared_;
  std::string token_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

// "host:port" -> parts. Usage error naming the flag when malformed.
Result<std::pair<std::string, int>> ParseListen(const std::string& text);

// The bodies, exposed for tests and the runner's log.
std::string ActuationJson(const Actuation& a);
std::string StatusJson(const AgentStatus& s);
std::string MetricsText(const AgentStatus& s, double budget_w);
std::string HistoryJson(const std::vector<HistoryPoint>& points, double budget_w);
// Parses a trainer report; the error names the field.
Result<TrainerReport> ParseReport(const std::string& body);

}  // namespace headroom::agent
