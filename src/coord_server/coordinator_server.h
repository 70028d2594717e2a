// `headroom coordinator`'s HTTP API beside one replica (docs/SITE.md):
//   GET  /                the site page (self-contained: polls /v1/status, draws with <canvas>)
//   GET  /v1/status       the replica's role and, while it leads, the ledger and the members;
//                         the transport's connections
//   GET  /v1/history[?after=UNIX_S][&limit=N]  the last hour, one point per period, oldest
//                         first, in pages (site_history.h); the token whenever one is set
//   GET  /metrics         Prometheus text format 0.0.4
//   POST /v1/site-budget  {"site_budget_w": W} and/or {"reserve_w": W}: a new target, leader only,
//                         answered 202 once written to the store (the ledger is the
//                         one place the budget lives); bearer token when one is configured;
//                         409 at a domain (its budget is its grant from its parent)
// The routes go through net::Router and net::AccessPolicy, the agent's too: a Host that is not
// this replica's is 403, an unknown path 404, a known path with another method 405 with Allow,
// a POST without the token 401, without a JSON body 415; /v1/status and /metrics take no query
// parameter (400).
//
// A Coordinator is not thread-safe: CoordinatorHost owns it and the mutex that guards it. The
// CLI's loop calls Step(); the API reads the snapshot published after each Step (so a read never
// waits on the store's I/O) on the transport's event loop, and hands a budget request, which
// waits for a Step in progress and then for the store, to the transport's worker
// (net::Response::offload): a slow store delays that request only, never another client. A
// history answer is built on a thread of its own at a lower CPU priority (the transport's bulk
// lane), so 32 readers pulling the hour delay neither /v1/status nor a budget request.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "coord/coordinator.h"
#include "coord_server/site_history.h"
#include "net/http.h"
#include "net/policy.h"
#include "net/router.h"
#include "net/server.h"

namespace headroom::coord_server {

// A site budget request's outcome, decided under the coordinator's mutex.
struct SiteBudgetAnswer {
  // kAccepted: written to the store; kUnavailable: the store did not take it (503).
  enum class Outcome { kAccepted, kNotLeader, kRefused, kUnavailable };
  Outcome outcome = Outcome::kRefused;
  std::string message;           // kRefused: why (names the field); kNotLeader: who leads
  coord::TargetWritten written;  // kAccepted: the target and the store's revision
};

// Thread-safe. `store` outlives the host.
class CoordinatorHost {
 public:
  // `feed`: as coord::Coordinator's (outlives the host; null: polled).
  CoordinatorHost(coord::Store& store, coord::CoordinatorConfig config,
                  std::function<double()> now_s, Logger log, coord::SiteFeed* feed = nullptr);

  // One period of the coordinator, then publishes its status.
  void Step() EXCLUDES(mu_, snapshot_mu_);
  // The status as the last Step (or Resign) left it.
  coord::CoordinatorStatus Snapshot() const EXCLUDES(snapshot_mu_);
  // Accepted only while leading, and when the coordinator takes it (applied at the next Step,
  // where the leader checks it again against the ledger it reads). Waits for a Step in progress
  // (its store I/O).
  SiteBudgetAnswer RequestTarget(std::optional<double> site_budget_w,
                                 std::optional<double> reserve_w) EXCLUDES(mu_);
  // Gives up the lease (another replica leads at once), then publishes the status.
  void Resign() EXCLUDES(mu_, snapshot_mu_);
  // A domain's place under its parent (coord/domain.h), published with every snapshot from
  // now on (CoordinatorStatus::parent).
  void SetParent(const coord::ParentStatus& parent) EXCLUDES(snapshot_mu_);
  // Told after each target RequestTarget accepts (outside its locks): the daemon's loop runs
  // its next Step at once instead of at its next period, so a site budget change is planned
  // and granted within the request's round trip. Set before serving.
  void SetOnTarget(std::function<void()> on_target) { on_target_ = std::move(on_target); }

  // Keeps the last `keep_s` of points, one per Step, stamped by `unix_s` (the wall clock):
  // GET /v1/history. Set before serving; without it the history stays empty.
  void KeepHistory(std::function<double()> unix_s, double keep_s = 3600.0)
      EXCLUDES(snapshot_mu_, history_mu_);
  // The answer to GET /v1/history (site_history.h): built from shared points outside every
  // lock but for the moment it takes to copy their references, so a large answer never waits
  // on a Step, nor a Step on it.
  std::string HistoryPage(const SiteHistoryQuery& query) const EXCLUDES(history_mu_);

  // Constant after construction.
  const coord::CoordinatorConfig& config() const { return config_; }

 private:
  const coord::CoordinatorConfig config_;
  std::function<void()> on_target_;  // set before serving
  // RequestTarget's answer, with mu_ held.
  SiteBudgetAnswer RequestTargetLocked(std::optional<double> site_budget_w,
                                       std::optional<double> reserve_w) REQUIRES(mu_);

