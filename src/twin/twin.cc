#include "twin/twin.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "twin/keyed_random.h"

namespace headroom::twin {
namespace {

constexpr double kTimeEpsilon = 1e-12;
constexpr int kMaxEmptyPhases = 64;  // guards against a step whose every phase takes no time
constexpr uint64_t kStorageStream = 0x53746f7261676521ull;  // seeds the slow-storage draw

// When storage turns slow: the first step's start plus an exponential time of the scenario's
// mean, keyed by (seed, its own stream): u in (0, 1), and -mean ln u is exponential.
double SlowStorageFrom(const Scenario& scenario, uint64_t seed) {
  if (scenario.checkpoint_slow_onset_mean_s <= 0.0) return std::numeric_limits<double>::infinity();
  const double u = UnitUniform(KeyedBits(seed, kStorageStream, 0, 0));
  return scenario.idle_before_s + scenario.startup_s -
         scenario.checkpoint_slow_onset_mean_s * std::log(u);
}

double Alpha(double tick_s, double tau_s) {
  return tau_s <= 0.0 ? 1.0 : 1.0 - std::exp(-tick_s / tau_s);
}

}  // namespace

Twin::Twin(const Scenario& scenario, uint64_t seed)
    : scenario_(scenario),
      kv_capacity_(scenario.has_rollout ? KvCapacitySequences(scenario) : 0),
      seed_(seed),
      slow_storage_from_s_(SlowStorageFrom(scenario, seed)),
      concurrency_(scenario.concurrency),
      group_size_(scenario.group_size),
      step_group_size_(scenario.group_size) {
  const auto gpus = static_cast<size_t>(scenario_.gpus);
  engines_.assign(static_cast<size_t>(scenario_.engines()), RolloutEngine(scenario_.admission));
  target_energy_.assign(gpus, 0.0);
  const double start_w = scenario_.idle_before_s > 0.0 ? scenario_.idle_w : scenario_.idle_loaded_w;
  lagged_w_.assign(gpus, start_w);
  noise_w_.resize(gpus);
  noise_odd_tick_.assign(gpus, 0.0);
  for (size_t g = 0; g < gpus; ++g)  // stationary start
    noise_w_[g] = scenario_.noise_w * KeyedNormal(seed_, kStartNoiseStream, 0, g);
  power_w_.assign(gpus, start_w);
  smoothed_w_.assign(gpus, start_w);
  tick_tokens_.assign(gpus, 0.0);
  window_ticks_ = std::max<size_t>(
      1, static_cast<size_t>(std::lround(scenario_.telemetry_average_s / scenario_.tick_s)));
  history_.assign(window_ticks_ * gpus, start_w);
  alpha_up_ = Alpha(scenario_.tick_s, scenario_.tau_up_s);
  alpha_down_ = Alpha(scenario_.tick_s, scenario_.tau_down_s);
  innovation_w_ = scenario_.noise_w * std::sqrt(1.0 - scenario_.noise_rho * scenario_.noise_rho);
  if (scenario_.idle_before_s + scenario_.startup_s > 0.0) {
    phase_ = Phase::kStartup;
    idle_before_left_s_ = scenario_.idle_before_s;
    phase_left_s_ = scenario_.startup_s;
  } else {
    BeginStep();
  }
}

int Twin::SetConcurrency(int concurrency) {
  if (!scenario_.has_rollout) return concurrency_;
  concurrency_ =
      std::clamp(concurrency, scenario_.concurrency_range.lo, scenario_.concurrency_range.hi);
  return concurrency_;
}

int Twin::SetGroupSize(int group_size) {
  if (!scenario_.has_rollout) return group_size_;
  group_size_ =
      std::clamp(group_size, scenario_.group_size_range.lo, scenario_.group_size_range.hi);
  return group_size_;
}

double Twin::SetPowerLimit(double limit_w) {
  power_limit_w_ = (limit_w <= 0.0 || limit_w >= scenario_.nameplate_w)
                       ? 0.0
                       : std::max(limit_w, scenario_.power_limit_min_w);
  return power_limit_w_;
}

double Twin::HoldNextStep(double hold_s) {
  pending_hold_s_ = std::isfinite(hold_s) ? std::max(0.0, hold_s) : 0.0;
  return pending_hold_s_;
}

void Twin::BeginStep() {
  if (pending_hold_s_ > kTimeEpsilon) {  // held at the boundary, then NextAfter(kIdle) begins
    const double hold_s = pending_hold_s_;
    pending_hold_s_ = 0.0;
    BeginFixedPhase(Phase::kIdle, hold_s, scenario_.idle_loaded_w);
    return;
  }
  if (standby_) {
    BeginFixedPhase(Phase::kIdle, kStandbySliceS, scenario_.idle_loaded_w);
    return;
  }
  step_group_size_ = group_size_;
  if (!scenario_.has_rollout) {
    step_tokens_ = scenario_.train_tokens_per_step * scenario_.gpus;
    BeginFixedPhase(Phase::kTrain, step_tokens_ / (scenario_.gpus * scenario_.train_tokens_per_s),
                    scenario_.train_power_w);
    return;
  }
  StartRollout();
  phase_ = Phase::kRollout;
}

void Twin::StartRollout() {
  // P prompts x G completions; a prompt's completions share an engine (and its prompt prefix).
  const size_t engines = engines_.size();
  std::vector<std::vector<double>> lengths(engines);
  const double log_median = std::log(scenario_.length_median_tokens);
  const uint64_t rollout = rollouts_started_++;
  step_tokens_ = 0.0;
  for (int p = 0; p < scenario_.prompts_per_step; ++p) {
    auto& mine = lengths[static_cast<size_t>(p) % engines];
    NormalPair pair{};
    for (int g = 0; g < step_group_size_; ++g) {
      // Completion g of prompt p of this rollout, the same for every controller on this seed:
      // completions 2k and 2k + 1 are the two normals of key (rollout, p, k).
      if (g % 2 == 0) {
        const uint64_t key = (static_cast<uint64_t>(p) << 32) | static_cast<uint64_t>(g / 2);
        pair = KeyedNormalPair(seed_, kLengthStream, rollout, key);
      }
      const double z = g % 2 == 0 ? pair.first : pair.second;
      const double drawn = std::exp(log_median + scenario_.length_sigma * z);
      const double length = std::clamp(std::round(drawn), 1.0, scenario_.max_new_tokens);
      mine.push_back(length);
      drawn_tokens_ += length;
      step_tokens_ += scenario_.prompt_tokens + length;
    }
  }
  const double prefill_per_sequence = scenario_.prompt_tokens / step_group_size_;
  for (size_t e = 0; e < engines; ++e)
    engines_[e].Start(std::move(lengths[e]), prefill_per_sequence);
}

void Twin::Follow(Phase phase, int step) {
  const bool new_rollout =
      phase == Phase::kRollout && (!following_ || phase_ != Phase::kRollout || step != steps_done_);
  following_ = true;
  if (new_rollout && scenario_.has_rollout) {
    step_group_size_ = group_size_;                 // the group size is taken at the step boundary
    for (RolloutEngine& e : engines_) e.Abandon();  // what the trainer left of its last one
    StartRollout();
  }
  phase_ = phase;
  steps_done_ = step;
}

void Twin::FollowWork(double dt) {
  const Phase phase = phase_;
  double occupancy = 0.0;
  if (phase == Phase::kRollout && scenario_.has_rollout && followed_in_flight_) {
    // The trainer says how many sequences it has in flight: that occupancy, not the twin's own
    // rollout, draws the power (issue 52: a real trainer's lengths and admission).
    const EngineRates rates{&scenario_.decode, scenario_.prefill_tokens_per_s,
                            scenario_.prefill_power_w, power_limit_w_, &scenario_.clock};
    const double n = std::min(*followed_in_flight_, static_cast<double>(kv_capacity_));
    const auto tick = RolloutEngine::Steady(dt, n, rates);
    for (size_t e = 0; e < engines_.size(); ++e) {
      for (int g = 0; g < scenario_.tp; ++g) {
        target_energy_[e * static_cast<size_t>(scenario_.tp) + static_cast<size_t>(g)] +=
            tick.power_w * dt;
      }
      tick_tokens_[e * static_cast<size_t>(scenario_.tp)] += tick.tokens;
    }
    occupancy = tick.occupancy;
  } else if (phase == Phase::kRollout && scenario_.has_rollout) {
    const EngineRates rates{&scenario_.decode, scenario_.prefill_tokens_per_s,
                            scenario_.prefill_power_w, power_limit_w_, &scenario_.clock};
    double remaining = dt;
    int empty = 0;
    while (remaining > kTimeEpsilon && empty <= kMaxEmptyPhases) {
      // The trainer still generates when a batch is done: the next one starts at once.
      bool all_done = true;
      for (const RolloutEngine& e : engines_) all_done = all_done && e.done();
      if (all_done) {
        StartRollout();
        ++empty;
        continue;
      }
      for (size_t e = 0; e < engines_.size(); ++e) {
        const auto tick = engines_[e].Advance(remaining, concurrency_, kv_capacity_, rates);
        for (int g = 0; g < scenario_.tp; ++g) {
          target_energy_[e * static_cast<size_t>(scenario_.tp) + static_cast<size_t>(g)] +=
              tick.power_w * remaining;
        }
        tick_tokens_[e * static_cast<size_t>(scenario_.tp)] += tick.tokens;
        occupancy += tick.occupancy / static_cast<double>(engines_.size());
      }
      remaining = 0.0;
    }
    if (remaining > kTimeEpsilon) AddUniform(scenario_.idle_loaded_w, remaining);
  } else {
    double full_w = scenario_.idle_loaded_w;  // idle, startup
    switch (phase) {
      case Phase::kRollout:  // a scenario without rollout: its compute
      case Phase::kTrain:
        full_w = scenario_.train_power_w;
        break;
      case Phase::kLogprob:
        full_w = scenario_.logprob_power_w;
        break;
      case Phase::kSync:
        full_w = scenario_.sync_power_w;
        break;
      case Phase::kCheckpoint:
        full_w = scenario_.checkpoint_power_w;
        break;
      case Phase::kStopped:
        full_w = scenario_.idle_w;
        break;
      case Phase::kIdle:
      case Phase::kStartup:
        break;
    }
    const bool works =
        phase != Phase::kIdle && phase != Phase::kStartup && phase != Phase::kStopped;
    const double w = works && power_limit_w_ > 0.0
                         ? scenario_.clock.Apply(full_w, power_limit_w_).power_w
                         : full_w;
    AddUniform(w, dt);
  }
  phase_time_[static_cast<size_t>(phase)] += dt;
  if (phase == Phase::kIdle) held_s_ += dt;
  tick_occupancy_ = occupancy;
}

void Twin::BeginFixedPhase(Phase phase, double work_s, double full_power_w) {
  phase_ = phase;
  phase_left_s_ = work_s;  // seconds of work at full clock
  phase_power_w_ = full_power_w;
}

void Twin::NextAfter(Phase finished, double at_s) {
  switch (finished) {
    case Phase::kStartup:
    case Phase::kCheckpoint:
      BeginStep();
      return;
    case Phase::kRollout:
      if (scenario_.logprob_passes > 0) {
        BeginFixedPhase(Phase::kLogprob,
                        step_tokens_ * scenario_.logprob_passes /
                            (scenario_.gpus * scenario_.logprob_tokens_per_s),
                        scenario_.logprob_power_w);
        return;
      }
      [[fallthrough]];
    case Phase::kLogprob:
      if (scenario_.has_train) {
        BeginFixedPhase(Phase::kTrain,
                        step_tokens_ / (scenario_.gpus * scenario_.train_tokens_per_s),
                        scenario_.train_power_w);
        return;
      }
      [[fallthrough]];
    case Phase::kTrain:
      if (scenario_.sync_s > 0.0) {
        BeginFixedPhase(Phase::kSync, scenario_.sync_s, scenario_.sync_power_w);
        return;
      }
      [[fallthrough]];
    case Phase::kSync:
      ++steps_done_;
      if (scenario_.checkpoint_every_steps > 0 &&
          steps_done_ % scenario_.checkpoint_every_steps == 0) {
        const bool slow = at_s >= slow_storage_from_s_;
        BeginFixedPhase(Phase::kCheckpoint,
                        slow ? scenario_.checkpoint_slow_s : scenario_.checkpoint_s,
                        scenario_.checkpoint_power_w);
        return;
      }
      BeginStep();
      return;
    case Phase::kIdle:  // a hold (HoldNextStep) has ended
      BeginStep();
      return;
    case Phase::kStopped:
      return;
  }
}

void Twin::AddUniform(double power_w, double duration_s) {
  for (double& e : target_energy_) e += power_w * duration_s;
}

void Twin::Tick() {
  const double dt = scenario_.tick_s;
  const int tp = scenario_.tp;
  std::fill(target_energy_.begin(), target_energy_.end(), 0.0);
  std::fill(tick_tokens_.begin(), tick_tokens_.end(), 0.0);
  phase_time_.fill(0.0);
  if (following_) {
    FollowWork(dt);
    Settle();
    return;
  }
  double occupancy = 0.0;
  double t_now = t_s();
  double remaining = dt;
  int empty_phases = 0;
  const EngineRates rates{&scenario_.decode, scenario_.prefill_tokens_per_s,
                          scenario_.prefill_power_w, power_limit_w_, &scenario_.clock};

  while (remaining > kTimeEpsilon) {
    const double until_stop = scenario_.stop_at_s ? *scenario_.stop_at_s - t_now
                                                  : std::numeric_limits<double>::infinity();
    if (phase_ != Phase::kStopped && until_stop <= kTimeEpsilon) phase_ = Phase::kStopped;
    const Phase phase = phase_;
    if (phase == Phase::kStopped) {
      AddUniform(scenario_.idle_w, remaining);
      phase_time_[static_cast<size_t>(phase)] += remaining;
      break;
    }
    const double span = std::min(remaining, until_stop);
    double used = 0.0;
    if (phase == Phase::kRollout) {
      bool all_done = true;
      for (size_t e = 0; e < engines_.size(); ++e) {
        const auto tick = engines_[e].Advance(span, concurrency_, kv_capacity_, rates);
        for (int g = 0; g < tp; ++g) target_energy_[e * tp + g] += tick.power_w * span;
        tick_tokens_[e * tp] += tick.tokens;  // an engine's tokens go to its first GPU
        occupancy += tick.occupancy / static_cast<double>(engines_.size());
        all_done = all_done && engines_[e].done();
      }
      used = span;
      if (all_done) NextAfter(Phase::kRollout, t_now + used);
    } else if (phase == Phase::kStartup) {
      if (idle_before_left_s_ > kTimeEpsilon) {  // before the job holds the GPUs
        used = std::min(span, idle_before_left_s_);
        AddUniform(scenario_.idle_w, used);
        idle_before_left_s_ -= used;
      } else {
        used = std::min(span, phase_left_s_);
        AddUniform(scenario_.idle_loaded_w, used);
        phase_left_s_ -= used;
      }
      if (idle_before_left_s_ <= kTimeEpsilon && phase_left_s_ <= kTimeEpsilon) {
        NextAfter(Phase::kStartup, t_now + used);
      }
    } else {
      // Work measured at full clock; a power limit stretches it.
      ClockCurve::Effect effect{1.0, phase_power_w_};
      // A hold is time, not work: a power limit does not stretch it.
      if (power_limit_w_ > 0.0 && phase != Phase::kIdle) {
        effect = scenario_.clock.Apply(phase_power_w_, power_limit_w_);
      }
      const double needed = phase_left_s_ * effect.time_factor;
      used = std::min(span, needed);
      AddUniform(effect.power_w, used);
      phase_left_s_ -= used / effect.time_factor;
      if (used >= needed - kTimeEpsilon) {
        phase_left_s_ = 0.0;
        NextAfter(phase, t_now + used);
      }
    }
    phase_time_[static_cast<size_t>(phase)] += used;
    if (phase == Phase::kIdle) held_s_ += used;
    remaining -= used;
    t_now += used;
    empty_phases = used > 0.0 ? 0 : empty_phases + 1;
    if (empty_phases > kMaxEmptyPhases) {
      // Nothing advances: hold the last level for the rest of the tick.
      AddUniform(scenario_.idle_loaded_w, remaining);
      break;
    }
  }

  tick_occupancy_ = occupancy;
  Settle();
}

void Twin::Settle() {
  const double dt = scenario_.tick_s;
  // Dynamics, noise, telemetry.
  const size_t gpus = target_energy_.size();
  const size_t slot = static_cast<size_t>(ticks_ % window_ticks_);
  const size_t filled = static_cast<size_t>(std::min<uint64_t>(ticks_ + 1, window_ticks_));
  double tick_energy = 0.0;
  double tick_tokens = 0.0;
  for (size_t g = 0; g < gpus; ++g) {
    const double target = target_energy_[g] / dt;
    double& lagged = lagged_w_[g];
    lagged += (target - lagged) * (target > lagged ? alpha_up_ : alpha_down_);
    // The innovation of (tick, GPU): ticks 2k and 2k + 1 take the two normals of key (k, GPU).
    double z;
    if (ticks_ % 2 == 0) {
      const NormalPair pair = KeyedNormalPair(seed_, kNoiseStream, ticks_ / 2, g);
      z = pair.first;
      noise_odd_tick_[g] = pair.second;
    } else {
      z = noise_odd_tick_[g];
    }
    noise_w_[g] = scenario_.noise_rho * noise_w_[g] + innovation_w_ * z;
    const double p = std::max(0.0, lagged + noise_w_[g]);
    power_w_[g] = p;
    history_[slot * gpus + g] = p;
    double sum = 0.0;
    for (size_t k = 0; k < filled; ++k) sum += history_[k * gpus + g];
    smoothed_w_[g] = sum / static_cast<double>(filled);
    tick_energy += p * dt;
    tick_tokens += tick_tokens_[g];
  }
  energy_j_ += tick_energy;
  tokens_total_ += tick_tokens;
  tick_phase_ = static_cast<Phase>(std::max_element(phase_time_.begin(), phase_time_.end()) -
                                   phase_time_.begin());
  ++ticks_;
}

double Twin::rollout_progress() const {
  if (phase_ != Phase::kRollout) return phase_ == Phase::kStartup ? 0.0 : 1.0;
  size_t total = 0;
  size_t finished = 0;
  for (const RolloutEngine& e : engines_) {
    total += e.sequences();
    finished += e.finished();
  }
  return total == 0 ? 1.0 : static_cast<double>(finished) / static_cast<double>(total);
}

}  // namespace headroom::twin
