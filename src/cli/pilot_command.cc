// `headroom pilot plan|report|validate` (docs/PILOT.md): read the traces, call pilot/, print.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/output_files.h"
#include "cli/pilot_options.h"
#include "cli/trace_options.h"
#include "common/atomic_file.h"
#include "common/duration.h"
#include "common/paths.h"
#include "common/read_file.h"
#include "pilot/blocks.h"
#include "pilot/design.h"
#include "pilot/judge.h"
#include "pilot/simulate.h"
#include "report/pilot_report.h"

namespace headroom::cli {
namespace {

using namespace pilot_options;  // NOLINT(google-build-using-namespace): this command's own

struct PlanArgs {
  BaselineArgs baseline;
  std::optional<int64_t> pilot_gpus;
  double usd_per_gpu_hour = pilot::kDefaultUsdPerGpuHour;
  bool json = false;
  std::string report;
};

Status RunPlan(const PlanArgs& args) {
  if (auto st = RefuseReportOver(args.report, args.baseline.traces, "--baseline"); !st) return st;
  auto baseline = LoadBaseline(args.baseline);
  if (!baseline) return std::move(baseline).error();
  pilot::PlanOptions o = baseline->options;
  o.gpus = args.pilot_gpus ? static_cast<uint32_t>(*args.pilot_gpus) : baseline->max_gpus;
  o.usd_per_gpu_hour = args.usd_per_gpu_hour;
  auto plan = pilot::PlanPilot(baseline->blocks.blocks, o);
  if (!plan) return std::move(plan).error();
  const auto& p = *plan;
  const auto& b = baseline->blocks;
  return EmitResult(args.report, args.json,
                    {[&] { return report::PilotPlanReportHtml(p, b); },
                     [&] { return report::PilotPlanToJson(p, b).dump(2); },
                     [&] { return report::PilotPlanToText(p, b); }});
}

struct ReportArgs {
  std::string blocks;
  std::vector<std::string> traces;
  std::optional<double> budget_w;
  double alpha = 0.05;
  int64_t bootstrap = 10000;
  int64_t permutations = 10000;
  uint64_t seed = 1;
  double energy_price_usd_per_mwh = pilot::kDefaultEnergyPriceUsdPerMwh;
  double carbon_g_per_kwh = pilot::kDefaultCarbonGPerKwh;
  bool json = false;
  std::string report;
  TraceOptions trace_options;
};

Result<std::string> ReadBlocksFile(const std::string& path) {
  return ReadFileCapped(path, kMaxBlocksFileBytes, "--blocks");
}

// The --traces argument a BLOCKS.csv trace names: the same text, else the one with that file
// name.
Result<size_t> FindTrace(const std::vector<std::string>& traces, const pilot::BlockRow& row,
                         const std::string& blocks_path) {
  for (size_t i = 0; i < traces.size(); ++i) {
    if (traces[i] == row.trace) return i;
  }
  std::optional<size_t> found;
  for (size_t i = 0; i < traces.size(); ++i) {
    if (std::filesystem::path(traces[i]).filename() == row.trace) {
      if (found) {
        return Error::Input(LocatedMessage(
            blocks_path, row.line, 0, "trace",
            fmt::format("{} names more than one of --traces", QuoteForMessage(row.trace))));
      }
      found = i;
    }
  }
  if (!found) {
    return Error::Input(
        LocatedMessage(blocks_path, row.line, 0, "trace",
                       fmt::format("{} is not among --traces", QuoteForMessage(row.trace))));
  }
  return *found;
}

Status RunReport(const ReportArgs& args) {
  if (auto st = RefuseReportOver(args.report, args.traces, "--traces", args.blocks, "--blocks");
      !st) {
    return st;
  }
  auto text = ReadBlocksFile(args.blocks);
  if (!text) return std::move(text).error();
  auto rows = pilot::ParseBlocksCsv(*text, args.blocks);
  if (!rows) return std::move(rows).error();
  std::vector<size_t> trace_of_row;
  for (const auto& row : *rows) {
    auto i = FindTrace(args.traces, row, args.blocks);
    if (!i) return std::move(i).error();
    trace_of_row.push_back(*i);
  }
  auto read_options = args.trace_options.ToReadOptions();
  if (!read_options) return std::move(read_options).error();
  std::vector<std::string> warnings;
  std::vector<pilot::TraceData> traces;
  for (const auto& path : args.traces) {
    auto data = ReadTrace(path, *read_options, warnings);
    if (!data) return std::move(data).error();
    traces.push_back(std::move(data).value());
  }
  pilot::MeasureOptions mo;
  mo.budget_w = args.budget_w;
  std::vector<pilot::BlockStats> stats;
  for (size_t i = 0; i < rows->size(); ++i) {
    const auto& row = (*rows)[i];
    const double from = row.start_s.value_or(-std::numeric_limits<double>::infinity());
    const double to = row.end_s.value_or(std::numeric_limits<double>::infinity());
    auto s = pilot::MeasureStretch(traces[trace_of_row[i]], from, to, mo);
    if (!s) {
      return Error::Input(fmt::format("{}:{}: block {}: {}", args.blocks, row.line, row.block,
                                      s.error().message()));
    }
    stats.push_back(std::move(s).value());
  }
  pilot::JudgeOptions jo;
  jo.effect.alpha = args.alpha;
  jo.effect.bootstrap_resamples = static_cast<uint64_t>(args.bootstrap);
  jo.effect.permutations = static_cast<uint64_t>(args.permutations);
  jo.effect.seed = args.seed;
  jo.energy_price_usd_per_mwh = args.energy_price_usd_per_mwh;
  jo.carbon_g_per_kwh = args.carbon_g_per_kwh;
  auto judged = pilot::JudgePilot(*rows, stats, jo);
  if (!judged) {
    return Error::Input(fmt::format("{}: {}", args.blocks, judged.error().message()));
  }
  PrintWarnings(warnings);
  const auto& r = *judged;
  return EmitResult(args.report, args.json,
                    {[&] { return report::PilotReportHtml(r); },
                     [&] { return report::PilotReportToJson(r).dump(2); },
                     [&] { return report::PilotReportToText(r); }});
}

struct ValidateArgs {
  BaselineArgs baseline;
  int64_t pilots = 100;
  std::optional<int64_t> blocks_per_arm;
  int64_t bootstrap = 2000;
  int64_t permutations = 2000;
  bool json = false;
};

Status RunValidate(const ValidateArgs& args) {
  auto baseline = LoadBaseline(args.baseline);
  if (!baseline) return std::move(baseline).error();
  const auto& o = baseline->options;
  size_t available = 0;
  for (const auto& s : baseline->blocks.blocks) available += s.size();
  int64_t per_arm = 0;
  if (args.blocks_per_arm) {
    per_arm = *args.blocks_per_arm;
  } else {
    auto plan = pilot::PlanPilot(baseline->blocks.blocks, o);
    if (!plan) return std::move(plan).error();
    per_arm = plan->size.blocks_per_arm;
  }
  if (2 * per_arm > static_cast<int64_t>(available)) {
    return Error::Usage(fmt::format(
        "a pilot of {} blocks per arm needs {} baseline blocks of {}, and the baseline holds {}: "
        "give --blocks-per-arm at most {}, more baseline or a shorter --block",
        per_arm, 2 * per_arm, FormatDurationS(o.block_s), available, available / 2));
  }
  pilot::SimulationOptions so;
  so.pilots = static_cast<int>(args.pilots);
  so.blocks_per_arm = per_arm;
  so.effect_frac = o.effect_frac;
  so.effect.alpha = o.alpha;
  so.effect.bootstrap_resamples = static_cast<uint64_t>(args.bootstrap);
  so.effect.permutations = static_cast<uint64_t>(args.permutations);
  so.seed = o.seed;
  const auto result = pilot::SimulatePilots(baseline->blocks.blocks, so);
  const report::PilotValidationInfo info{std::string(pilot::MetricName(o.metric)), o.block_s,
                                         available, o.effect_frac, o.alpha};
  return EmitResult("", args.json,
                    {nullptr, [&] { return report::PilotValidationToJson(result, info).dump(2); },
                     [&] { return report::PilotValidationToText(result, info); }});
}

}  // namespace

Command SetupPilot(CLI::App& app) {
  app.require_subcommand(1);
  auto plan_args = std::make_shared<PlanArgs>();
  auto* plan = app.add_subcommand(
      "plan", "Design a pilot from baseline traces: blocks, days and cost to detect an effect");
  plan_args->baseline.Register(*plan);
  plan->add_option("--pilot-gpus", plan_args->pilot_gpus,
                   "GPUs under the controller in the pilot (default: the most in a baseline "
                   "trace)")
      ->check(Integer(1, kMaxPilotGpus));
  plan->add_option("--usd-per-gpu-hour", plan_args->usd_per_gpu_hour,
                   "Price of a GPU-hour for the cost (docs/PILOT.md)")
      ->check(Real(0.0, kMaxUsdPerGpuHour))
      ->capture_default_str();
  plan->add_flag("--json", plan_args->json, "Print one JSON object instead of tables");
  plan->add_option("--report", plan_args->report, "Write a self-contained HTML report here");

  auto report_args = std::make_shared<ReportArgs>();
  auto* rep = app.add_subcommand(
      "report", "Judge a pilot: effects with block-bootstrap intervals and permutation p-values");
  rep->add_option("--blocks", report_args->blocks,
                  "BLOCKS.csv: block,arm,trace[,job][,start_s,end_s] (docs/PILOT.md)")
      ->required();
  rep->add_option("--traces", report_args->traces, "The pilot's traces that BLOCKS.csv names")
      ->required();
  rep->add_option("--budget-w", report_args->budget_w,
                  "Budget of one GPU in W for violations (else the traces' budget_w column)")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  rep->add_option("--alpha", report_args->alpha,
                  "Significance level (two-sided); intervals at 1 - alpha")
      ->check(Real(kMinAlpha, kMaxAlpha))
      ->capture_default_str();
  rep->add_option("--bootstrap", report_args->bootstrap, "Bootstrap resamples")
      ->check(Integer(100, kMaxResamples))
      ->capture_default_str();
  rep->add_option("--permutations", report_args->permutations,
                  "Random relabellings when the exact test has too many")
      ->check(Integer(100, kMaxResamples))
      ->capture_default_str();
  rep->add_option("--seed", report_args->seed, "Seed of the bootstrap and the permutations")
      ->check(Integer(0, kMaxSeed))
      ->capture_default_str();
  rep->add_option("--energy-price-usd-per-mwh", report_args->energy_price_usd_per_mwh,
                  "Energy price (USD per MWh)")
      ->check(Real(0.0, kMaxEnergyPriceUsdPerMwh))
      ->capture_default_str();
  rep->add_option("--carbon-g-per-kwh", report_args->carbon_g_per_kwh,
                  "Grid carbon intensity (g CO2e per kWh)")
      ->check(Real(0.0, kMaxCarbonGPerKwh))
      ->capture_default_str();
  rep->add_flag("--json", report_args->json, "Print one JSON object instead of tables");
  rep->add_option("--report", report_args->report, "Write a self-contained HTML report here");
  report_args->trace_options.Register(*rep);

  auto validate_args = std::make_shared<ValidateArgs>();
  auto* validate = app.add_subcommand(
      "validate", "Simulated pilots from baseline traces: interval coverage, false positives");
  validate_args->baseline.Register(*validate);
  validate->add_option("--pilots", validate_args->pilots, "Simulated pilots of each kind")
      ->check(Integer(1, kMaxPilots))
      ->capture_default_str();
  validate
      ->add_option("--blocks-per-arm", validate_args->blocks_per_arm,
                   "Blocks per arm of each pilot (default: the plan's)")
      ->check(Integer(2, kMaxPilots));
  validate->add_option("--bootstrap", validate_args->bootstrap, "Bootstrap resamples a pilot")
      ->check(Integer(100, kMaxResamples))
      ->capture_default_str();
  validate
      ->add_option("--permutations", validate_args->permutations,
                   "Random relabellings a pilot when the exact test has too many")
      ->check(Integer(100, kMaxResamples))
      ->capture_default_str();
  validate->add_flag("--json", validate_args->json, "Print one JSON object instead of tables");

  return [plan, rep, validate, plan_args, report_args, validate_args]() -> Status {
    if (plan->parsed()) return RunPlan(*plan_args);
    if (rep->parsed()) return RunReport(*report_args);
    if (validate->parsed()) return RunValidate(*validate_args);
    return Error::Usage("pilot: give plan, report or validate");
  };
}

}  // namespace headroom::cli
