#pragma once
// A worker's time, CPU and events by phase (docs/DILOCO.md, "Accounting"), and the report it
// ends with. Time and CPU time are injected (WorkerClock): the CLI gives the real ones, the
// in-process tests a simulated clock.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "diloco_comm/communicator.h"
#include "diloco_core/run_report.h"  // LossPoint

namespace headroom::diloco {

// Time and the process's CPU time, injected (tests and the CLI give the real ones).
struct WorkerClock {
  std::function<double()> now_s;
  std::function<double()> cpu_s;
  std::function<void(double)> sleep_s;
};

struct WorkerReport {
  std::string name;
  std::string member;  // hex lease id
  std::string mode;
  int rounds_done = 0;
  int rounds_contributed = 0;
  std::uint64_t tokens = 0;  // this worker's tokens in accepted contributions
  double compute_s = 0, communicate_s = 0, wait_s = 0, recover_s = 0, wall_s = 0;
  double throttled_s = 0;  // idle on purpose (duty cycle, asked to leave): not overhead
  double compute_cpu_s = 0, other_cpu_s = 0;
  TrafficCounters traffic;
  int membership_changes = 0;  // rounds whose group differed from the previous one's
  int evictions = 0;           // contributions rejected, hashes that disagreed (seen by me)
  int resyncs = 0;             // times I fetched the model from a donor
  int leaves = 0;              // times I left the run on request
  bool hashes_agreed = true;
  double final_val_loss = -1.0;       // the last donor's, when I was it
  std::vector<LossPoint> loss_curve;  // the rounds I was the donor of
  std::vector<float> final_params;    // the final model, when I was the last round's donor
  std::vector<std::string> log;       // one line per notable event
};

// Splits a worker's wall time and CPU time into phases: every second between Start and the
// last Enter is in exactly one of compute, communicate, wait, recover and throttled (so their
// sum is the wall time), and CPU time in compute or other.
// Not thread-safe: the worker's thread.
class Accounting {
 public:
  enum class Phase { kCompute, kCommunicate, kWait, kRecover, kThrottled };

  // `computing` (may be empty) is told when the worker starts and stops computing.
  // REQUIRES: report and clock outlive this.
  Accounting(WorkerReport& report, const WorkerClock& clock, std::function<void(bool)> computing);

  // The run starts now, waiting.
  void Start();
  // Closes the phase in force (its seconds to its counter) and enters `p`.
  void Enter(Phase p);
  Phase phase() const { return phase_; }
  // A line in the report's log: seconds since Start, the worker's name, the line.
  void Log(std::string_view line);
  double elapsed_s() const;

 private:
  WorkerReport& report_;
  const WorkerClock& clock_;
  std::function<void(bool)> computing_;
  double start_s_ = 0;
  Phase phase_ = Phase::kWait;
  double phase_start_s_ = 0, phase_cpu_s_ = 0;
};

}  // namespace headroom::diloco
