// IsSlurmJobId and the in-memory scheduler (coord/batch_scheduler.h); Slurm itself is
// scontrol.cc's.
#include <fmt/format.h>

#include "coord/batch_scheduler.h"

namespace headroom::coord {

bool IsSlurmJobId(std::string_view id) {
  const auto digits = [](std::string_view s) {
    if (s.empty() || s.size() > 18 || s[0] == '0') return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  const size_t underscore = id.find('_');
  if (underscore == std::string_view::npos) return digits(id);
  const std::string_view task = id.substr(underscore + 1);
  return digits(id.substr(0, underscore)) && (task == "0" || digits(task));
}

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

}  // namespace headroom::coord
