// `headroom train`: the PPO meta-controller trained in the twin; the work is in sim/train.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli/budget_options.h"
#include "cli/commands.h"
#include "cli/output_files.h"
#include "cli/progress.h"
#include "cli/trace_options.h"
#include "common/atomic_file.h"
#include "common/paths.h"
#include "control/policy.h"
#include "report/eval_report.h"
#include "sim/checkpoint_select.h"
#include "sim/evaluate.h"
#include "sim/train.h"
#include "twin/scenario.h"

#include "cli/control_options.h"

namespace headroom::cli {
namespace {

struct TrainArgs {
  std::string scenario;
  std::optional<double> budget_w;
  bool site_range = false;
  long long timesteps = 0;
  uint64_t seed = 1;
  std::string out;
  std::string curve;
  double violation_target = 0.01;
  double cost_window_s = 0.5;
  int envs = 16;
  double moving_budget_fraction = 0.25;
  bool family = false;
  double entropy_coef = 0.001;
  std::string actuators = "concurrency,group_size";
  double learning_rate = 3e-4;
  int select_checkpoints = 0;
  int select_seeds = 4;
  int select_steps = 100;
};

Status RunTrain(const TrainArgs& args, const std::string& command_line) {
  sim::TrainConfig config;
  for (const std::string& name : SplitComma(args.scenario)) {
    auto s = twin::LoadScenario(name);
    if (!s) return std::move(s).error();
    if (!s->has_rollout) {
      return Error::Usage(fmt::format(
          "scenario '{}' has no rollout: a generation policy has nothing to steer there", s->name));
    }
    if (args.budget_w) {
      if (auto st = CheckBudget(*s, *args.budget_w); !st) return st;
      config.budget_ranges_w.emplace_back(*args.budget_w, *args.budget_w);
    } else if (args.site_range) {
      // What a site hands out: down to the job's floor there (its GPUs' lowest power limit,
      // the agent's floor with --guard-power-limit), up to the top of the scenario's range.
      config.budget_ranges_w.emplace_back(std::min(s->power_limit_min_w, s->budget_range_w.first),
                                          s->budget_range_w.second);
    } else {
      config.budget_ranges_w.push_back(s->budget_range_w);
    }
    config.scenarios.push_back(std::move(*s));
  }
  if (config.scenarios.empty()) return Error::Usage("--scenario: give at least one scenario");
  if (args.select_checkpoints > 0 && (config.scenarios.size() != 1 || args.budget_w)) {
    return Error::Usage(
        "--select-checkpoints: validates on one scenario at its own budgets: give one --scenario "
        "and no --budget-w");
  }
  if (args.select_checkpoints > 0 && std::abs(args.cost_window_s - 0.5) > 1e-9 &&
      std::abs(args.cost_window_s - 30.0) > 1e-9 && std::abs(args.cost_window_s - 300.0) > 1e-9) {
    return Error::Usage(
        "--select-checkpoints: scores in eval's windows: --cost-window-s must be 0.5, 30 or 300");
  }
  config.timesteps = args.timesteps;
  config.seed = args.seed;
  config.violation_target = args.violation_target;
  config.cost_window_s = args.cost_window_s;
  config.envs = args.envs;
  config.moving_budget_fraction = args.moving_budget_fraction;
  config.family = args.family;
  config.ppo.entropy_coef = args.entropy_coef;
  if (args.actuators == "group_size") {
    config.group_size_only = true;
  } else if (args.actuators == "concurrency") {
    config.fixed_group_size = true;
  } else if (args.actuators != "concurrency,group_size") {
    return Error::Usage(
        "--actuators: 'concurrency,group_size' (default), 'concurrency' (the group size fixed at "
        "the scenario's) or 'group_size'");
  }
  config.ppo.learning_rate = args.learning_rate;
  const std::string curve_path = !args.curve.empty()
                                     ? args.curve
                                     : (args.out.size() > 5 && args.out.ends_with(".json")
                                            ? args.out.substr(0, args.out.size() - 5) + ".curve.csv"
                                            : args.out + ".curve.csv");
  // Both outputs are checked and opened before training: a run of hours is not lost to an
  // unwritable directory, and nothing is replaced unless training ends.
  const auto inputs = ScenarioInputs("--scenario", args.scenario);
  if (auto st = RefuseOutputOverInput(args.out, "--out", inputs); !st) return st;
  if (auto st = RefuseOutputOverInput(curve_path, args.curve.empty() ? "--out's curve" : "--curve",
                                      inputs);
      !st) {
    return st;
  }
  if (auto st = RefuseOutputOverInput(curve_path, "--curve", {{"--out", args.out}}); !st) {
    return st;
  }
  RemoveTempFilesOnSignals();
  auto out_file = AtomicFileWriter::Open(args.out);
  if (!out_file) return std::move(out_file).error();
  auto curve_file = AtomicFileWriter::Open(curve_path);
  if (!curve_file) return std::move(curve_file).error();
  std::string curve =
      "iteration,timesteps,steps_per_s,return,tokens_reward,violation_rate,approx_kl,"
      "clip_fraction,explained_variance,entropy,multiplier\n";
  Progress progress("train", std::nullopt);
  const auto start = std::chrono::steady_clock::now();
  auto now_s = [start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  sim::IterationLog last;
  config.checkpoints = args.select_checkpoints;
  std::vector<control::Policy> snapshots;
  std::vector<sim::CheckpointScore> scores;
  std::vector<sim::ValidationBaseline> baselines;
  Status validation = OkStatus();
  const sim::ValidationConfig validation_config{args.select_seeds, args.select_steps, 1};
  const auto on_checkpoint = [&](const control::Policy& p, long long timesteps) {
    if (!validation) return;
    if (snapshots.empty()) {
      auto b = sim::ValidateBaselines(config.scenarios.front(), p, validation_config);
      if (!b) {
        validation = std::move(b).error();
        return;
      }
      baselines = std::move(*b);
    }
    auto score = sim::ValidateCheckpoint(config.scenarios.front(), p, timesteps, baselines,
                                         validation_config);
    if (!score) {
      validation = std::move(score).error();
      return;
    }
    snapshots.push_back(p);
    scores.push_back(*score);
  };
  control::Policy policy = sim::Train(
      config, now_s,
      [&](const sim::IterationLog& l) {
        curve += fmt::format(
            "{},{},{:.1f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", l.iteration,
            l.timesteps, l.steps_per_s, l.mean_reward, l.mean_tokens, l.violation_rate, l.approx_kl,
            l.clip_fraction, l.explained_variance, l.entropy, l.multiplier);
        progress.UpdateCount(static_cast<double>(l.timesteps), static_cast<double>(args.timesteps),
                             fmt::format("steps, violations {:.2f}%, lambda {:.2f}",
                                         100.0 * l.violation_rate, l.multiplier));
        last = l;
      },
      args.select_checkpoints > 0
          ? std::function<void(const control::Policy&, long long)>(on_checkpoint)
          : nullptr);
  if (!validation) return validation;
  std::string selection;
  if (!scores.empty()) {
    const size_t kept = sim::SelectCheckpoint(scores, config.violation_target);
    for (const sim::ValidationBaseline& b : baselines) {
      selection += fmt::format("  {:<18} {:<15} tokens {:>10.0f}, violations {:.3f}%\n", b.name,
                               sim::kValidationBudgets[b.budget], b.score.tokens,
                               100.0 * b.score.violation_fraction);
    }
    for (size_t i = 0; i < scores.size(); ++i) {
      const sim::CheckpointScore& c = scores[i];
      selection += fmt::format(
          "  ppo {:>11} steps: tokens {:.0f} / {:.0f}, violations {:.3f}% / {:.3f}%, dominates "
          "{}/{}{}\n",
          c.timesteps, c.budgets[0].tokens, c.budgets[1].tokens,
          100.0 * c.budgets[0].violation_fraction, 100.0 * c.budgets[1].violation_fraction,
          c.dominated, baselines.size(), i == kept ? "  <- kept" : "");
    }
    policy = std::move(snapshots[kept]);
  }
  policy.command = command_line;
  policy.trained_budget =
      (args.budget_w     ? fmt::format("{} W", *args.budget_w)
       : args.site_range ? std::string("a site's range: the lowest power limit to the top of "
                                       "each scenario's budget.range_w")
                         : std::string("each scenario's budget.range_w")) +
      (args.moving_budget_fraction > 0.0
           ? fmt::format("; moving in {:g}% of the episodes", 100.0 * args.moving_budget_fraction)
           : std::string());
  out_file->Write(control::PolicyToJson(policy));
  curve_file->Write(curve);
  if (auto st = out_file->Commit(); !st) return st;
  if (auto st = curve_file->Commit(); !st) return st;
  fmt::print("trained    {} steps in {:.1f} s ({} iterations)\n", last.timesteps, now_s(),
             last.iteration);
  fmt::print("last       violations {:.2f}% of intervals, tokens reward {:.3f}, lambda {:.2f}\n",
             100.0 * last.violation_rate, last.mean_tokens, last.multiplier);
  if (!selection.empty()) {
    fmt::print("validation seeds {}..{}, --steps {}, default budget / demand-response:\n{}",
               sim::kValidationSeed0,
               sim::kValidationSeed0 + static_cast<uint64_t>(args.select_seeds) - 1,
               args.select_steps, selection);
  }
  fmt::print("wrote      {}\ncurve      {}\n", args.out, curve_path);
  return OkStatus();
}

}  // namespace

Command SetupTrain(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  app.add_option("--scenario", args->scenario,
                 "Built-in scenario(s) or TOML file(s), comma-separated")
      ->required();
  app.add_option("--budget-w", args->budget_w,
                 "Train at this budget per GPU in W only, within the scenario's budget.range_w "
                 "(default: the scenario's budget range)")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_flag("--site-range", args->site_range,
               "Train over the budgets a site hands out: from the GPUs' lowest power limit (the "
               "job's floor in a site with --guard-power-limit) to the top of the scenario's "
               "budget.range_w")
      ->excludes("--budget-w");
  app.add_option("--timesteps", args->timesteps, "Control intervals to train on")
      ->required()
      ->check(Integer(1, 1000000000));
  app.add_option("--seed", args->seed, "Random seed")->check(Integer(0, kMaxSeed));
  app.add_option("--out", args->out, "Policy JSON to write")->required();
  app.add_option("--curve", args->curve, "Learning-curve CSV (default: OUT with .curve.csv)");
  app.add_option("--violation-target", args->violation_target,
                 "Constraint on the fraction of 0.5 s intervals over budget")
      ->check(Real(0.0, 1.0));
  app.add_option("--cost-window-s", args->cost_window_s,
                 "Window of the constraint: trailing mean power over it above budget (0.5: "
                 "each interval; 30: the paper's 72B scoring)")
      ->check(Real(0.001, 3600.0));
  app.add_option("--envs", args->envs, "Environments side by side")->check(Integer(1, 1024));
  app.add_option("--moving-budget-fraction", args->moving_budget_fraction,
                 "Share of the episodes whose budget moves (a new level in the range every "
                 "60-300 s)")
      ->check(Real(0.0, 1.0));
  app.add_flag("--family", args->family,
               "Randomise each episode over a wide family around its scenario (decode power and "
               "speed x0.85-1.15 / x0.8-1.25, update power and length, completion lengths, "
               "noise): one policy for machines it has not seen");
  app.add_option(
      "--actuators", args->actuators,
      "What the policy may move: concurrency,group_size (default), concurrency (group size "
      "fixed at the scenario's, as GRPO trainers configure it; the power limit "
      "moves) or group_size");
  app.add_option("--entropy-coef", args->entropy_coef, "PPO entropy bonus")->check(Real(0.0, 1.0));
  app.add_option("--learning-rate", args->learning_rate, "Adam learning rate")
      ->check(Real(1e-7, 1.0));
  app.add_option("--select-checkpoints", args->select_checkpoints,
                 "Checkpoint selection: score this many snapshots of the last half of training on "
                 "validation episodes (seeds 2001.., default budget and demand-response) beside "
                 "static-safe, power-cap and pid; keep, within the violation target, the one "
                 "that dominates the most of them, then the most tokens; else the fewest "
                 "violations (0: keep the last)")
      ->check(Integer(0, 64));
  app.add_option("--select-seeds", args->select_seeds, "Validation episodes per budget")
      ->check(Integer(1, 100));
  app.add_option("--select-steps", args->select_steps,
                 "Validation horizon: the uncontrolled trainer's time for this many steps")
      ->check(Integer(1, 100000));
  return [args, &app] {
    std::string line = "headroom train";
    for (const auto& o : app.get_options()) {
      if (o->count() == 0 || o->get_name() == "--help") continue;
      line += " " + o->get_name();
      // A flag is its name alone ("--family true" would not parse back).
      if (o->get_items_expected_max() == 0) continue;
      for (const auto& r : o->results()) line += " " + r;
    }
    return RunTrain(*args, line);
  };
}

}  // namespace headroom::cli
