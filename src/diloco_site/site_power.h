#pragma once
// An opportunistic DiLoCo worker as a member of its site's coordinator (docs/DILOCO.md, "On
// spare power"; docs/SITE.md, "Job classes"): a coord::SiteMember of class opportunistic
// (floor 0, no local budget: without a grant it does not train), stepped on its own thread,
// and the duty cycle its grant allows.
//
// The power model: a worker at duty D on T threads draws T x D x watts_per_core above the
// machine's idle (the same per-core figure as the energy accounting, --cpu-watts-per-core);
// its demand is T x watts_per_core. So a grant of G watts allows D = G / (T x watts_per_core),
// capped at 1, and the member publishes the modelled power T x D x watts_per_core.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/log.h"
#include "coord/member.h"
#include "coord/member_session.h"
#include "coord/store.h"

namespace headroom::diloco {

// T x D x watts_per_core.
double WorkerPowerW(int threads, double duty, double watts_per_core);
// The duty a grant allows: grant / (threads x watts_per_core), in [0, 1].
double DutyForGrant(double grant_w, int threads, double watts_per_core);

struct SitePowerConfig {
  std::string site;
  std::string job;  // the member's name at the site
  int threads = 1;  // the worker's at the start (its demand)
  double watts_per_core = 10.0;
  int64_t lease_ttl_s = 3;
  double step_s = 0.25;   // how often the member's thread steps
  std::string slurm_job;  // SLURM_JOB_ID when run by Slurm ("": not)
};

class SitePower {
 public:
  // `store`: the site's etcd (it outlives this). Starts the member's thread.
  SitePower(coord::Store& store, const SitePowerConfig& config, std::function<double()> now_s,
            Logger log);
  ~SitePower();  // stops the thread and leaves the site (revokes the lease)
  SitePower(const SitePower&) = delete;
  SitePower& operator=(const SitePower&) = delete;

  // What the grant allows now for `threads` at most `duty`; reports the modelled power to the
  // member. Thread-safe with the member's thread. (WorkerOptions::granted_duty.)
  double GrantedDuty(int threads, double duty);
  // The worker is computing (or not: waiting, communicating, paused). While it is not, it draws
  // no compute power, so the member's thread serves (and so acknowledges) each new grant itself:
  // a shrinking grant is met within a step of the member's thread even when the worker is
  // waiting for its peers. (WorkerOptions::computing.) The worker asks for its grant before
  // each step, so it acts on what was acknowledged.
  void SetComputing(bool computing);
  // The grant's watts as last served (0 before any grant).
  double granted_w() const { return granted_w_.load(); }

 private:
  // The member's Current() (served, so acknowledged at its next step): its watts when granted,
  // 0 otherwise (not admitted, fenced).
  double ServeGrantW();

  SitePowerConfig config_;
  std::function<double()> now_s_;
  std::unique_ptr<coord::SiteMember> member_;
  std::atomic<double> granted_w_{0.0};
  std::atomic<bool> computing_{false};
  std::optional<coord::MemberSession> session_;  // the member's thread, last to start
};

}  // namespace headroom::diloco
