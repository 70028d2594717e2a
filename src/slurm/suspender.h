#pragma once
// Opportunistic workers that run as Slurm jobs (docs/SITE.md, "Slurm"): the leader suspends a
// worker's job when its grant has been 0 (and acknowledged) for suspend_after_s, and resumes it
// when watts return -- while its member is still registered, when the plan grants it at least
// min_duty of its demand; once its lease has lapsed (a stopped process renews nothing), when
// the watts the plan had for opportunistic jobs less what the registered ones want cover
// resume_fraction of its demand. Pure: the caller gives it the leader's status after each
// period and the time, runs the actions on a BatchScheduler and reports each outcome.
#include <map>
#include <string>
#include <vector>

#include "coord/coordinator.h"

namespace headroom::slurm {

struct SuspenderConfig {
  double suspend_after_s = 3.0;
  double min_duty = 0.05;  // as the worker's: below it, it pauses
  double resume_fraction = 0.25;
};

struct SuspendAction {
  enum class Kind { kSuspend, kResume };
  Kind kind = Kind::kSuspend;
  std::string job;        // the member's name at the site
  std::string slurm_job;  // its Slurm job id
  double demand_w = 0.0;
};

struct SuspendedJob {
  std::string slurm_job;
  double demand_w = 0.0;
  double since_s = 0.0;
};

class Suspender {
 public:
  explicit Suspender(SuspenderConfig config) : config_(config) {}

  // What to do after this period (nothing unless `status` is a leader's with a ledger).
  std::vector<SuspendAction> Decide(const coord::CoordinatorStatus& status, double now_s);
  // The outcome of an action Decide returned: a suspension recorded, or tried again after
  // suspend_after_s; a resumption (or one that failed: the job is gone) forgotten.
  void Applied(const SuspendAction& action, bool ok, double now_s);

  const std::map<std::string, SuspendedJob>& suspended() const { return suspended_; }

 private:
  SuspenderConfig config_;
  std::map<std::string, double> zero_since_;  // registered, granted 0 and holding 0 since
  std::map<std::string, SuspendedJob> suspended_;
};

}  // namespace headroom::slurm
