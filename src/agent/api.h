// The agent's HTTP/JSON API behind the transport (docs/AGENT.md): its routes and bodies, for
// one parsed request at a time. No sockets and no clock: the shared transport (net/server.h)
// parses bytes into a net::Request, hands it here, and writes the net::Response; the fuzzer
// (tests/fuzz/http_fuzz.cc) does the same from raw bytes. api_server.h puts the two together.
//
//   GET  /v1/actuation[?after=SEQ[&timeout_s=T]]  the current decision; with `after`, a long-poll:
//        answered once a newer one exists or T (default 10, at most 30) seconds pass; at most
//        ApiConfig::max_long_polls wait at once, more are answered at once
//   GET  /v1/actuation?step=K  the decision for trainer step K: its group size and hold fixed at
//        the step's first read, the same for every rank that asks (Agent::ForStep)
//   POST /v1/report   {"step", "phase", "tokens", "in_flight"[, "progress", "group_size",
//        "engines", "admission"]}: a report or a heartbeat; it stands until the next
//   POST /v1/budget   {"budget_per_gpu_w": W} or {"job_budget_w": W}: the budget from the next
//        decision on (docs/AGENT.md, "Budgets"); 404 when the agent takes no posted budget
//   GET  /v1/status   power, actuation, violations per window, counters
//   GET  /v1/history[?after=T]  the decisions after agent time T of the last 5 minutes
//   GET  /metrics     the same in Prometheus text format
//   GET  /            the live dashboard (agent/dashboard.h)
//
// Every request goes through net::Router (net/router.h) and net::AccessPolicy (net/policy.h),
// the coordinator's too: a Host that is not this agent's (DNS rebinding) gets 403; an unknown
// path 404; a method the path does not take 405 with Allow; with a token, writes (and, with
// token_on_reads, reads but the static page) need `Authorization: Bearer T` or get 401; POST
// bodies must be `Content-Type: application/json` (415 otherwise) and valid UTF-8 JSON (400
// naming the field); query parameters are strict (net/query.h: 400 on unknown, repeated or
// malformed ones). Nothing a client sends is echoed unescaped.
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
#include "net/http.h"
#include "net/policy.h"
#include "net/router.h"

namespace headroom::agent {

inline constexpr size_t kMaxBodyBytes = net::kDefaultMaxBodyBytes;
inline constexpr double kDefaultLongPollS = 10.0;
inline constexpr double kMaxLongPollS = 30.0;
inline constexpr int kDefaultMaxLongPolls = 256;

// A site member's health, as /metrics reports it (with --site-etcd; docs/SITE.md).
struct SiteHealth {
  std::string site, job;        // --site, --job
  std::string state;            // what the job acts on: granted, fenced, standby or local
  double job_budget_w = 0.0;    // the budget acted on for the whole job (a grant, the floor...)
  uint64_t lease = 0;           // the member's etcd lease (0: not registered)
  int64_t term = 0;             // the highest coordinator term the member has seen
  bool fenced = false;          // the budget acted on is the floor: the lease not renewed in time
  uint64_t fences = 0;          // times the member began acting on its floor, fenced
  uint64_t leases_lost = 0;     // renewals the store answered "lease gone" (expired)
  uint64_t grants_watched = 0;  // newer grants the grant's watch brought (not a read)
};

// What the runner and the server share. The runner ticks the agent under `mu` and then calls
// NotifyDecision(); every handler reads under `mu` (checked by clang's thread-safety analysis:
// the `thread-safety` preset).
struct Shared {
  Mutex mu;
  Agent* agent PT_GUARDED_BY(mu) = nullptr;  // set before serving; used under mu
  std::function<double()> now_s;             // the runner's clock; constant once serving
  std::function<double()> unix_s;            // the wall clock (Unix s); may be null
  // POST /v1/report is compared with the decisions (false: the twin in process is the trainer
  // of record, a trainer's reports are shown only). Set before serving, constant after.
  bool reports_checked = true;
  int long_polls GUARDED_BY(mu) = 0;          // waiting now
  std::function<void()> wake GUARDED_BY(mu);  // set by a serving server: wakes its long-polls
  std::function<net::ConnectionCounters()> connections GUARDED_BY(mu);  // set by a serving server
  // A site member's health (null: not in a site). Set before serving, constant after;
  // thread-safe, called without `mu`.
  std::function<SiteHealth()> site_health;
  // Set before serving, constant after. POST /v1/budget sets `budget` (null: the route is 404);
  // a job budget is shared over `gpus`; a policy takes budgets in `budget_range_w` only.
  PostedBudget* budget = nullptr;
  // In a site (--site-etcd): POST /v1/budget answers 409, the site sets the budget.
  bool site = false;
  int gpus = 0;
  std::optional<std::pair<double, double>> budget_range_w;

  // Called by whoever changed the agent's decision, after releasing `mu`. `wake` must not
  // block (the server's posts to its own thread).
  void NotifyDecision();
};

struct ApiConfig {
  net::AccessPolicy access;  // token, token_on_reads, allowed_hosts (net/policy.h)
  int max_long_polls = kDefaultMaxLongPolls;
};

// The agent's routes as a net::Handler. A long-poll parks (net::Park with the seq it waits
// to pass): Ready(after) says whether a newer decision exists, EndPark answers with the
// decision in force and uncounts it.
class Api final : public net::Handler {
 public:
  // `shared` outlives the Api. Thread-safe: every call locks shared.mu where it reads the agent.
  Api(Shared& shared, ApiConfig config);

  net::Response Handle(const net::Request& request) override;
  // Whether a long-poll parked with `after` may be answered now.
  bool Ready(uint64_t after) override;
  // REQUIRES: a parked long-poll (Handle returned a park). Uncounts it; the answer.
  net::Response EndPark(uint64_t after) override;
  const ApiConfig& config() const { return config_; }

 private:
  net::Response ActuationNow();
  net::Response GetActuation(const net::Request& request, std::string_view query);
  net::Response Report(const net::Request& request, std::string_view query);
  net::Response PostBudget(const net::Request& request, std::string_view query);
  net::Response History(std::string_view query);
  net::Response StatusOrMetrics(bool status, std::string_view query);

  Shared& shared_;
  const ApiConfig config_;
  net::Router router_;
};

// The bodies, exposed for tests and the runner's log.
// `step`: the answer to GET /v1/actuation?step=K carries "step": K.
std::string ActuationJson(const Actuation& a, std::optional<int> step = std::nullopt);
std::string StatusJson(const AgentStatus& s,
                       const std::optional<net::ConnectionCounters>& connections = std::nullopt,
                       const std::optional<SiteHealth>& site = std::nullopt);
std::string MetricsText(const AgentStatus& s, const std::optional<SiteHealth>& site = std::nullopt);
std::string HistoryJson(const std::vector<HistoryPoint>& points, double budget_w);
// Parses a trainer report; the error names the field.
Result<TrainerReport> ParseReport(std::string_view body);
// Parses a budget: exactly one of budget_per_gpu_w and job_budget_w (shared over `gpus`), in
// [kMinBudgetPerGpuW, kMaxBudgetPerGpuW] per GPU and, when given, within `range_w` (a policy's
// trained budgets). Returns the budget per GPU; the error names the field.
Result<double> ParseBudget(std::string_view body, int gpus,
                           const std::optional<std::pair<double, double>>& range_w = std::nullopt);

}  // namespace headroom::agent
