#include "twin/environment.h"

#include <cassert>
#include <cmath>

namespace headroom::twin {

Environment::Environment(Scenario scenario, double budget_w)
    : scenario_(std::move(scenario)),
      budget_w_(budget_w),
      ticks_per_interval_(static_cast<int>(std::lround(scenario_.interval_s / scenario_.tick_s))) {
  assert(budget_w > 0.0);
}

Observation Environment::Reset(uint64_t seed) {
  twin_.emplace(scenario_, seed);
  return Observe();
}

Observation Environment::Observe() const {
  Observation o;
  o.t_s = twin_->t_s();
  o.smoothed_power_w = twin_->smoothed_w();
  o.phase = twin_->current_phase();
  o.step = twin_->steps_done();
  o.rollout_progress = twin_->rollout_progress();
  o.concurrency = twin_->concurrency();
  o.group_size = twin_->group_size();
  o.next_group_size = twin_->next_group_size();
  o.power_limit_w = twin_->power_limit_w();
  o.tokens_total = twin_->tokens_total();
  o.budget_w = budget_w_;
  return o;
}

Environment::StepResult Environment::Step(const Actuation& actuation) {
  assert(twin_.has_value());
  if (actuation.concurrency) twin_->SetConcurrency(*actuation.concurrency);
  if (actuation.group_size) twin_->SetGroupSize(*actuation.group_size);
  if (actuation.power_limit_w) twin_->SetPowerLimit(*actuation.power_limit_w);
  StepResult r;
  const size_t gpus = static_cast<size_t>(scenario_.gpus);
  r.metrics.tick_power_w.reserve(static_cast<size_t>(ticks_per_interval_) * gpus);
  r.metrics.mean_power_w.assign(gpus, 0.0);
  const double energy_before = twin_->energy_j();
  const double tokens_before = twin_->tokens_total();
  for (int k = 0; k < ticks_per_interval_; ++k) {
    twin_->Tick();
    for (size_t g = 0; g < gpus; ++g) {
      const double p = twin_->power_w()[g];
      r.metrics.tick_power_w.push_back(p);
      r.metrics.mean_power_w[g] += p / ticks_per_interval_;
    }
  }
  r.metrics.energy_j = twin_->energy_j() - energy_before;
  r.metrics.tokens = twin_->tokens_total() - tokens_before;
  r.metrics.phase = twin_->phase();
  r.observation = Observe();
  return r;
}

}  // namespace headroom::twin
