#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/budget_options.h"
#include "cli/commands.h"
#include "cli/output_files.h"
#include "cli/progress.h"
#include "cli/trace_options.h"
#include "cli/twin_calibrate.h"
#include "common/atomic_file.h"
#include "common/paths.h"
#include "common/phase.h"
#include "report/table.h"
#include "trace/meta.h"
#include "trace/reader.h"
#include "trace/writer.h"
#include "twin/authority.h"
#include "twin/calibrate.h"
#include "twin/calibrate_trace.h"
#include "twin/scenario.h"
#include "twin/twin.h"

namespace headroom::cli {
namespace {

// Option bounds (README, `headroom twin run --help`).
constexpr int64_t kMaxRunSteps = 10000000;
constexpr int64_t kMaxCheckpointEverySteps = 1000000000;
constexpr int64_t kMaxAuthoritySteps = 10000;
constexpr int64_t kMaxAuthoritySeeds = 1000;

// ---- twin run ------------------------------------------------------------------------------

struct RunArgs {
  std::string scenario;
  int steps = 0;
  double duration_s = 0.0;
  uint64_t seed = 1;
  std::optional<int> concurrency;
  std::optional<int> group_size;
  std::optional<double> power_limit_w;
  std::optional<int> checkpoint_every;
  std::string budget_schedule;
  std::string out;
};

// The trace twin run writes: its columns, and the rows of one tick.
std::bitset<trace::kFieldCount> RunFields(bool with_budget) {
  std::bitset<trace::kFieldCount> fields;
  if (with_budget) fields.set(trace::FieldIndex(trace::Field::kBudgetW));
  fields.set(trace::FieldIndex(trace::Field::kStep));
  fields.set(trace::FieldIndex(trace::Field::kTokens));
  fields.set(trace::FieldIndex(trace::Field::kConcurrency));
  fields.set(trace::FieldIndex(trace::Field::kGroupSize));
  return fields;
}

void ApplySettings(const RunArgs& args, twin::Twin& twin) {
  if (args.concurrency) twin.SetConcurrency(*args.concurrency);
  if (args.group_size) twin.SetGroupSize(*args.group_size);
  if (args.power_limit_w) twin.SetPowerLimit(*args.power_limit_w);
}

// One tick of `twin`; `emit(row)` for each GPU's row of it; `budget`: the budget_w column.
template <class Emit>
void TickAndEmit(twin::Twin& twin, trace::TraceRow& row, const analysis::BudgetSchedule* budget,
                 Emit&& emit) {
  const double t_s = twin.t_s();  // a row holds the power of [t_s, t_s + tick)
  twin.Tick();
  if (budget != nullptr) row.fields[trace::FieldIndex(trace::Field::kBudgetW)] = budget->At(t_s);
  row.t_s = std::round(t_s * 1e6) / 1e6;
  row.phase = twin::PhaseName(twin.phase());
  row.fields[trace::FieldIndex(trace::Field::kStep)] = twin.steps_done();
  row.fields[trace::FieldIndex(trace::Field::kConcurrency)] = twin.concurrency();
  row.fields[trace::FieldIndex(trace::Field::kGroupSize)] = twin.group_size();
  for (size_t g = 0; g < twin.power_w().size(); ++g) {
    row.gpu = static_cast<uint32_t>(g);
    row.power_w = std::round(twin.power_w()[g] * 100.0) / 100.0;
    row.fields[trace::FieldIndex(trace::Field::kTokens)] = twin.tick_tokens()[g];
    emit(row);
  }
}

// Whether a run of `args` is over.
bool RunDone(const RunArgs& args, const twin::Twin& twin) {
  if (args.steps > 0 && twin.steps_done() >= args.steps) return true;
  if (args.duration_s > 0.0) return twin.t_s() >= args.duration_s - 1e-9;
  return twin.current_phase() == twin::Phase::kStopped;  // steps can no longer complete
}

// The average length of the time text of a row at ticks spread over [0, ticks).
double MeanTimeTextBytes(double ticks, double tick_s) {
  constexpr int kSamples = 64;
  double total = 0.0;
  for (int i = 0; i < kSamples; ++i) {
    const double t_s = std::floor(ticks * (i + 0.5) / kSamples) * tick_s;
    total += static_cast<double>(fmt::formatted_size("{}", std::round(t_s * 1e6) / 1e6));
  }
  return total / kSamples;
}

// The size of the trace a run of `args` writes, about: a probe twin with the same settings runs
// the first step (or up to kProbeRows rows) and gives the rows per tick, the ticks per step and
// the bytes per row; the ticks of the whole run follow from --duration-s, or from --steps, and
// the scenario's stop.
double ProjectRunBytes(const twin::Scenario& scenario, const RunArgs& args,
                       const analysis::BudgetSchedule* budget) {
  constexpr uint64_t kProbeRows = 1'000'000;
  twin::Twin probe(scenario, args.seed);
  ApplySettings(args, probe);
  const auto fields = RunFields(budget != nullptr);
  trace::TraceRow row;
  std::string line;
  double probe_bytes = 0.0, probe_time_bytes = 0.0;
  uint64_t probe_rows = 0;
  while (!RunDone(args, probe) && probe.steps_done() < 1 && probe_rows < kProbeRows) {
    TickAndEmit(probe, row, budget, [&](const trace::TraceRow& r) {
      trace::TraceWriter::FormatRow(r, fields, /*with_phase=*/true, line);
      probe_bytes += static_cast<double>(line.size());
      probe_time_bytes += static_cast<double>(fmt::formatted_size("{}", r.t_s));
      ++probe_rows;
    });
  }
  if (probe_rows == 0) return 0.0;
  const double probe_ticks = static_cast<double>(probe.ticks());
  double ticks = std::numeric_limits<double>::infinity();
  if (args.duration_s > 0.0) ticks = std::ceil((args.duration_s - 1e-9) / scenario.tick_s);
  if (args.steps > 0) {
    // A step done: steps x its ticks. None yet (a step longer than the probe): at least that.
    const double per_step = probe_ticks / std::max<double>(1.0, probe.steps_done());
    double step_ticks = args.steps * per_step;
    if (RunDone(args, probe)) step_ticks = probe_ticks;  // the probe was the whole run
    if (args.duration_s <= 0.0 && scenario.stop_at_s) {
      step_ticks = std::min(step_ticks, std::ceil(*scenario.stop_at_s / scenario.tick_s) + 1);
    }
    ticks = std::min(ticks, step_ticks);
  }
  if (!std::isfinite(ticks)) ticks = probe_ticks;  // ends at the scenario's stop: probed
  const double rows_per_tick = static_cast<double>(probe_rows) / probe_ticks;
  const double row_bytes = (probe_bytes - probe_time_bytes) / static_cast<double>(probe_rows) +
                           MeanTimeTextBytes(ticks, scenario.tick_s);
  return ticks * rows_per_tick * row_bytes;
}

Status RunTwin(const RunArgs& args) {
  // Inputs first, then outputs: nothing is created before the run has what it needs.
  auto scenario = twin::LoadScenario(args.scenario);
  if (!scenario) return std::move(scenario).error();
  if (args.checkpoint_every) scenario->checkpoint_every_steps = *args.checkpoint_every;
  if (args.steps <= 0 && args.duration_s <= 0.0) {
    return Error::Usage("give --steps N or --duration-s S (or both: whichever comes first)");
  }
  const auto inputs = ScenarioInputs("--scenario", args.scenario);
  if (auto st = RefuseOutputOverInput(args.out, "--out", inputs); !st) return st;
  if (auto st = RefuseOutputOverInput(trace::MetaPathFor(args.out), "--out's sidecar", inputs);
      !st) {
    return st;
  }
  // A budget that moves is written beside the power (the twin's job runs at its settings; the
  // trace is then scored against it by headroom analyze). Generators move around the top of
  // the scenario's budget range, seeded by --seed, over --duration-s (else a day).
  std::optional<analysis::BudgetSchedule> budget;
  if (!args.budget_schedule.empty()) {
    auto spec = ParseBudgetPlan(args.budget_schedule);
    if (!spec) return std::move(spec).error();
    const double horizon_s = args.duration_s > 0.0 ? args.duration_s : 86400.0;
    budget = sim::MakeBudgetPlan(*spec, scenario->budget_range_w.second, scenario->budget_range_w,
                                 horizon_s, args.seed, scenario->interval_s)
                 .per_gpu_w;
  }
  const analysis::BudgetSchedule* budget_ptr = budget ? &*budget : nullptr;
  if (auto st =
          CheckOutputSpace("twin run", args.out, ProjectRunBytes(*scenario, args, budget_ptr));
      !st) {
    return st;
  }
  twin::Twin twin(*scenario, args.seed);
  ApplySettings(args, twin);

  RemoveTempFilesOnSignals();
  auto writer = trace::TraceWriter::Open(args.out, RunFields(budget_ptr != nullptr),
                                         /*with_phase=*/true);
  if (!writer) return std::move(writer).error();
  trace::TraceRow row;
  // Progress against whichever end comes first; no total size: the terminal check is enough.
  Progress progress("twin " + scenario->name, std::nullopt);
  double rollout_occupancy = 0.0;  // summed over rollout ticks: the mean for the summary
  uint64_t rollout_ticks = 0;
  while (!RunDone(args, twin)) {
    if (twin.ticks() % 4096 == 0) {
      if (args.steps > 0) {
        progress.UpdateCount(twin.steps_done(), args.steps, "steps");
      } else {
        progress.UpdateCount(twin.t_s(), args.duration_s, "s");
      }
    }
    TickAndEmit(twin, row, budget_ptr, [&](const trace::TraceRow& r) { writer->Write(r); });
    if (twin.phase() == twin::Phase::kRollout) {
      rollout_occupancy += twin.mean_occupancy();
      ++rollout_ticks;
    }
  }
  trace::TraceMeta meta;
  meta.gpu_model = scenario->gpu_model;
  meta.nameplate_w = scenario->nameplate_w;
  meta.sample_interval_s = scenario->tick_s;
  meta.job = fmt::format("headroom twin: {} ({})", scenario->name, scenario->model);
  meta.notes = fmt::format(
      "seed {}, concurrency {}, group size {}, power limit {}", args.seed, twin.concurrency(),
      twin.next_group_size(),
      twin.power_limit_w() > 0.0 ? fmt::format("{} W", twin.power_limit_w()) : std::string("none"));
  if (std::isfinite(twin.slow_storage_from_s())) {
    meta.notes = fmt::format("{}, storage slow from t = {:.1f} s ({} s checkpoints)", *meta.notes,
                             twin.slow_storage_from_s(), scenario->checkpoint_slow_s);
  }
  if (auto status = writer->Commit(meta); !status) return status;
  fmt::print(stderr,
             "wrote {:.1f} s, {} steps, {:.4f} kWh, {:.0f} tokens, mean rollout occupancy {:.2f} "
             "({} admission) to {}\n",
             twin.t_s(), twin.steps_done(), twin.energy_j() / 3.6e6, twin.tokens_total(),
             rollout_ticks > 0 ? rollout_occupancy / static_cast<double>(rollout_ticks) : 0.0,
             twin::AdmissionName(scenario->admission), args.out);
  return OkStatus();
}

// ---- twin authority ------------------------------------------------------------------------

struct AuthorityArgs {
  std::string scenario;
  int steps = 4;
  int seeds = 3;
  bool json = false;
};

Status RunAuthority(const AuthorityArgs& args) {
  auto scenario = twin::LoadScenario(args.scenario);
  if (!scenario) return std::move(scenario).error();
  twin::AuthorityOptions options;
  options.steps = args.steps;
  options.seeds.clear();
  for (int s = 1; s <= args.seeds; ++s) options.seeds.push_back(static_cast<uint64_t>(s));
  auto result = twin::MeasureAuthority(*scenario, options);
  if (!result) return std::move(result).error();
  if (args.json) {
    nlohmann::ordered_json j;
    j["scenario"] = result->scenario;
    auto actuators = nlohmann::ordered_json::array();
    for (const auto& a : result->actuators) {
      actuators.push_back({{"name", a.name},
                           {"range", {a.low.value, a.high.value}},
                           {"rollout_power_change_pct", a.rollout_power_change_pct},
                           {"step_time_change_pct", a.step_time_change_pct},
                           {"tokens_per_s_change_pct", a.tokens_per_s_change_pct},
                           {"low",
                            {{"rollout_power_w", a.low.rollout_power_w},
                             {"step_time_s", a.low.step_time_s},
                             {"tokens_per_s", a.low.tokens_per_s}}},
                           {"high",
                            {{"rollout_power_w", a.high.rollout_power_w},
                             {"step_time_s", a.high.step_time_s},
                             {"tokens_per_s", a.high.tokens_per_s}}}});
    }
    j["actuators"] = std::move(actuators);
    fmt::print("{}\n", j.dump(2));
    return OkStatus();
  }
  fmt::print("scenario   {} ({} steps x {} seeds per setting; others at their defaults)\n\n",
             result->scenario, args.steps, args.seeds);
  report::TextTable table(
      {"actuator", "range", "rollout W/GPU", "power change", "step time", "tokens/s"});
  for (const auto& a : result->actuators) {
    table.AddRow({a.name, fmt::format("{:g} -> {:g}", a.low.value, a.high.value),
                  fmt::format("{:.1f} -> {:.1f}", a.low.rollout_power_w, a.high.rollout_power_w),
                  fmt::format("{:+.1f}%", a.rollout_power_change_pct),
                  fmt::format("{:+.1f}%", a.step_time_change_pct),
                  fmt::format("{:+.1f}%", a.tokens_per_s_change_pct)});
  }
  fmt::print("{}", table.Render());
  return OkStatus();
}

Status ListScenarios() {
  report::TextTable table({"scenario", "GPUs", "TP", "model", "description"});
  table.AlignLeft(3);
  table.AlignLeft(4);
  for (const auto& name : twin::BuiltinScenarioNames()) {
    auto s = twin::LoadScenario(name);
    if (!s) return std::move(s).error();
    table.AddRow({name, std::to_string(s->gpus), std::to_string(s->tp), s->model, s->description});
  }
  fmt::print("{}", table.Render());
  return OkStatus();
}

}  // namespace

Command SetupTwin(CLI::App& app) {
  app.require_subcommand(1);
  auto selected = std::make_shared<Command>();

  auto* run = app.add_subcommand("run", "Simulate a scenario and write its power trace");
  auto run_args = std::make_shared<RunArgs>();
  run->add_option("--scenario", run_args->scenario, "Built-in scenario name or TOML file")
      ->required();
  run->add_option("--steps", run_args->steps, "GRPO steps to simulate")
      ->check(Integer(1, kMaxRunSteps));
  run->add_option("--duration-s", run_args->duration_s, "Seconds to simulate")
      ->check(Real(kMinDurationS, kMaxDurationS));
  run->add_option("--seed", run_args->seed, "Random seed")
      ->check(Integer(0, kMaxSeed))
      ->capture_default_str();
  run->add_option("--concurrency", run_args->concurrency, "Generation concurrency (clamped)")
      ->check(Integer(1, kMaxConcurrency));
  run->add_option("--group-size", run_args->group_size, "GRPO group size (clamped)")
      ->check(Integer(1, kMaxGroupSize));
  run->add_option("--power-limit-w", run_args->power_limit_w,
                  "Hardware power limit per GPU in W (at or above nameplate: none)")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  run->add_option("--checkpoint-every", run_args->checkpoint_every,
                  "Checkpoint every N steps (0: never); overrides the scenario")
      ->check(Integer(0, kMaxCheckpointEverySteps));
  run->add_option("--budget-schedule", run_args->budget_schedule,
                  std::string(kBudgetPlanHelp) + "; written as the budget_w column");
  run->add_option("--out", run_args->out, "Trace to write (long CSV) and its .meta.json")
      ->required();
  run->callback([selected, run_args] { *selected = [run_args] { return RunTwin(*run_args); }; });

  auto* authority = app.add_subcommand("authority", "Each actuator's power authority");
  auto authority_args = std::make_shared<AuthorityArgs>();
  authority->add_option("--scenario", authority_args->scenario, "Scenario")->required();
  authority->add_option("--steps", authority_args->steps, "Steps per run")
      ->check(Integer(1, kMaxAuthoritySteps))
      ->capture_default_str();
  authority->add_option("--seeds", authority_args->seeds, "Seeds per setting")
      ->check(Integer(1, kMaxAuthoritySeeds))
      ->capture_default_str();
  authority->add_flag("--json", authority_args->json, "Print JSON");
  authority->callback([selected, authority_args] {
    *selected = [authority_args] { return RunAuthority(*authority_args); };
  });

  auto* calibrate = app.add_subcommand("calibrate", "Fit decode curves or dynamics to data");
  const Command run_calibrate = SetupTwinCalibrate(*calibrate);
  calibrate->callback([selected, run_calibrate] { *selected = run_calibrate; });

  auto* scenarios = app.add_subcommand("scenarios", "List the built-in scenarios");
  scenarios->callback([selected] { *selected = [] { return ListScenarios(); }; });

  return [selected] { return (*selected)(); };
}

}  // namespace headroom::cli
