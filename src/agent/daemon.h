// The agent daemon: its composition root, built from injected parts (a telemetry source, a
// controller, an optional power-limit guard, an optional site membership, a recorder), owning the
// runner's callbacks, the HTTP API, the site threads and the shutdown order. `headroom agent`
// (cli/agent_command.cc) only turns flags into these parts.
//
// Shutdown order, the safety-critical part (docs/AGENT.md): when the loop ends (duration, signal)
//   1. the guard puts back every GPU power limit it changed -- nothing else may delay it;
//   2. the HTTP server stops, closing every connection at once;
//   3. the site threads stop (the grant's watch, then the member's step thread);
//   4. the member leaves: its lease is revoked, so the site's ledger keeps only its floor.
// A limit is restored while the API still answers and while the job still holds its grant.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "agent/agent.h"
#include "agent/api.h"
#include "agent/api_server.h"
#include "agent/budget.h"
#include "agent/guard.h"
#include "agent/recorder.h"
#include "agent/runner.h"
#include "agent/site_budget.h"
#include "agent/site_log.h"
#include "agent/trainer_link.h"
#include "common/log.h"
#include "control/controller.h"
#include "coord/member.h"
#include "coord/store.h"
#include "net/server.h"
#include "telemetry/source.h"

namespace headroom::agent {

// A member of a site (docs/SITE.md).
struct SiteParts {
  coord::Store* store = nullptr;  // the site's etcd; outlives the daemon
  coord::MemberConfig member;
  // Per GPU: the range the controller acts in (a policy's trained budgets, else the widest).
  std::pair<double, double> budget_range_w{kMinBudgetPerGpuW, kMaxBudgetPerGpuW};
  // The node's other power at monotonic time t_s (powercap, or a constant).
  std::function<double(double t_s)> overhead_w;
  double grant_quiet_s = 30.0;  // the grant's watch is made again after this long with nothing
};

// The daemon's clocks and sleep, injected (a test runs at speed 0 and sleeps never).
struct DaemonClock {
  std::function<double()> monotonic_s;
  std::function<double()> unix_s;
  // Until monotonic time t_s or a stop, whichever first.
  std::function<void(double t_s)> sleep_until;
};

struct DaemonParts {
  AgentConfig config;
  control::Controller* controller = nullptr;  // outlives the daemon
  std::unique_ptr<telemetry::Source> source;
  TrainerLink* link = nullptr;  // a trainer in process (the twin, inside `source`), or null
  // Where a power limit goes without a guard: the twin's GPUs. Null: not written (said once).
  std::function<void(double limit_per_gpu_w)> hardware_limit;
  // The twin's true energy so far, for the site log's power lines; null: none.
  std::function<double()> energy_j;
  std::unique_ptr<PowerLimitGuard> guard;  // null: the GPUs' limits are not written
  std::optional<SiteParts> site;
  std::unique_ptr<SiteLog> site_log;  // --site-log, or null
  // A policy's trained budgets: POST /v1/budget takes budgets in this range only.
  std::optional<std::pair<double, double>> budget_range_w;
  double speed = 1.0;  // agent seconds per wall second; 0: as fast as it can
  std::optional<double> duration_s;
};

class AgentDaemon {
 public:
  // REQUIRES: parts.controller and parts.source set; site->store set when site.
  AgentDaemon(DaemonParts parts, DaemonClock clock, Logger log);
  ~AgentDaemon();
  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;

  // Binds the API (the dashboard, the trainer's routes) on host:port (0: any free port).
  Status Listen(const std::string& host, int port, const ApiConfig& api,
                const net::ServerLimits& limits);
  int port() const { return server_ ? server_->port() : 0; }
  // The agent's own trace from now on (after Listen: nothing is written before the port is bound).
  void Record(Recorder recorder) { recorder_.emplace(std::move(recorder)); }

  struct Stopped {
    RunSummary summary;
    Status restored = OkStatus();  // the guard's restore: its first failure
  };
  // Runs until `stop` or the duration, then shuts down in the order above. Once.
  Stopped Run(const std::atomic<bool>& stop);

  const telemetry::Source& source() const { return *parts_.source; }
  const std::optional<Recorder>& recorder() const { return recorder_; }

 private:
  SiteHealth Health() const;
  void Observe(const telemetry::Sample& s, double budget_w);
  void PowerLimit(double limit_w);

  DaemonParts parts_;
  const DaemonClock clock_;
  const Logger log_;
  Agent core_;
  Shared shared_;
  PostedBudget budget_;
  std::optional<coord::SiteMember> member_;
  std::optional<SiteBudget> site_budget_;
  std::optional<ApiServer> server_;  // from Listen
  std::optional<Recorder> recorder_;
  std::atomic<double> agent_now_s_{0.0};
  // The runner's thread only.
  double last_energy_j_ = 0.0;
  bool limit_unwritten_said_ = false;
  uint64_t site_log_errors_noted_ = 0;
};

}  // namespace headroom::agent
