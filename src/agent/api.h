// The agent's HTTP/JSON API behind the transport (docs/AGENT.md): routing, authentication,
// validation and the bodies, for one parsed request at a time. No sockets and no clock: the
// server (server.h) parses bytes into an ApiRequest, hands it here, and writes the ApiResponse;
// the fuzzer (tests/fuzz/http_fuzz.cc) does the same from raw bytes.
//
//   GET  /v1/actuation[?after=SEQ[&timeout_s=T]]  the current decision; with `after`, a long-poll:
//        answered once a newer one exists or T (default 10, at most 30) seconds pass; at most
//        ApiConfig::max_long_polls wait at once, more are answered at once
//   POST /v1/report   {"step", "phase", "tokens", "in_flight"[, "progress", "group_size"]}
//   POST /v1/budget   {"budget_per_gpu_w": W} or {"job_budget_w": W}: the budget from the next
//        decision on (docs/AGENT.md, "Budgets"); 404 when the agent takes no posted budget
//   GET  /v1/status   power, actuation, violations per window, counters
//   GET  /v1/history[?after=T]  the decisions after agent time T of the last 5 minutes
//   GET  /metrics     the same in Prometheus text format
//   GET  /            the live dashboard (agent/dashboard.h)
//
// Every request: a Host that is not this agent's (DNS rebinding) gets 403; an unknown path 404;
// a method the path does not take 405 with Allow; with a token, writes (and, with
// token_on_reads, reads but the static page) need `Authorization: Bearer T` (scheme in any case,
// compared in constant time) or get 401; POST bodies must be `Content-Type: application/json`
// (415 otherwise, so a web page cannot send one without a CORS preflight, which is refused) and
// valid UTF-8 JSON (400 naming the field); query parameters are strict (400 on unknown,
// repeated or malformed ones). Nothing a client sends is echoed unescaped.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "agent/budget.h"
#include "common/error.h"
#include "common/thread_annotations.h"

namespace headroom::agent {

inline constexpr size_t kMaxBodyBytes = 64 * 1024;
inline constexpr double kDefaultLongPollS = 10.0;
inline constexpr double kMaxLongPollS = 30.0;
inline constexpr int kDefaultMaxLongPolls = 256;

// The transport's connections, as /v1/status reports them.
struct ConnectionCounters {
  int open = 0;
  int idle = 0;  // between requests, or answered and closing: closed first at a cap
  uint64_t accepted = 0;
  uint64_t refused = 0;    // at a cap with nothing idle to close: 503
  uint64_t evicted = 0;    // idle connections closed to make room
  uint64_t timed_out = 0;  // a header, body, write or idle deadline passed
  uint64_t requests = 0;
};

// A site member's health, as /metrics reports it (with --fleet; docs/FLEET.md).
struct FleetHealth {
  bool fenced = false;       // the budget acted on is the floor: the lease not renewed in time
  uint64_t fences = 0;       // times the member began acting on its floor, fenced
  uint64_t leases_lost = 0;  // renewals the store answered "lease gone" (expired)
};

// What the runner and the server share. The runner ticks the agent under `mu` and then calls
// NotifyDecision(); every handler reads under `mu` (checked by clang's thread-safety analysis:
// the `thread-safety` preset).
struct Shared {
  Mutex mu;
  Agent* agent PT_GUARDED_BY(mu) = nullptr;   // set before serving; used under mu
  std::function<double()> now_s;              // the runner's clock; constant once serving
  int long_polls GUARDED_BY(mu) = 0;          // waiting now
  std::function<void()> wake GUARDED_BY(mu);  // set by a serving server: wakes its long-polls
  std::function<ConnectionCounters()> connections GUARDED_BY(mu);  // set by a serving server
  // A site member's health (null: not in a site). Set before serving, constant after;
  // thread-safe, called without `mu`.
  std::function<FleetHealth()> fleet;
  // Set before serving, constant after. POST /v1/budget sets `budget` (null: the route is 404);
  // a job budget is shared over `gpus`; a policy takes budgets in `budget_range_w` only.
  PostedBudget* budget = nullptr;
  int gpus = 0;
  std::optional<std::pair<double, double>> budget_range_w;

