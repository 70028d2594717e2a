#include "twin/rollout.h"

#include <algorithm>
#include <cassert>

namespace headroom::twin {
namespace {

// A phase drawing full_power_w at full clock, under the limit: (time factor, power drawn).
ClockCurve::Effect Limited(const EngineRates& rates, double full_power_w) {
  if (rates.power_limit_w <= 0.0 || rates.clock == nullptr) return {1.0, full_power_w};
  return rates.clock->Apply(full_power_w, rates.power_limit_w);
}

}  // namespace

std::string_view AdmissionName(Admission admission) {
  switch (admission) {
    case Admission::kContinuous:
      return "continuous";
    case Admission::kChunked:
      return "chunked";
  }
  return "continuous";
}

std::optional<Admission> ParseAdmission(std::string_view name) {
  for (const Admission a : {Admission::kContinuous, Admission::kChunked}) {
    if (name == AdmissionName(a)) return a;
  }
  return std::nullopt;
}

void RolloutEngine::Start(std::vector<double> lengths, double prefill_tokens_per_sequence) {
  assert(done());
  lengths_ = std::move(lengths);
  next_ = 0;
  progress_ = 0.0;
  prefill_queue_tokens_ = 0.0;
  prefill_per_sequence_ = prefill_tokens_per_sequence;
}

void RolloutEngine::Abandon() {
  lengths_.clear();
  next_ = 0;
  in_flight_ = {};
  prefill_queue_tokens_ = 0.0;
}

void RolloutEngine::Admit(size_t limit) {
  // A chunk begins only on an empty engine; once begun, the chunk is all that runs.
  if (admission_ == Admission::kChunked && !in_flight_.empty()) return;
  while (in_flight_.size() < limit && next_ < lengths_.size()) {
    in_flight_.push(progress_ + lengths_[next_++]);
    prefill_queue_tokens_ += prefill_per_sequence_;
  }
}

RolloutEngine::Tick RolloutEngine::Advance(double dt_s, int concurrency, int kv_capacity,
                                           const EngineRates& rates) {
  Tick tick;
  Admit(static_cast<size_t>(std::max(0, std::min(concurrency, kv_capacity))));
  const double n = static_cast<double>(in_flight_.size());
  tick.occupancy = n;
  double time_s = dt_s;
  double energy = 0.0;  // W x s per GPU
  // Prompt processing first (prefill bursts), then decode with what is left of the tick.
  if (prefill_queue_tokens_ > 0.0) {
    const auto effect = Limited(rates, rates.prefill_power_w);
    const double rate = rates.prefill_tokens_per_s / effect.time_factor;
    const double used_s = std::min(time_s, prefill_queue_tokens_ / rate);
    prefill_queue_tokens_ = std::max(0.0, prefill_queue_tokens_ - used_s * rate);
    energy += used_s * effect.power_w;
    time_s -= used_s;
  }
  if (n > 0.0 && time_s > 0.0) {
    const auto effect = Limited(rates, rates.decode->PowerW(n));
    const double per_sequence = rates.decode->TokensPerS(n) / effect.time_factor * time_s / n;
    progress_ += per_sequence;
    tick.tokens = n * per_sequence;
    // Sequences that reached their length stop there: take back what they would overshoot.
    while (!in_flight_.empty() && in_flight_.top() <= progress_) {
      tick.tokens -= progress_ - in_flight_.top();
      in_flight_.pop();
    }
    energy += time_s * effect.power_w;
    time_s = 0.0;
  }
  energy += time_s * rates.decode->idle_loaded_w;  // nothing left to do this tick
  tick.power_w = energy / dt_s;
  return tick;
}

RolloutEngine::Tick RolloutEngine::Steady(double dt_s, double in_flight, const EngineRates& rates) {
  Tick tick;
  tick.occupancy = std::max(0.0, in_flight);
  if (tick.occupancy <= 0.0 || dt_s <= 0.0) {
    tick.power_w = rates.decode->idle_loaded_w;
    return tick;
  }
  const auto effect = Limited(rates, rates.decode->PowerW(tick.occupancy));
  tick.tokens = rates.decode->TokensPerS(tick.occupancy) / effect.time_factor * dt_s;
  tick.power_w = effect.power_w;
  return tick;
}

}  // namespace headroom::twin
