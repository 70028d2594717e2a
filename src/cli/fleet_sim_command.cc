// `headroom fleet-sim`: a coordinator and twin-mode agents in one process, over the in-memory
// store or a real etcd (docs/SITE.md). Thin: options, the store, progress, the outputs.
#include <fmt/format.h>

#include <filesystem>

#include "cli/budget_options.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/scheduling_options.h"
#include "cli/trace_options.h"
#include "cli_main/etcd_options.h"
#include "common/atomic_file.h"
#include "common/install_paths.h"
#include "common/paths.h"
#include "etcd/etcd_store.h"
#include "site_sim/fleet_sim.h"
#include "site_sim/fleet_sim_report.h"

namespace headroom::cli {
namespace {

struct FleetSimArgs {
  std::string jobs = "a100-72b-tp4:2,a100-14b-tp2:2,a100-7b-tp1:4";
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
  double speed = 20.0;
  double duration_s = 3600.0;
  uint64_t seed = 1;
  std::string etcd;
  EtcdOptions etcd_options;
  bool json = false;
  std::string report;
  std::string policies;  // the installed policies/ or the source tree's (common/install_paths.h)
  std::string controller = "ppo";
  double period_s = 1.0;
  int64_t lease_ttl_s = 3;
  bool verbose = false;
  SchedulingArgs scheduling;
  std::string offsets = "aligned";
  std::string job_control = "on";
  bool guard_power_limit = false;
  std::string site_budget_schedule;
  double notice_s = 10.0;
  site_sim::OpportunisticConfig opportunistic;
  double loan_lead_s = 0.0;
  double loan_cover = 0.5;
  double loan_margin = 0.05;
  std::string power_csv;
};

Status RunFleetSimCommand(const FleetSimArgs& args) {
  auto jobs = site_sim::ParseFleetJobs(args.jobs);
  if (!jobs) return std::move(jobs).error();
  if (args.reserve_w >= args.site_budget_w) {
    return Error::Usage(fmt::format("--reserve-w {} W: expected below --site-budget-w {} W",
                                    args.reserve_w, args.site_budget_w));
  }
  if (args.controller != "ppo" && args.controller != "pid") {
    return Error::Usage(fmt::format("--controller: unknown '{}' (ppo, pid)", args.controller));
  }
  if (!args.policies.empty() && !std::filesystem::is_directory(args.policies)) {
    return Error::Usage(fmt::format("--policies '{}': not a directory", args.policies));
  }
  if (!args.report.empty()) {
    if (auto st = RefuseOutputOverInput(args.report, "--report", {{"--policies", args.policies}});
        !st) {
      return st;
    }
  }
  site_sim::FleetSimConfig config;
  config.jobs = std::move(*jobs);
  config.site_budget_w = args.site_budget_w;
  config.reserve_w = args.reserve_w;
  config.duration_s = args.duration_s;
  config.speed = args.speed;
  config.seed = args.seed;
  config.period_s = args.period_s;
  config.lease_ttl_s = args.lease_ttl_s;
  config.controller = args.controller;
  config.policies_dir = args.policies;
  ApplyScheduling(args.scheduling, &config);
  config.random_offsets = args.offsets == "random";
  config.job_control = args.job_control == "on";
  config.guard_power_limit = args.guard_power_limit;
  config.opportunistic = args.opportunistic;
  config.loan_lead_s = args.loan_lead_s;
  config.loan_cover = args.loan_cover;
  config.loan_margin = args.loan_margin;
  if (args.guard_power_limit && !config.job_control) {
    return Error::Usage(
        "--guard-power-limit: needs --job-control on (off, the limit is all there is)");
  }
  if (!args.site_budget_schedule.empty()) {
    auto spec = ParseBudgetPlan(args.site_budget_schedule, 1e9);
    if (!spec) return std::move(spec).error();
    // Generators move around --site-budget-w, never below half of it.
    const sim::BudgetPlan plan = sim::MakeBudgetPlan(*spec, args.site_budget_w,
                                                     {0.5 * args.site_budget_w, args.site_budget_w},
                                                     args.duration_s, args.seed, config.interval_s);
    for (const auto& p : plan.per_gpu_w.points()) {
      if (p.t_s <= 0.0 && p.budget_w == args.site_budget_w) continue;  // where it starts
      config.schedule.push_back({p.t_s, p.budget_w, args.notice_s});
    }
  }
  std::unique_ptr<etcd::EtcdStore> etcd;
  if (!args.etcd.empty()) {
    auto opened = OpenEtcd(args.etcd, "--etcd", 2.0, args.etcd_options);
    if (!opened) return std::move(opened).error();
    etcd = std::move(*opened);
  }
  Progress progress("fleet-sim", std::nullopt);
  const auto log = [&](const std::string& line) {
    if (args.verbose) fmt::print(stderr, "headroom fleet-sim: {}\n", line);
  };
  auto result = site_sim::RunFleetSim(
      config, etcd.get(), etcd ? "etcd" : "memory",
      [&](double done_s, double total_s) { progress.UpdateCount(done_s, total_s, "simulated s"); },
      log);
  if (!result) return std::move(result).error();
  const auto& r = *result;
  if (!args.power_csv.empty()) {
    // The site's true power per second (what spare power traces are made of).
    std::string csv = "t_s,site_power_w,site_budget_w,opportunistic_w\n";
    const auto& run = r.site;
    for (size_t i = 0; i < run.t_s.size(); ++i) {
      csv += fmt::format("{:.1f},{:.3f},{:.3f},{:.3f}\n", run.t_s[i], run.site_power_w[i],
                         i < run.budget_w.size() ? run.budget_w[i] : r.site_budget_w,
                         i < run.opportunistic.power_w.size() ? run.opportunistic.power_w[i] : 0.0);
    }
    if (auto st = WriteFileAtomically(args.power_csv, csv); !st) return st;
  }
  return EmitResult(args.report, args.json,
                    {[&] { return site_sim::FleetSimReportHtml(r, args.seed); },
                     [&] { return site_sim::FleetSimToJson(r, args.seed).dump(2); },
                     [&] { return site_sim::FleetSimToText(r); }});
}

}  // namespace

Command SetupFleetSim(CLI::App& app) {
  auto a = std::make_shared<FleetSimArgs>();
  app.add_option("--jobs", a->jobs, "SCENARIO:COUNT,... (the paper's 16-GPU composite)")
      ->capture_default_str();
  app.add_option("--site-budget-w", a->site_budget_w, "The site's budget (whole site, W)")
      ->required()
      ->check(Real(1.0, 1e9));
  app.add_option("--reserve-w", a->reserve_w, "Kept out of every grant (W)")->check(Real(0.0, 1e9));
  app.add_option("--speed", a->speed, "Simulated seconds per wall second (0: as fast as it can)")
      ->check(Real(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--duration-s", a->duration_s, "Simulated time")
      ->check(Real(1.0, 30 * 86400.0))
      ->capture_default_str();
  app.add_option("--seed", a->seed, "Seed of every draw")->check(Integer(0, kMaxSeed));
  app.add_option("--etcd", a->etcd,
                 "A real etcd (URL[,URL...]) instead of the in-memory store; its keys under "
                 "/headroom/fleet-sim/ are replaced");
  AddEtcdOptions(app, &a->etcd_options);
  app.add_flag("--json", a->json, "Print the result as JSON");
  app.add_option("--report", a->report, "Write an HTML report");
  a->policies = SharedDataDir("policies");
  app.add_option("--policies", a->policies,
                 "Directory of the scenarios' policies (<scenario>.json; without one: pid); "
                 "default: the installed share/headroom/policies, else the source tree's")
      ->capture_default_str();
  app.add_option("--controller", a->controller, "ppo (where a policy exists) or pid")
      ->capture_default_str();
  app.add_option("--period-s", a->period_s, "The coordinator's period")->check(Real(0.5, 60.0));
  app.add_option("--lease-ttl-s", a->lease_ttl_s, "Lease TTL")->check(Integer(2, 60));
  app.add_option("--offsets", a->offsets,
                 "Where each job starts: aligned (all at a step's start) or random (each "
                 "advanced by a draw in [0, its step time) at its defaults)")
      ->check(CLI::IsMember({"aligned", "random"}))
      ->capture_default_str();
  app.add_option("--job-control", a->job_control,
                 "on: each job's controller steers its rollout; off: every job at its trainer's "
                 "defaults, the grant enforced by the hardware power limit alone")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_flag("--guard-power-limit", a->guard_power_limit,
               "With --job-control on: each agent's power limit guard under its controller (a "
               "sustained excess sets the GPUs' limits to the budget), the floor the lowest "
               "limit, as `headroom agent --guard-power-limit`");
  app.add_option("--site-budget-schedule", a->site_budget_schedule,
                 "The site budget moving: a CSV file t_s,budget_w (the site's watts), or "
                 "steps:LOW_W:HIGH_W:PERIOD_S, demand-response or walk around --site-budget-w");
  app.add_option("--notice-s", a->notice_s,
                 "How long before each change of --site-budget-schedule the site knows of it")
      ->check(Real(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--opportunistic", a->opportunistic.workers,
                 "Opportunistic DiLoCo workers beside the jobs, on what the jobs leave of the "
                 "site budget (docs/SITE.md, \"Spare power in fleet-sim\"); the jobs' demand is "
                 "then by phase, and the site runs again without the workers")
      ->check(Integer(0, 1000));
  app.add_option("--opportunistic-threads", a->opportunistic.threads,
                 "Each worker's cores (its demand: threads x --cpu-watts-per-core)")
      ->check(Integer(1, 1024))
      ->capture_default_str();
  app.add_option("--cpu-watts-per-core", a->opportunistic.watts_per_core,
                 "The workers' power model: W per busy core")
      ->check(Real(0.1, 1000.0))
      ->capture_default_str();
  app.add_option("--inner-steps", a->opportunistic.inner_steps,
                 "The workers' DiLoCo H (inner steps per round)")
      ->check(Integer(1, 100000))
      ->capture_default_str();
  app.add_option("--power-csv", a->power_csv,
                 "Write the site's true power per second (t_s,site_power_w,site_budget_w,"
                 "opportunistic_w)");
  app.add_option("--loan-lead-s", a->loan_lead_s,
                 "With --opportunistic: how far ahead the coordinator predicts each job's draw "
                 "for its loans (0: three periods)")
      ->check(Real(0.0, 600.0));
  app.add_option("--loan-cover", a->loan_cover,
                 "With --opportunistic: the share of the largest job's undrawn watts never lent "
                 "(1: a sudden rise of any one job fits at once)")
      ->check(Real(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--loan-margin", a->loan_margin,
                 "With --opportunistic: each job's expected draw x (1 + this)")
      ->check(Real(0.0, 1.0))
      ->capture_default_str();
  AddSchedulingOptions(app, &a->scheduling);
  app.add_flag("--verbose", a->verbose, "The coordinator's log on stderr");
  return [a]() -> Status { return RunFleetSimCommand(*a); };
}

}  // namespace headroom::cli