  // Called by whoever changed the agent's decision, after releasing `mu`. `wake` must not
  // block (the server's posts to its own thread).
  void NotifyDecision();
};

struct ApiConfig {
  std::string token;            // empty: no token needed
  bool token_on_reads = false;  // the token is needed on reads too (not on the static page)
  // Host header values accepted besides IP literals and `localhost` (with or without a port):
  // the names this agent is reached by. Anything else is refused (DNS rebinding).
  std::vector<std::string> allowed_hosts;
  int max_long_polls = kDefaultMaxLongPolls;
};

// One parsed request. Absent headers are nullopt; a repeated Host is the server's 400.
struct ApiRequest {
  std::string_view method;  // as sent: "GET", "POST", ...
  std::string_view target;  // origin form: "/v1/actuation?after=3"
  std::optional<std::string_view> host;
  std::optional<std::string_view> authorization;
  std::optional<std::string_view> content_type;
  std::string_view body;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // A long-poll to park: answer with Api::EndLongPoll() once the decision's seq exceeds
  // `wait_after` or `wait_s` seconds have passed. Handle() counted it in Shared::long_polls.
  std::optional<uint64_t> wait_after;
  double wait_s = 0.0;
};

class Api {
 public:
  // `shared` outlives the Api. Thread-safe: every call locks shared.mu where it reads the agent.
  Api(Shared& shared, ApiConfig config);

  ApiResponse Handle(const ApiRequest& request);
  // REQUIRES: a parked long-poll (Handle returned wait_after). Uncounts it; the answer.
  ApiResponse EndLongPoll();
  // Whether a parked long-poll for `after` may be answered now.
  bool Newer(uint64_t after);
  const ApiConfig& config() const { return config_; }

 private:
  ApiResponse ActuationNow();
  ApiResponse Report(const ApiRequest& request);
  ApiResponse PostBudget(const ApiRequest& request);
  // 401 or 415 for a write that may not go on; nullopt when it may.
  std::optional<ApiResponse> RefuseWrite(const ApiRequest& request) const;
  ApiResponse LongPollOrNow(std::string_view query);
  bool Authorized(const ApiRequest& request) const;
  bool HostAllowed(std::optional<std::string_view> host) const;

  Shared& shared_;
  const ApiConfig config_;
};

// The response to a request the server could not parse (status 400, 413, 431, 503...).
ApiResponse ErrorResponse(int status, std::string_view message);

// "host:port" -> parts; "[::1]:9400" for IPv6. Usage error naming the flag when malformed.
Result<std::pair<std::string, int>> ParseListen(const std::string& text);
// Whether `host` (an address or name, no port) is on this machine's loopback: 127.0.0.0/8,
// ::1, localhost.
bool IsLoopbackHost(std::string_view host);

// The bodies, exposed for tests and the runner's log.
std::string ActuationJson(const Actuation& a);
std::string StatusJson(const AgentStatus& s,
                       const std::optional<ConnectionCounters>& connections = std::nullopt);
std::string MetricsText(const AgentStatus& s,
                        const std::optional<FleetHealth>& fleet = std::nullopt);
std::string HistoryJson(const std::vector<HistoryPoint>& points, double budget_w);
// Parses a trainer report; the error names the field.
Result<TrainerReport> ParseReport(std::string_view body);
// Parses a budget: exactly one of budget_per_gpu_w and job_budget_w (shared over `gpus`), in
// [kMinBudgetPerGpuW, kMaxBudgetPerGpuW] per GPU and, when given, within `range_w` (a policy's
// trained budgets). Returns the budget per GPU; the error names the field.
Result<double> ParseBudget(std::string_view body, int gpus,
                           const std::optional<std::pair<double, double>>& range_w = std::nullopt);

// Strict query values: a decimal integer (digits only, no sign, fits in 64 bits), and a plain
// decimal number (optional sign, digits, optional fraction and exponent; no hex, NaN or inf).
std::optional<uint64_t> ParseQueryUint(std::string_view text);
std::optional<double> ParseQueryReal(std::string_view text);

}  // namespace headroom::agent
