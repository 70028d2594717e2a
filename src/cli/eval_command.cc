// `headroom eval`: controllers side by side on the same seeds; the work is in sim/evaluate.
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

struct EvalArgs {
  std::string scenario;
  std::optional<double> budget_w;
  std::string budget_schedule;
  std::string controllers;
  std::string policy;
  int seeds = 10;
  int steps = 500;
  std::string horizon = "time";
  double violation_target = 0.01;
  int threads = 2;
  bool json = false;
  std::string report;
};

Status RunEval(const EvalArgs& args) {
  if (!args.report.empty()) {
    auto inputs = ScenarioInputs("--scenario", args.scenario);
    inputs.emplace_back("--policy", args.policy);
    if (auto st = RefuseOutputOverInput(args.report, "--report", inputs); !st) return st;
    RemoveTempFilesOnSignals();
  }
  auto scenario = twin::LoadScenario(args.scenario);
  if (!scenario) return std::move(scenario).error();
  std::vector<std::string> names = SplitComma(args.controllers);
  if (names.empty()) {
    names = {"uncontrolled", "static-safe", "power-cap", "pid"};
    if (!args.policy.empty()) names.push_back("ppo");
  }
  for (const std::string& n : names) {
    if (std::find(sim::kControllerNames.begin(), sim::kControllerNames.end(), n) ==
        sim::kControllerNames.end()) {
      return Error::Usage(fmt::format(
          "--controllers: unknown controller '{}' (known: uncontrolled, static-safe, power-cap, "
          "pid, ppo; with a moving budget static-safe-lowest, static-oracle)",
          n));
    }
  }
  const bool want_ppo = std::find(names.begin(), names.end(), "ppo") != names.end();
  if (want_ppo && args.policy.empty())
    return Error::Usage("--controllers: 'ppo' needs --policy FILE");
  if (!scenario->has_rollout) {
    return Error::Usage(fmt::format(
        "scenario '{}' has no rollout: these controllers steer generation, there is none to steer",
        scenario->name));
  }
  std::optional<sim::BudgetPlanSpec> schedule;
  if (!args.budget_schedule.empty()) {
    auto spec = ParseBudgetPlan(args.budget_schedule);
    if (!spec) return std::move(spec).error();
    schedule = std::move(*spec);
  }
  // Under a generated schedule the base is the top of the scenario's range unless given.
  const bool generated = schedule && schedule->kind != sim::BudgetPlanKind::kFile;
  const double budget_w =
      args.budget_w.value_or(generated ? scenario->budget_range_w.second : scenario->budget_w);
  if (auto st = CheckBudget(*scenario, budget_w); !st) return st;
  for (const std::string& n : names) {
    if (sim::NeedsSchedule(n) && !schedule) {
      return Error::Usage(fmt::format(
          "--controllers: '{}' is a reference for a moving budget: give --budget-schedule", n));
    }
  }
  std::optional<control::Policy> policy;
  if (want_ppo) {
    auto p = control::LoadPolicy(args.policy);
    if (!p) return std::move(p).error();
    policy = std::move(*p);
  }
  sim::EvalConfig config;
  config.scenario = *scenario;
  config.budget_w = budget_w;
  config.seeds = args.seeds;
  config.steps = args.steps;
  auto horizon = sim::ParseHorizon(args.horizon);
  if (!horizon) return std::move(horizon).error();
  config.horizon = *horizon;
  config.controllers = names;
  config.policy = policy ? &*policy : nullptr;
  config.violation_target = args.violation_target;
  config.threads = args.threads;
  config.record_power = !args.report.empty();
  config.schedule = schedule;
  Progress progress("eval " + scenario->name, std::nullopt);
  config.progress = [&](const std::string& what, int done, int total) {
    progress.UpdateCount(done, total, what);
  };
  auto result = sim::Evaluate(config);
  if (!result) return std::move(result).error();
  const double interval_s = scenario->interval_s;
  return EmitResult(args.report, args.json,
                    {[&] { return report::EvalReportHtml(*result, interval_s); },
                     [&] { return report::EvalToJson(*result).dump(2); },
                     [&] { return report::EvalToText(*result); }});
}

// ---- train ---------------------------------------------------------------------------------

}  // namespace

Command SetupEval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  app.add_option("--scenario", args->scenario, "Built-in scenario name or TOML file")->required();
  app.add_option("--budget-w", args->budget_w,
                 "Budget per GPU in W, within the scenario's budget.range_w (default: the "
                 "scenario's)")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option("--budget-schedule", args->budget_schedule, kBudgetPlanHelp);
  app.add_option("--controllers", args->controllers,
                 "Comma-separated: uncontrolled,static-safe,power-cap,pid,ppo (default: all; ppo "
                 "with --policy)");
  app.add_option("--policy", args->policy, "Policy JSON for ppo (headroom train)");
  app.add_option("--seeds", args->seeds, "Evaluation seeds (1..N)")->check(Integer(1, 1000));
  app.add_option("--steps", args->steps,
                 "Horizon: the time the uncontrolled trainer takes for this many steps (--horizon "
                 "time), or exactly this many steps (--horizon steps)")
      ->check(Integer(1, 100000));
  app.add_option("--horizon", args->horizon,
                 "time: every controller runs as long as the uncontrolled trainer's --steps "
                 "take; steps: every controller runs --steps steps (the source paper's framing)")
      ->capture_default_str();
  app.add_option("--violation-target", args->violation_target,
                 "0.5 s violation fraction static-safe and pid must meet")
      ->check(Real(0.0, 1.0));
  app.add_option("--threads", args->threads, "Worker threads")->check(Integer(1, 256));
  app.add_flag("--json", args->json, "Print JSON");
  app.add_option("--report", args->report, "Write an HTML report");
  return [args] { return RunEval(*args); };
}

}  // namespace headroom::cli
