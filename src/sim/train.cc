#include "sim/train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>

#include "analysis/budget_schedule.h"
#include "control/factory.h"
#include "control/features.h"
#include "rl/normalizer.h"
#include "rl_train/gae.h"
#include "sim/episode.h"
#include "twin/environment.h"

namespace headroom::sim {

namespace {

// A controller that returns what it was last told: the sampled action, for the shield to wrap.
class FixedCommand final : public control::Controller {
 public:
  std::string_view name() const override { return "sampled"; }
  control::Command Decide(const control::Inputs&) override { return command; }
  control::Command command;
};

struct ScenarioInfo {
  double token_scale = 1.0;  // uncontrolled tokens per interval
  double step_s = 60.0;      // uncontrolled seconds per step
  std::pair<double, double> budget_w;
};

ScenarioInfo Measure(const twin::Scenario& base, std::pair<double, double> budget_w) {
  twin::Scenario s = base;
  s.idle_before_s = 0.0;
  s.startup_s = 0.0;
  s.stop_at_s.reset();
  control::Uncontrolled u(s.concurrency, s.group_size);
  EpisodeOptions o;
  o.steps = 12;
  const EpisodeResult r = RunEpisode(s, s.budget_w, 999, u, o);
  ScenarioInfo info;
  const double intervals = std::max(1.0, r.duration_s / s.interval_s);
  info.token_scale = std::max(1.0, r.tokens / intervals);
  info.step_s = r.duration_s / std::max(1, r.steps_done);
  info.budget_w = budget_w;
  return info;
}

// Per episode: the scenario with its powers, lengths and noise drawn around their values. The
// family (TrainConfig::family) widens every range and adds decode speed and the update's length,
// so that one policy meets machines it has not seen (docs/CONTROL.md, "One policy for new
// machines").
twin::Scenario Randomize(const twin::Scenario& base, std::mt19937_64& rng, bool family) {
  auto u = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  twin::Scenario s = base;
  s.idle_before_s = 0.0;
  s.startup_s = 0.0;
  s.stop_at_s.reset();
  const double decode = family ? u(0.85, 1.15) : u(0.96, 1.04);
  s.decode.power_w.b0 *= decode;
  s.decode.power_w.l *= decode;
  const double compute = family ? u(0.9, 1.1) : u(0.97, 1.03);
  s.logprob_power_w = std::min(s.nameplate_w, s.logprob_power_w * compute);
  s.train_power_w = std::min(s.nameplate_w, s.train_power_w * compute);
  s.prefill_power_w = std::min(s.nameplate_w, s.prefill_power_w * compute);
  s.length_median_tokens *= family ? u(0.6, 1.6) : u(0.8, 1.25);
  s.noise_w *= family ? u(0.5, 2.0) : u(0.5, 1.5);
  if (family) {
    const double speed = u(0.8, 1.25);  // decode throughput at every occupancy
    s.decode.tokens_per_s.b0 *= speed;
    s.decode.tokens_per_s.l *= speed;
    const double update = u(0.7, 1.4);  // the update's length: its throughput divided
    s.logprob_tokens_per_s /= update;
    s.train_tokens_per_s /= update;
  }
  return s;
}

struct Env {
  size_t scenario_index = 0;
  twin::Scenario scenario;
  double budget_w = 0.0;
  std::optional<analysis::BudgetSchedule> plan;  // a budget that moves (per GPU)
  std::vector<double> decreases_s;               // the plan's decreases
  double token_scale = 1.0;
  std::optional<twin::Environment> env;
  twin::Observation obs;
  control::ActuatorLimits limits;
  control::Applied applied;
  control::FeatureState features;
  FixedCommand sampled;
  std::unique_ptr<control::Shield> shield;
  std::vector<double> recent_w;  // ring of interval job powers over the cost window
  size_t recent_next = 0;
  double recent_sum = 0.0;
  int t = 0;
};

}  // namespace

std::vector<int> CheckpointIterations(int iterations, int checkpoints) {
  std::vector<int> out;
  if (checkpoints <= 0 || iterations <= 0) return out;
  const int half = std::max(1, iterations / 2);
  for (int j = checkpoints - 1; j >= 0; --j) {
    // j = 0 is the last iteration; j = checkpoints - 1 is `half` iterations before it.
    const int at =
        iterations - (checkpoints > 1
                          ? static_cast<int>(static_cast<long long>(half) * j / (checkpoints - 1))
                          : 0);
    if (at >= 1 && (out.empty() || at > out.back())) out.push_back(at);
  }
  return out;
}

control::Policy Train(
    const TrainConfig& config, const std::function<double()>& now_s,
    const std::function<void(const IterationLog&)>& log,
    const std::function<void(const control::Policy&, long long timesteps)>& checkpoint) {
  std::mt19937_64 rng(config.seed);
  std::vector<ScenarioInfo> info;
  for (size_t i = 0; i < config.scenarios.size(); ++i) {
    const auto range = i < config.budget_ranges_w.size() ? config.budget_ranges_w[i]
                                                         : config.scenarios[i].budget_range_w;
    info.push_back(Measure(config.scenarios[i], range));
  }
  const int E = config.envs;
  const int T = config.steps_per_env;
  const Eigen::Index N = static_cast<Eigen::Index>(E) * T;
  const int F = control::kFeatureCount;
  const std::vector<int> heads{control::kConcurrencyMoves, control::kGroupLevels,
                               control::kPowerLimitLevels};

  control::Policy policy;
  policy.net = rl::ActorCritic(F, heads, config.hidden, config.seed);
  policy.normalizer = rl::Normalizer(F);
  rl::PpoTrainer trainer(&policy.net, config.ppo, config.seed + 1);

  std::vector<std::unique_ptr<Env>> envs;
  // The observation carries the budget in force at its time.
  const auto in_force = [](Env& e) {
    if (e.plan) e.obs.budget_w = e.plan->At(e.obs.t_s);
  };
  auto start_episode = [&](Env& e) {
    e.scenario_index = std::uniform_int_distribution<size_t>(0, config.scenarios.size() - 1)(rng);
    const ScenarioInfo& si = info[e.scenario_index];
    e.scenario = Randomize(config.scenarios[e.scenario_index], rng, config.family);
    const auto uniform = [&](double lo, double hi) {
      return std::uniform_real_distribution<double>(lo, hi)(rng);
    };
    e.budget_w = uniform(si.budget_w.first, si.budget_w.second);
    e.plan.reset();
    if (uniform(0.0, 1.0) < config.moving_budget_fraction) {
      // A new level every 30-120 s over the episode (and its warm start), on control intervals.
      analysis::BudgetSchedule plan;
      plan.Append(0.0, e.budget_w);
      const double interval_s = e.scenario.interval_s;
      const double horizon_s =
          (config.episode_intervals + 1.5 * si.step_s / interval_s + 1.0) * interval_s;
      for (double t = uniform(60.0, 300.0); t < horizon_s; t += uniform(60.0, 300.0)) {
        plan.Append(std::round(t / interval_s) * interval_s,
                    uniform(si.budget_w.first, si.budget_w.second));
      }
      e.decreases_s = plan.DecreasesAt();
      e.plan = std::move(plan);
    }
    e.token_scale = si.token_scale;
    e.env.emplace(e.scenario, e.budget_w);
    e.obs = e.env->Reset(rng());
    e.limits = LimitsOf(e.scenario);
    e.applied = DefaultsOf(e.scenario);
    e.features.Reset();
    // The shield the policy will run in (control/factory.h): none for a group-size-only one.
    e.shield = control::ShieldForPolicy(e.sampled, config.shield, config.cost_window_s,
                                        config.group_size_only, e.scenario.interval_s,
                                        e.limits.concurrency);
    if (e.shield) e.shield->Reset();
    e.t = 0;
    e.recent_w.assign(static_cast<size_t>(
                          std::max(1L, std::lround(config.cost_window_s / e.scenario.interval_s))),
                      0.0);
    e.recent_next = 0;
    e.recent_sum = 0.0;
    // A random start within the first 1.5 steps, at the trainer's defaults.
    const int warm = std::uniform_int_distribution<int>(
        0, static_cast<int>(1.5 * si.step_s / e.scenario.interval_s))(rng);
    twin::Actuation defaults;
    for (int k = 0; k < warm; ++k) e.obs = e.env->Step(defaults).observation;
    in_force(e);
  };
  for (int i = 0; i < E; ++i) {
    envs.push_back(std::make_unique<Env>());
    start_episode(*envs.back());
  }

  Eigen::MatrixXd raw(F, N);
  rl::Batch batch;
  batch.obs.resize(F, N);
  batch.actions.resize(control::kActionHeads, N);
  batch.logp_old.resize(N);
  batch.values_old.resize(N);
  batch.advantages.resize(N);
  batch.returns.resize(N);
  Eigen::VectorXd rewards(N), token_part(N), costs(N), rated(N), next_values(N);
  std::vector<unsigned char> cut(static_cast<size_t>(N));

  double lambda = config.lagrange_init;
  double integral = config.lagrange_init;
  const long long per_iteration = static_cast<long long>(N);
  const int iterations = static_cast<int>(
      std::max<long long>(1, (config.timesteps + per_iteration - 1) / per_iteration));
  std::mt19937_64 sample_rng(config.seed + 2);
  Eigen::MatrixXd x(F, E);
  Eigen::VectorXd one(F);
  std::vector<Eigen::VectorXd> scratch;
  Eigen::VectorXd value_out;

  auto value_of = [&](Env& e) {
    control::FeatureState copy = e.features;
    copy.Compute(ToInputs(e.obs, e.scenario.interval_s), e.limits, one.data());
    policy.net.critic().ForwardOne(policy.normalizer.Apply(one), &value_out, &scratch);
    return value_out(0);
  };

  const auto describe = [&](control::Policy& p, long long timesteps) {
    p.trained_on.clear();
    p.envelopes.clear();
    for (size_t i = 0; i < config.scenarios.size(); ++i) {
      const twin::Scenario& s = config.scenarios[i];
      p.trained_on.push_back(s.name);
      p.envelopes.push_back(EnvelopeOf(
          s, i < config.budget_ranges_w.size() ? config.budget_ranges_w[i] : s.budget_range_w));
    }
    p.violation_target = config.violation_target;
    p.cost_window_s = config.cost_window_s;
    p.group_size_only = config.group_size_only;
    p.fixed_group_size = config.fixed_group_size;
    p.shield = config.shield;
    p.timesteps = timesteps;
    p.seed = config.seed;
  };
  const std::vector<int> checkpoint_at =
      checkpoint ? CheckpointIterations(iterations, config.checkpoints) : std::vector<int>{};
  size_t next_checkpoint = 0;

  for (int it = 0; it < iterations; ++it) {
    const double t0 = now_s();
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < E; ++i) {
        Env& e = *envs[static_cast<size_t>(i)];
        e.features.Compute(ToInputs(e.obs, e.scenario.interval_s), e.limits, x.col(i).data());
      }
      const Eigen::MatrixXd xn = policy.normalizer.ApplyBatch(x);
      rl::Mlp::Cache ac, cc;
      policy.net.actor().Forward(xn, &ac);
      policy.net.critic().Forward(xn, &cc);
      for (int i = 0; i < E; ++i) {
        Env& e = *envs[static_cast<size_t>(i)];
        const Eigen::Index k = static_cast<Eigen::Index>(i) * T + t;
        raw.col(k) = x.col(i);
        batch.obs.col(k) = xn.col(i);
        int a[control::kActionHeads];
        batch.logp_old(k) = rl::Sample(heads, ac.a.back().col(i).data(), sample_rng, a);
        for (int h = 0; h < control::kActionHeads; ++h) batch.actions(h, k) = a[h];
        batch.values_old(k) = cc.a.back()(0, i);
        e.sampled.command =
            control::CommandFromActions(e.limits, a, e.obs.concurrency, e.obs.budget_w);
        if (config.group_size_only) {
          e.sampled.command.concurrency.reset();
          e.sampled.command.power_limit_w.reset();
        }
        if (config.fixed_group_size) e.sampled.command.group_size.reset();
        const control::Inputs in = ToInputs(e.obs, e.scenario.interval_s);
        e.applied = control::ApplyLimits(e.limits, e.applied,
                                         e.shield ? e.shield->Decide(in) : e.sampled.Decide(in));
        twin::Actuation act;
        act.concurrency = e.applied.concurrency;
        act.group_size = e.applied.group_size;
        act.power_limit_w = e.applied.power_limit_w;  // the shield's backstop, as in use
        const twin::Environment::StepResult sr = e.env->Step(act);
        const size_t gpus = static_cast<size_t>(e.scenario.gpus);
        double job_w = 0.0;
        for (size_t g = 0; g < gpus; ++g) job_w += sr.metrics.mean_power_w[g];
        e.recent_sum += job_w - e.recent_w[e.recent_next];
        e.recent_w[e.recent_next] = job_w;
        e.recent_next = (e.recent_next + 1) % e.recent_w.size();
        const double window_w =
            e.recent_sum /
            static_cast<double>(std::min<size_t>(e.recent_w.size(), static_cast<size_t>(e.t + 1)));
        const double cost = window_w > in.budget_w * static_cast<double>(gpus) ? 1.0 : 0.0;
        const double tok = sr.metrics.tokens / e.token_scale;
        token_part(k) = tok;
        costs(k) = cost;
        // Right after a decrease the shield brings the power down; an excess there is priced in
        // the reward but left out of the rate the multiplier follows, which would otherwise
        // grow with how often the budget falls and make the policy timid everywhere.
        bool settling = false;
        for (double d : e.decreases_s) {
          settling = settling || (in.t_s >= d && in.t_s < d + config.shield.settle_s);
        }
        rated(k) = settling ? 0.0 : 1.0;
        rewards(k) = tok - lambda * cost;
        e.obs = sr.observation;
        in_force(e);
        ++e.t;
        cut[static_cast<size_t>(k)] = 0;
        if (e.t >= config.episode_intervals) {
          cut[static_cast<size_t>(k)] = 1;
          next_values(k) = value_of(e);
          start_episode(e);
        } else if (t + 1 == T) {
          next_values(k) = value_of(e);
        }
      }
    }
    policy.normalizer.Update(raw);
    for (int i = 0; i < E; ++i) {
      const Eigen::Index o = static_cast<Eigen::Index>(i) * T;
      const size_t n = static_cast<size_t>(T);
      rl::Gae({rewards.data() + o, n}, {batch.values_old.data() + o, n},
              {next_values.data() + o, n}, {cut.data() + o, n}, config.gamma, config.gae_lambda,
              {batch.advantages.data() + o, n}, {batch.returns.data() + o, n});
    }
    const rl::UpdateStats us = trainer.Update(batch);
    const double elapsed = now_s() - t0;

