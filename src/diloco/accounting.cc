#include "diloco/accounting.h"

#include <fmt/format.h>

namespace headroom::diloco {

Accounting::Accounting(WorkerReport& report, const WorkerClock& clock,
                       std::function<void(bool)> computing)
    : report_(report), clock_(clock), computing_(std::move(computing)) {}

void Accounting::Start() {
  start_s_ = clock_.now_s();
  phase_ = Phase::kWait;
  phase_start_s_ = start_s_;
  phase_cpu_s_ = clock_.cpu_s();
}

void Accounting::Enter(Phase p) {
  const double now = clock_.now_s();
  const double cpu = clock_.cpu_s();
  const double dt = now - phase_start_s_;
  const double dcpu = cpu - phase_cpu_s_;
  switch (phase_) {
    case Phase::kCompute:
      report_.compute_s += dt;
      report_.compute_cpu_s += dcpu;
      break;
    case Phase::kCommunicate:
      report_.communicate_s += dt;
      report_.other_cpu_s += dcpu;
      break;
    case Phase::kWait:
      report_.wait_s += dt;
      report_.other_cpu_s += dcpu;
      break;
    case Phase::kRecover:
      report_.recover_s += dt;
      report_.other_cpu_s += dcpu;
      break;
    case Phase::kThrottled:
      report_.throttled_s += dt;
      report_.other_cpu_s += dcpu;
      break;
  }
  if (computing_ && (p == Phase::kCompute) != (phase_ == Phase::kCompute)) {
    computing_(p == Phase::kCompute);
  }
  phase_ = p;
  phase_start_s_ = now;
  phase_cpu_s_ = cpu;
}

void Accounting::Log(std::string_view line) {
  report_.log.push_back(fmt::format("{:.3f} {} {}", elapsed_s(), report_.name, line));
}

double Accounting::elapsed_s() const { return clock_.now_s() - start_s_; }

}  // namespace headroom::diloco
