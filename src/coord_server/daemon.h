// The coordinator daemon: one replica's composition root (docs/SITE.md), built from injected
// parts (the site's store, the coordinator's and the API's configuration, an optional batch
// scheduler for --slurm, the clocks and a logger), owning the host, the HTTP API, the period
// loop and the shutdown order. `headroom coordinator` (cli/coordinator_command.cc) only checks
// its options, opens etcd and turns flags into these parts, as agent/daemon.h is the agent's.
//
// The loop: a Step every period on the monotonic clock (a period missed, a slow store, is
// skipped, not caught up); a target the API accepts wakes it, so the next Step runs at once;
// with a scheduler, the Suspender's actions after each Step. At a domain (--parent-etcd), the
// parent membership steps on a thread of its own every period (coord/domain.h), its grant the
// domain's target; at shutdown it stops after the host resigns, revoking the parent lease.
//
// Shutdown order, when `stop` is set:
//   1. the host resigns: its lease is revoked, so another replica leads at once instead of
//      after the lease's TTL;
//   2. the HTTP server stops, closing every connection;
//   3. one line, "stopped".
// The API still answers while the host resigns (a status read, a budget request waiting on the
// host's mutex), so no client sees a refused connection from a replica that still leads.
//
// Not thread-safe: one thread constructs it, calls Listen and then Run; the API's threads, the
// clock's `wake` and, at a domain, the parent membership's thread are the only others that
// touch it, through the host.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "coord/coordinator.h"
#include "coord/domain.h"
#include "coord/site_feed.h"
#include "coord/store.h"
#include "coord_server/coordinator_server.h"
#include "net/listen.h"
#include "slurm/batch_scheduler.h"
#include "slurm/suspender.h"

namespace headroom::coord_server {

// The daemon's clocks, sleep and wake, injected (a test drives the periods itself).
struct CoordinatorClock {
  std::function<double()> monotonic_s;  // periods, leases, the suspender's delays
  std::function<double()> unix_s;       // the history's stamps (GET /v1/history)
  // Until monotonic time t_s, a stop, or a wake, whichever first.
  std::function<void(double t_s)> sleep_until;
  // Ends the sleep in progress, or the next one, at once (once for each call). Any thread.
  std::function<void()> wake;
};

// --slurm: the leader suspends and resumes opportunistic members' batch jobs.
struct SlurmParts {
  slurm::BatchScheduler* scheduler = nullptr;  // outlives the daemon
  slurm::SuspenderConfig suspender;
};

// --parent-etcd, --parent-site: this site is a domain of a parent site (coord/domain.h).
struct ParentParts {
  coord::Store* store = nullptr;  // the parent's etcd; outlives the daemon
  coord::DomainConfig config;
};

class CoordinatorDaemon {
 public:
  // `store` outlives the daemon. config.listen is set by Listen.
  // REQUIRES: every clock function set; slurm->scheduler set when slurm; parent->store set
  // when parent.
  CoordinatorDaemon(coord::Store& store, coord::CoordinatorConfig config, CoordinatorApiConfig api,
                    std::optional<SlurmParts> slurm, CoordinatorClock clock, Logger log,
                    std::optional<ParentParts> parent = std::nullopt);
  CoordinatorDaemon(const CoordinatorDaemon&) = delete;
  CoordinatorDaemon& operator=(const CoordinatorDaemon&) = delete;

  // Binds the API on listen (port 0: any free port); nothing is served before Run. The
  // replica then names itself by `listen` with the bound port (the leader key's `listen`).
  // REQUIRES: called once, before Run.
  Status Listen(const net::ListenAddress& listen);
  int port() const { return server_.port(); }
  // The configuration, with `listen` once bound.
  const coord::CoordinatorConfig& config() const { return config_; }

  // Serves, logs the start lines, and runs the loop until `stop`, then shuts down in the order
  // above. REQUIRES: Listen succeeded; called once.
  void Run(const std::atomic<bool>& stop);

 private:
  void StartLines() const;
  // After a Step: the Suspender's actions on the scheduler.
  void ApplySuspensions();
  // At a domain, on a thread of its own (a parent etcd that does not answer never delays the
  // domain's own periods, nor its lease): every period, the parent membership stepped on the
  // last snapshot, the grant made the domain's target (coord/domain.h), the parent's state
  // published with the status. Until domain_stop_; then the parent lease is revoked.
  void RunDomain() EXCLUDES(domain_mu_);
  void StepDomain();

  coord::Store& store_;
  coord::CoordinatorConfig config_;
  const CoordinatorApiConfig api_;
  const std::optional<SlurmParts> slurm_;
  const CoordinatorClock clock_;
  const Logger log_;
  CoordinatorServer server_;
  // The leader's view's changes from a watch that stays open, where the store's watch waits
  // (etcd); polled otherwise. Before host_: the host's coordinator uses it.
  std::unique_ptr<coord::FollowedFeed> feed_;  // from Listen
  std::optional<CoordinatorHost> host_;        // from Listen
  std::optional<slurm::Suspender> suspender_;  // with slurm; the loop's thread only
  std::optional<coord::DomainLink> link_;      // at a domain; domain_thread_'s only
  std::string last_refusal_;                   // of the domain's target, logged once
  Mutex domain_mu_;
  std::condition_variable_any domain_wake_;
  bool domain_stop_ GUARDED_BY(domain_mu_) = false;
  std::thread domain_thread_;  // from Run, at a domain
};

}  // namespace headroom::coord_server