    const double rated_n = rated.sum();
    const double rate = rated_n > 0.0 ? costs.cwiseProduct(rated).sum() / rated_n : 0.0;
    const double err = std::clamp(
        (rate - config.violation_target) / std::max(config.violation_target, 1e-6), -1.0, 4.0);
    integral = std::clamp(integral + config.lagrange_ki * err, 0.0, config.lagrange_max);
    IterationLog l;
    l.iteration = it + 1;
    l.timesteps = per_iteration * (it + 1);
    l.steps_per_s = elapsed > 0.0 ? static_cast<double>(per_iteration) / elapsed : 0.0;
    l.mean_reward = rewards.mean();
    l.mean_tokens = token_part.mean();
    l.violation_rate = rate;
    l.approx_kl = us.approx_kl;
    l.clip_fraction = us.clip_fraction;
    l.explained_variance = us.explained_variance;
    l.entropy = us.entropy;
    l.multiplier = lambda;
    lambda = std::clamp(config.lagrange_kp * err + integral, 0.0, config.lagrange_max);
    if (log) log(l);
    if (next_checkpoint < checkpoint_at.size() && checkpoint_at[next_checkpoint] == it + 1) {
      ++next_checkpoint;
      control::Policy snapshot = policy;
      describe(snapshot, l.timesteps);
      checkpoint(snapshot, l.timesteps);
    }
  }
  describe(policy, per_iteration * iterations);
  return policy;
}

}  // namespace headroom::sim
