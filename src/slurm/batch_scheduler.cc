// The in-memory scheduler (slurm/batch_scheduler.h); Slurm itself is scontrol.cc's.
#include <fmt/format.h>

#include "slurm/batch_scheduler.h"

namespace headroom::slurm {

FakeBatchScheduler::State FakeBatchScheduler::state(const std::string& job_id) const {
  const auto it = jobs_.find(job_id);
  return it == jobs_.end() ? State::kDone : it->second;
}

// Slurm's rules: only a running job is suspended, only a suspended one resumed.
Status FakeBatchScheduler::Suspend(const std::string& job_id) {
  calls_.push_back("suspend " + job_id);
  const auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second == State::kDone) {
    return Error::Io(fmt::format("scontrol suspend {}: Invalid job id specified", job_id));
  }
  if (it->second == State::kSuspended) {
    return Error::Io(fmt::format("scontrol suspend {}: Job already suspended", job_id));
  }
  it->second = State::kSuspended;
  return OkStatus();
}

Status FakeBatchScheduler::Resume(const std::string& job_id) {
  calls_.push_back("resume " + job_id);
  const auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second == State::kDone) {
    return Error::Io(fmt::format("scontrol resume {}: Invalid job id specified", job_id));
  }
  if (it->second != State::kSuspended) {
    return Error::Io(fmt::format("scontrol resume {}: Job is not suspended", job_id));
  }
  it->second = State::kRunning;
  return OkStatus();
}

}  // namespace headroom::slurm