  // Lock order: mu_, then snapshot_mu_.
  mutable Mutex mu_;
  coord::Coordinator coordinator_ GUARDED_BY(mu_);
  mutable Mutex snapshot_mu_;
  coord::CoordinatorStatus snapshot_ GUARDED_BY(snapshot_mu_);
  std::optional<coord::ParentStatus> parent_ GUARDED_BY(snapshot_mu_);
  std::function<double()> unix_s_ GUARDED_BY(snapshot_mu_);
  // Lock order: snapshot_mu_, then history_mu_.
  mutable Mutex history_mu_;
  std::optional<SiteHistory> history_ GUARDED_BY(history_mu_);
};

// The transport's limits for a replica: net's defaults, small bodies (413 beyond), and one
// worker for budget requests (they serialise on the coordinator's mutex anyway), with a few
// waiting at most (503 beyond).
inline constexpr size_t kMaxSiteBudgetBodyBytes = 4096;
inline constexpr int kMaxQueuedBudgetRequests = 16;
net::ServerLimits CoordinatorLimits();

struct CoordinatorApiConfig {
  // The token (required on POST when not empty) and the names this replica is reached by,
  // accepted in Host besides IP literals and loopback names (net/policy.h).
  net::AccessPolicy access;
  net::ServerLimits limits = CoordinatorLimits();
};

// The leader as the leader key says it ({"id":..,"listen":..}), or as a replica names itself.
struct LeaderInfo {
  std::string id;
  std::string listen;  // where its API is; empty when unknown
};
LeaderInfo ParseLeader(const coord::CoordinatorStatus& s, const coord::CoordinatorConfig& self);

// The bodies, exposed for tests. Ledger and member fields are reported only while leading (a
// replica that does not lead has no current ledger): null in the JSON, absent from the metrics.
std::string CoordinatorStatusJson(
    const coord::CoordinatorStatus& s, const coord::CoordinatorConfig& config,
    const std::optional<net::ConnectionCounters>& connections = std::nullopt);
std::string CoordinatorMetricsText(const coord::CoordinatorStatus& s);
// {"site_budget_w": W} and/or {"reserve_w": W}: the budget in (0, 1e9] W, the reserve in
// [0, 1e9] W, at least one of them; the error names the field.
struct TargetBody {
  std::optional<double> site_budget_w;
  std::optional<double> reserve_w;
};
Result<TargetBody> ParseSiteBudgetBody(std::string_view body);

inline constexpr double kMaxSiteBudgetW = 1e9;
// GET /v1/history: at most this many points an answer (?limit=, default the most), and past
// its first point at most this many bytes; at most kMaxQueuedHistory answers waiting for the
// one thread that builds them (503 beyond), and at most kMaxHistoryBytesInFlight bytes of
// answers built and not yet taken by their readers (503 beyond): a reader costs the replica
// bounded memory and never the event loop's time.
inline constexpr size_t kMaxHistoryLimit = 3600;
inline constexpr size_t kMaxHistoryBytes = size_t{1} << 20;
inline constexpr int kMaxQueuedHistory = 32;
inline constexpr size_t kMaxHistoryBytesInFlight = size_t{48} << 20;

// The routes as a net::Handler: reads answered on the transport's loop from the snapshot, a
// budget request offloaded (it waits on the coordinator's mutex and the store).
class CoordinatorApi final : public net::Handler {
 public:
  // `host` outlives the Api. `connections` (may be null) gives the transport's counters.
  CoordinatorApi(CoordinatorHost& host, net::AccessPolicy access,
                 std::function<net::ConnectionCounters()> connections = nullptr);
  net::Response Handle(const net::Request& request) override;

 private:
  net::Response PostSiteBudget(const net::Request& request, std::string_view query);
  net::Response GetHistory(std::string_view query);

  CoordinatorHost& host_;
  const std::function<net::ConnectionCounters()> connections_;
  // Bytes of history answers built and not yet written (kMaxHistoryBytesInFlight).
  const std::shared_ptr<std::atomic<size_t>> history_bytes_ =
      std::make_shared<std::atomic<size_t>>(0);
  net::Router router_;
};

// The API on the shared transport (net/server.h).
class CoordinatorServer {
 public:
  explicit CoordinatorServer(CoordinatorApiConfig config);
  ~CoordinatorServer();  // stops and joins
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // Binds host:port (port 0: any free port); nothing is served before Serve. One line naming
  // the address when it is in use or not this machine's. Without SO_REUSEPORT: a second
  // replica on a port in use fails here. REQUIRES: not bound yet.
  Status Bind(const std::string& host, int port);
  int port() const { return server_.port(); }
  // Serves on threads of its own until Stop. `host` outlives the server (or Stop).
  // REQUIRES: Bind succeeded; called once.
  void Serve(CoordinatorHost& host);
  // Closes the listener and every connection, and joins (a budget request in progress first
  // finishes with the store). Idempotent.
  void Stop();
  net::ConnectionCounters counters() const { return server_.counters(); }

 private:
  const CoordinatorApiConfig config_;
  net::Server server_;
  std::unique_ptr<CoordinatorApi> api_;  // from Serve
};

}  // namespace headroom::coord_server
