// The digital twin of a GRPO training job's GPU power, advanced in ticks.
//
// A step: rollout (prefill bursts, then decode of P prompts x G completions on gpus/tp
// engines), log-prob / reference forward passes, the policy update, weight sync, and every N
// steps a checkpoint. Phase durations follow from work and throughput. Each GPU's true power
// follows its phase's target through a first-order lag (separate up and down time constants)
// plus AR(1) noise; the telemetry view is a moving average (NVML-like). Actuators: concurrency
// (now), group size (next step), and a hardware power limit (lower clocks for every phase,
// through the Perseus clock curve).
//
// Core logic only: no I/O, no clock. Deterministic for a scenario and a seed, with common random
// numbers: a completion's length is keyed by (seed, rollout, prompt, completion / 2) and a GPU's
// noise by (seed, tick / 2, GPU) (twin/keyed_random.h), so two controllers on one seed face the
// same completions and the same noise whatever they do. Not thread-safe; independent twins run in
// parallel threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/phase.h"

#include "twin/rollout.h"
#include "twin/scenario.h"

namespace headroom::twin {

// The job's phases: one vocabulary with the controllers and the agent's API (common/phase.h).
// The twin runs all but kIdle.
using headroom::Phase;
using headroom::PhaseName;
inline constexpr size_t kPhaseCount = headroom::kPhaseCount;

class Twin {
 public:
  Twin(const Scenario& scenario, uint64_t seed);

  // Actuators. Each clamps to its range and returns the value applied.
  int SetConcurrency(int concurrency);  // from the next tick (chunked admission: next chunk)
  int SetGroupSize(int group_size);     // from the next step
  // <= 0 or >= nameplate: no limit; otherwise clamped to [power_limit_min_w, nameplate].
  double SetPowerLimit(double limit_w);

  // Delays the start of the next step by `hold_s` (a site's staggering, docs/SITE.md): at the
  // step boundary the job waits in kIdle, its GPUs idle with the model loaded, then starts the
  // step. A later call replaces a hold not yet begun; 0 cancels it. Returns the hold pending.
  double HoldNextStep(double hold_s);
  // While on, no step begins: at each step boundary the job holds (idle, model loaded) in
  // slices of kStandbySliceS and looks again -- as a trainer whose site has not admitted it.
  void SetStandby(bool on) { standby_ = on; }
  static constexpr double kStandbySliceS = 0.5;

  // Rehearsal without GPUs (`headroom agent --source twin --twin-follows-trainer`): from the
  // first call on, the twin runs no step machine of its own. Its phase and step are the ones an
  // external trainer last reported, for as long as it reports them; its power is simulated for
  // that phase at the decided concurrency and power limit: rollout decodes batches of
  // prompts x group size (a new batch at each step, and whenever one is done while the trainer
  // still generates), the fixed phases draw their scenario power (stretched by a power limit as
  // ever), idle and startup the GPUs idle with the model loaded, stopped the GPUs idle.
  void Follow(Phase phase, int step);
  // The followed trainer's sequences in flight per engine, from its reports (none: the twin
  // simulates its own rollout at the decided concurrency). In rollout the twin then draws the
  // decode power and makes the tokens of that occupancy (capped at the KV capacity).
  void FollowInFlight(std::optional<double> per_engine) { followed_in_flight_ = per_engine; }
  bool following() const { return following_; }

  // Advances one tick.
  void Tick();

  // After the last tick.
  uint64_t ticks() const { return ticks_; }
  double t_s() const { return static_cast<double>(ticks_) * scenario_.tick_s; }
  Phase phase() const { return tick_phase_; }     // the phase that filled most of the tick
  Phase current_phase() const { return phase_; }  // the phase the next tick starts in
  int steps_done() const { return steps_done_; }
  const std::vector<double>& power_w() const { return power_w_; }          // true, per GPU
  const std::vector<double>& smoothed_w() const { return smoothed_w_; }    // telemetry view
  const std::vector<double>& tick_tokens() const { return tick_tokens_; }  // per GPU
  double mean_occupancy() const { return tick_occupancy_; }  // over engines, this tick
  // Finished sequences / sequences of this step's rollout (0 before it, 1 after it).
  double rollout_progress() const;

  int concurrency() const { return concurrency_; }
  int group_size() const { return step_group_size_; }  // in force this step
  int next_group_size() const { return group_size_; }
  double power_limit_w() const { return power_limit_w_; }  // 0: none

  double pending_hold_s() const { return pending_hold_s_; }
  double held_s() const { return held_s_; }      // time spent held, in all
  double energy_j() const { return energy_j_; }  // sum of true power x tick
  double tokens_total() const { return tokens_total_; }
  double drawn_tokens_total() const { return drawn_tokens_; }  // completion lengths drawn
  const Scenario& scenario() const { return scenario_; }
  // From when checkpoints take checkpoint_slow_s (infinity: never); drawn from the seed.
  double slow_storage_from_s() const { return slow_storage_from_s_; }

 private:
  void BeginStep();
  void StartRollout();         // a batch of prompts x the group size in force
  void FollowWork(double dt);  // one tick of the followed trainer's phase
  void Settle();               // dynamics, noise and telemetry of the tick's energy
  void BeginFixedPhase(Phase phase, double work_s, double full_power_w);
  void NextAfter(Phase finished, double at_s);  // at_s: when it finished
  void AddUniform(double power_w, double duration_s);

  const Scenario scenario_;
  const int kv_capacity_;
  const uint64_t seed_;               // every draw keyed by it (twin/keyed_random.h)
  const double slow_storage_from_s_;  // checkpoints beginning from then on are slow

  // Actuators.
  int concurrency_;
  int group_size_;
  int step_group_size_;
  double power_limit_w_ = 0.0;

  // The step machine.
  Phase phase_ = Phase::kStartup;
  double phase_left_s_ = 0.0;  // fixed-duration phases
  double idle_before_left_s_ = 0.0;
  double phase_power_w_ = 0.0;
  int steps_done_ = 0;
  double step_tokens_ = 0.0;  // prompt + completion tokens of this step's sequences
  std::vector<RolloutEngine> engines_;
  uint64_t ticks_ = 0;

  // Per GPU.
  std::vector<double> target_energy_;  // W x s over the tick being computed
  std::vector<double> lagged_w_;
  std::vector<double> noise_w_;
  std::vector<double> noise_odd_tick_;  // the second normal of an even tick's key
  std::vector<double> power_w_;
  std::vector<double> smoothed_w_;
  std::vector<double> tick_tokens_;
  std::vector<double> history_;  // telemetry ring: window ticks x gpus
  size_t window_ticks_ = 1;

  // Constants derived from the scenario.
  double alpha_up_ = 1.0;
  double alpha_down_ = 1.0;
  double innovation_w_ = 0.0;

  std::array<double, kPhaseCount> phase_time_{};
  Phase tick_phase_ = Phase::kStartup;
  double tick_occupancy_ = 0.0;
  double energy_j_ = 0.0;
  double tokens_total_ = 0.0;
  double drawn_tokens_ = 0.0;
  uint64_t rollouts_started_ = 0;  // the key of a rollout's completion lengths
  double pending_hold_s_ = 0.0;
  bool standby_ = false;
  double held_s_ = 0.0;
  std::optional<double> followed_in_flight_;  // per engine, from the followed trainer
  bool following_ = false;  // Follow() was called: the trainer's phases, not the step machine
};

}  // namespace headroom::twin
