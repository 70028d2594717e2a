#include "sim/episode.h"

#include <algorithm>

#include <cassert>

#include "analysis/window_stats.h"

namespace headroom::sim {

control::Inputs ToInputs(const twin::Observation& o, double interval_s) {
  control::Inputs in;
  in.t_s = o.t_s;
  in.interval_s = interval_s;
  in.budget_w = o.budget_w;
  in.smoothed_power_w = o.smoothed_power_w;
  in.phase = o.phase;  // one vocabulary
  in.step = o.step;
  in.rollout_progress = o.rollout_progress;
  in.concurrency = o.concurrency;
  in.group_size = o.group_size;
  in.next_group_size = o.next_group_size;
  in.power_limit_w = o.power_limit_w;
  in.tokens_total = o.tokens_total;
  return in;
}

control::ActuatorLimits LimitsOf(const twin::Scenario& s) {
  control::ActuatorLimits l;
  l.concurrency = {s.concurrency_range.lo, s.concurrency_range.hi};
  l.group_size = {s.group_size_range.lo, s.group_size_range.hi};
  l.nameplate_w = s.nameplate_w;
  l.power_limit_min_w = s.power_limit_min_w;
  l.power_limit_rise_w = control::kPowerLimitRisePerS * s.nameplate_w * s.interval_s;
  return l;
}

control::PolicyEnvelope EnvelopeOf(const twin::Scenario& s,
                                   std::pair<double, double> budget_range_w) {
  control::PolicyEnvelope e;
  e.scenario = s.name;
  e.budget_w = std::clamp(s.budget_w, budget_range_w.first, budget_range_w.second);
  e.budget_range_w = budget_range_w;
  e.limits = LimitsOf(s);
  e.concurrency = s.concurrency;
  e.group_size = s.group_size;
  e.admission = s.admission == twin::Admission::kChunked ? control::Admission::kChunked
                                                         : control::Admission::kContinuous;
  return e;
}

double UpdatePerGpuW(const twin::Scenario& s) {
  double w = 0.0;
  if (s.logprob_passes > 0) w = std::max(w, s.logprob_power_w);
  if (s.has_train) w = std::max(w, s.train_power_w);
  return w;
}

double FloorPerGpuW(const twin::Scenario& s) {
  double w = s.idle_loaded_w;
  if (s.logprob_passes > 0) w = std::max(w, s.logprob_power_w);
  if (s.has_train) w = std::max(w, s.train_power_w);
  if (s.sync_s > 0.0) w = std::max(w, s.sync_power_w);
  if (s.checkpoint_every_steps > 0) w = std::max(w, s.checkpoint_power_w);
  if (s.has_rollout) {
    w = std::max(w, s.decode.PowerW(static_cast<double>(s.concurrency_range.lo)));
  }
  return w;
}

control::Applied DefaultsOf(const twin::Scenario& s) {
  control::Applied a;
  a.concurrency = s.concurrency;
  a.group_size = s.group_size;
  return a;
}

EpisodeResult RunEpisode(const twin::Scenario& scenario, double budget_w, uint64_t seed,
                         control::Controller& controller, const EpisodeOptions& options) {
  assert(options.steps || options.horizon_s);
  twin::Environment env(scenario, budget_w);
  twin::Observation obs = env.Reset(seed);
  controller.Reset();
  const control::ActuatorLimits limits = LimitsOf(scenario);
  control::Applied applied = DefaultsOf(scenario);
  const double job_budget_w = budget_w * scenario.gpus;
  // The job's budget: budget x GPUs, fixed or moving.
  const analysis::BudgetSchedule job_schedule = options.budget != nullptr
                                                    ? options.budget->Scaled(scenario.gpus)
                                                    : analysis::BudgetSchedule();
  const auto window = [&](double w) {
    return options.budget != nullptr ? analysis::WindowStats(w, &job_schedule)
                                     : analysis::WindowStats(w, job_budget_w);
  };
  std::array<analysis::WindowStats, 3> stats = {
      window(kScoreWindowsS[0]), window(kScoreWindowsS[1]), window(kScoreWindowsS[2])};
  std::optional<analysis::SettleTracker> settle;
  if (options.budget != nullptr) settle.emplace(&job_schedule);
  const size_t gpus = static_cast<size_t>(scenario.gpus);
  const int ticks = env.ticks_per_interval();
  std::vector<double> t_buf(static_cast<size_t>(ticks));
  std::vector<double> p_buf(static_cast<size_t>(ticks));
  EpisodeResult r;
  uint64_t tick_index = 0;
  uint64_t intervals = 0;
  double concurrency_sum = 0.0;
  double group_sum = 0.0;
  uint64_t limited = 0;
  double depth_sum = 0.0;
  while (true) {
    if (options.steps && obs.step >= *options.steps) break;
    if (options.horizon_s && obs.t_s >= *options.horizon_s - 1e-9) break;
    if (options.budget != nullptr) obs.budget_w = options.budget->At(obs.t_s);
    const control::Inputs in = ToInputs(obs, scenario.interval_s);
    applied = control::ApplyLimits(limits, applied, controller.Decide(in));
    twin::Actuation act;
    act.concurrency = applied.concurrency;
    act.group_size = applied.group_size;
    act.power_limit_w = applied.power_limit_w;
    const twin::Environment::StepResult sr = env.Step(act);
    double interval_sum = 0.0;
    for (int k = 0; k < ticks; ++k) {
      double p = 0.0;
      for (size_t g = 0; g < gpus; ++g)
        p += sr.metrics.tick_power_w[static_cast<size_t>(k) * gpus + g];
      t_buf[static_cast<size_t>(k)] = static_cast<double>(tick_index++) * scenario.tick_s;
      p_buf[static_cast<size_t>(k)] = p;
      interval_sum += p;
    }
    for (auto& s : stats) s.AddBatch(t_buf.data(), p_buf.data(), t_buf.size());
    if (settle) settle->AddRun(t_buf.data(), p_buf.data(), t_buf.size());
    if (options.record_power) {
      r.power_w.push_back(static_cast<float>(interval_sum / ticks / static_cast<double>(gpus)));
      if (options.budget != nullptr) r.budget_w.push_back(static_cast<float>(in.budget_w));
      r.concurrency.push_back(static_cast<float>(applied.concurrency));
      r.group_size.push_back(static_cast<float>(sr.observation.group_size));
      r.power_limit_w.push_back(static_cast<float>(
          applied.power_limit_w > 0.0 ? std::min(applied.power_limit_w, scenario.nameplate_w)
                                      : scenario.nameplate_w));
    }
    r.tokens += sr.metrics.tokens;
    r.energy_j += sr.metrics.energy_j;
    concurrency_sum += applied.concurrency;
    group_sum += sr.observation.group_size;
    if (applied.power_limit_w > 0.0 && applied.power_limit_w < scenario.nameplate_w) {
      ++limited;
      depth_sum += (scenario.nameplate_w - applied.power_limit_w) / scenario.nameplate_w;
    }
    ++intervals;
    obs = sr.observation;
  }
  for (size_t i = 0; i < stats.size(); ++i) {
    stats[i].Finish(scenario.tick_s);
    r.windows[i] = stats[i].counted();
    r.violation_fraction[i] = stats[i].counted() > 0 ? static_cast<double>(stats[i].over_budget()) /
                                                           static_cast<double>(stats[i].counted())
                                                     : 0.0;
  }
  if (settle) {
    settle->Finish();
    r.settled_s = settle->settled_s();
    r.unsettled = settle->unsettled();
  }
  r.duration_s = obs.t_s;
  r.steps_done = obs.step;
  if (intervals > 0) {
    r.mean_concurrency = concurrency_sum / static_cast<double>(intervals);
    r.mean_group_size = group_sum / static_cast<double>(intervals);
    r.limit_fraction = static_cast<double>(limited) / static_cast<double>(intervals);
  }
  if (limited > 0) r.limit_depth = depth_sum / static_cast<double>(limited);
  return r;
}

}  // namespace headroom::sim
