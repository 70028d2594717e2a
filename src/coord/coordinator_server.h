// `headroom coordinator`'s HTTP API beside one replica (docs/FLEET.md):
//   GET  /                the fleet page (self-contained: polls /v1/status, draws with <canvas>)
//   GET  /v1/status       the replica's role and, while it leads, the ledger and the members
//   GET  /metrics         Prometheus text format 0.0.4
//   POST /v1/site-budget  {"site_budget_w": W} and/or {"reserve_w": W}: a new target, leader only,
//                         answered 202 once written to the store (the ledger is the
//                         one place the budget lives); bearer token when one is configured
// Anything else is 404, a known path with another method 405.
//
// A Coordinator is not thread-safe: CoordinatorHost owns it and the mutex that guards it. The
// CLI's loop calls Step(); the server's threads read the snapshot published after each Step (so
// a read never waits on the store's I/O) and pass budget requests on.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/thread_annotations.h"
#include "coord/coordinator.h"

namespace httplib {
class Server;
}

namespace headroom::coord {

// A site budget request's outcome, decided under the coordinator's mutex.
struct SiteBudgetAnswer {
  // kAccepted: written to the store; kUnavailable: the store did not take it (503).
  enum class Outcome { kAccepted, kNotLeader, kRefused, kUnavailable };
  Outcome outcome = Outcome::kRefused;
  std::string message;    // kRefused: why (names the field); kNotLeader: who leads
  TargetWritten written;  // kAccepted: the target and the store's revision
};

// Thread-safe. `store` outlives the host.
class CoordinatorHost {
 public:
  CoordinatorHost(Store& store, CoordinatorConfig config, std::function<double()> now_s,
                  std::function<void(const std::string&)> log);

  // One period of the coordinator, then publishes its status.
  void Step() EXCLUDES(mu_, snapshot_mu_);
  // The status as the last Step (or Resign) left it.
  CoordinatorStatus Snapshot() const EXCLUDES(snapshot_mu_);
  // Accepted only while leading, and when the coordinator takes it (applied at the next Step,
  // where the leader checks it again against the ledger it reads). Waits for a Step in progress
  // (its store I/O).
  SiteBudgetAnswer RequestTarget(std::optional<double> site_budget_w,
                                 std::optional<double> reserve_w) EXCLUDES(mu_);
  // Gives up the lease (another replica leads at once), then publishes the status.
  void Resign() EXCLUDES(mu_, snapshot_mu_);

  // Constant after construction.
  const CoordinatorConfig& config() const { return config_; }

 private:
  const CoordinatorConfig config_;

  // Lock order: mu_, then snapshot_mu_.
  mutable Mutex mu_;
  Coordinator coordinator_ GUARDED_BY(mu_);
  mutable Mutex snapshot_mu_;
  CoordinatorStatus snapshot_ GUARDED_BY(snapshot_mu_);
};

struct CoordinatorApiConfig {
  std::string token;  // required on POST when not empty
  // Names this replica is reached by, accepted in Host besides IP literals and loopback names
  // (any other is refused with 403: a DNS name rebound to this machine).
  std::vector<std::string> allowed_hosts;
  size_t max_body_bytes = 4096;  // larger bodies: 413
  double read_timeout_s = 5.0;   // a request must arrive within this
  double write_timeout_s = 5.0;  // an answer must be taken within this
  double keep_alive_timeout_s = 5.0;
};

// The leader as the leader key says it ({"id":..,"listen":..}), or as a replica names itself.
struct LeaderInfo {
  std::string id;
  std::string listen;  // where its API is; empty when unknown
};
LeaderInfo ParseLeader(const CoordinatorStatus& s, const CoordinatorConfig& self);

// The bodies, exposed for tests. Ledger and member fields are reported only while leading (a
// replica that does not lead has no current ledger): null in the JSON, absent from the metrics.
std::string CoordinatorStatusJson(const CoordinatorStatus& s, const CoordinatorConfig& config);
std::string CoordinatorMetricsText(const CoordinatorStatus& s);
// {"site_budget_w": W} and/or {"reserve_w": W}: the budget in (0, 1e9] W, the reserve in
// [0, 1e9] W, at least one of them; the error names the field.
struct TargetBody {
  std::optional<double> site_budget_w;
  std::optional<double> reserve_w;
};
Result<TargetBody> ParseSiteBudgetBody(std::string_view body);
// A Prometheus label value, escaped (backslash, double quote, newline).
std::string EscapeLabelValue(std::string_view value);
// Nearest-rank quantile of `values` (unsorted); nullopt when empty. REQUIRES: 0 < q <= 1.
std::optional<double> Quantile(std::vector<double> values, double q);

inline constexpr double kMaxSiteBudgetW = 1e9;

// Whether `host` (an address or name, no port; IPv6 with or without brackets) is on this
// machine's loopback: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackHost(std::string_view host);

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
  int port() const { return port_; }
  // Serves on threads of its own until Stop. `host` outlives the server (or Stop).
  // REQUIRES: Bind succeeded; called once.
  void Serve(CoordinatorHost& host);
  // Closes the listener and joins. Idempotent.
  void Stop();

 private:
  const CoordinatorApiConfig config_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  bool bound_ = false;
};

}  // namespace headroom::coord
