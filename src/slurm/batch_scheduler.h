#pragma once
// The batch scheduler a site runs its opportunistic workers under (docs/SITE.md, "Slurm"):
// the coordinator suspends a worker's job when its grant stays at zero and resumes it when
// watts return. One interface; `scontrol.cc` is the one file that talks to Slurm (through its
// `scontrol` command); FakeBatchScheduler has the same semantics in memory, for unit tests.
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::slurm {

class BatchScheduler {
 public:
  virtual ~BatchScheduler() = default;
  // Stops the job's processes where they are (Slurm: SIGSTOP to every step, the job's CPUs kept).
  // An error names the job and the scheduler's reason (already suspended, not running, gone).
  virtual Status Suspend(const std::string& job_id) = 0;
  // Lets a suspended job go on.
  virtual Status Resume(const std::string& job_id) = 0;
  virtual std::string Describe() const = 0;
};

// `scontrol suspend|resume ID` (SLURM_CONF from the environment, as every Slurm command takes
// it), run without a shell; an exit status other than 0 is an error with scontrol's first line
// of output. `scontrol` is the command's path or a name looked up in PATH.
std::unique_ptr<BatchScheduler> MakeScontrol(std::string scontrol = "scontrol",
                                             double timeout_s = 10.0);

// In memory: jobs are added running; Slurm's rules for suspend and resume.
class FakeBatchScheduler final : public BatchScheduler {
 public:
  enum class State { kRunning, kSuspended, kDone };
  void Add(const std::string& job_id) { jobs_[job_id] = State::kRunning; }
  void Finish(const std::string& job_id) { jobs_[job_id] = State::kDone; }
  State state(const std::string& job_id) const;
  Status Suspend(const std::string& job_id) override;
  Status Resume(const std::string& job_id) override;
  std::string Describe() const override { return "fake"; }
  const std::vector<std::string>& calls() const { return calls_; }  // "suspend 12", "resume 12"

 private:
  std::map<std::string, State> jobs_;
  std::vector<std::string> calls_;
};

}  // namespace headroom::slurm
