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
constexpr int64_t kMaxTp = 64;  // the scenario files' bound

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
  while (!RunDone(args, twin)) {
    if (twin.ticks() % 4096 == 0) {
      if (args.steps > 0) {
        progress.UpdateCount(twin.steps_done(), args.steps, "steps");
      } else {
        progress.UpdateCount(twin.t_s(), args.duration_s, "s");
      }
    }
    TickAndEmit(twin, row, budget_ptr, [&](const trace::TraceRow& r) { writer->Write(r); });
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
  fmt::print(stderr, "wrote {:.1f} s, {} steps, {:.4f} kWh, {:.0f} tokens to {}\n", twin.t_s(),
             twin.steps_done(), twin.energy_j() / 3.6e6, twin.tokens_total(), args.out);
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

// ---- twin calibrate ------------------------------------------------------------------------

struct CalibrateArgs {
  std::string mlenergy;
  std::string model;
  std::string gpu;
  int tp = 1;
  std::string task = "lm-arena-chat";
  std::vector<std::string> held_out_models;
  std::string trace;
  bool fit_dynamics = false;
  std::string gpu_id;
  std::string base;
  std::string name;
  std::string out;
};

// An agent trace's samples, one per time: power averaged over the GPUs, tokens summed.
class JobSampleSink final : public trace::SampleSink {
 public:
  void OnBatch(const trace::SampleBatch& batch, const trace::TraceSchema& schema) override {
    const auto field = [&](trace::Field f, size_t i) {
      return schema.Has(f) ? batch.fields[trace::FieldIndex(f)][i] : std::nan("");
    };
    for (size_t i = 0; i < batch.size(); ++i) {
      if (samples.empty() || batch.t_s[i] != samples.back().t_s) {
        Close();
        samples.push_back({});
        auto& x = samples.back();
        x.t_s = batch.t_s[i];
        const uint16_t phase = schema.has_phase ? batch.phase[i] : trace::SampleBatch::kNoPhase;
        if (phase == trace::SampleBatch::kNoPhase) {
          if (bad_phase_.empty()) bad_phase_ = "(empty)";
        } else if (auto p = PhaseFromName(schema.phase_names[phase])) {
          x.phase = *p;
        } else if (bad_phase_.empty()) {
          bad_phase_ = schema.phase_names[phase];
        }
        // An empty or out-of-range cell keeps the previous sample's value (a step count or an
        // actuation holds until the next report).
        const auto held = [&](trace::Field f, double previous, double hi) {
          const double v = field(f, i);
          return std::isfinite(v) && v >= 0.0 && v <= hi ? v : previous;
        };
        const twin::JobSample* before = samples.size() > 1 ? &samples[samples.size() - 2] : nullptr;
        x.step = static_cast<int>(held(trace::Field::kStep, before ? before->step : 0.0, 1e9));
        x.concurrency = held(trace::Field::kConcurrency, before ? before->concurrency : 0.0, 1e9);
        x.group_size = held(trace::Field::kGroupSize, before ? before->group_size : 0.0, 1e6);
        const double b = field(trace::Field::kBudgetW, i);
        x.budget_w = std::isnan(b) ? 0.0 : b;
      }
      const double tokens = field(trace::Field::kTokens, i);
      if (std::isfinite(tokens) && tokens > 0.0) samples.back().tokens += tokens;
      power_sum_ += batch.power_w[i];
      ++gpus_;
    }
  }
  void Close() {
    if (!samples.empty() && gpus_ > 0) samples.back().power_w = power_sum_ / gpus_;
    power_sum_ = 0.0;
    gpus_ = 0;
  }
  std::vector<twin::JobSample> samples;
  const std::string& bad_phase() const { return bad_phase_; }

 private:
  double power_sum_ = 0.0;
  int gpus_ = 0;
  std::string bad_phase_;
};

// The base scenario of a trace calibration: --base, else the built-in the trace's sidecar names
// ("scenario NAME" in its job, as an agent on the twin writes), else the built-in on the
// sidecar's GPU model with the trace's GPU count (the first by name).
Result<twin::Scenario> CalibrationBase(const CalibrateArgs& args, size_t trace_gpus) {
  if (!args.base.empty()) return twin::LoadScenario(args.base);
  std::vector<std::string> warnings;
  auto meta = trace::LoadMetaFor(args.trace, &warnings);
  if (!meta) return std::move(meta).error();
  if (*meta && (*meta)->job) {
    const std::string& job = *(*meta)->job;
    for (const auto& name : twin::BuiltinScenarioNames()) {
      const std::string needle = "scenario " + name;
      const auto at = job.find(needle);
      if (at != std::string::npos &&
          (at + needle.size() == job.size() || job[at + needle.size()] == ',')) {
        return twin::LoadScenario(name);
      }
    }
  }
  if (*meta && (*meta)->gpu_model) {
    for (const auto& name : twin::BuiltinScenarioNames()) {
      auto s = twin::LoadScenario(name);
      if (s && s->has_rollout && s->gpu_model == *(*meta)->gpu_model &&
          static_cast<size_t>(s->gpus) == trace_gpus) {
        return s;
      }
    }
  }
  return Error::Usage(fmt::format(
      "{}: give --base SCENARIO (what the trace cannot show: the model, the GPUs' memory and "
      "nameplate, prompts per step and their length): its sidecar names no built-in",
      args.trace));
}

Status CalibrateFromAgentTrace(const CalibrateArgs& args, std::string& toml) {
  JobSampleSink sink;
  auto summary = trace::ReadTraceFile(args.trace, {}, sink);
  if (!summary) return std::move(summary).error();
  sink.Close();
  const trace::TraceSchema& schema = summary->schema;
  for (const auto& [field, what] :
       {std::pair{trace::Field::kStep, "step"}, std::pair{trace::Field::kTokens, "tokens"},
        std::pair{trace::Field::kConcurrency, "concurrency"}}) {
    if (!schema.Has(field)) {
      return Error::Input(
          fmt::format("{}: no {} column: an agent trace (headroom agent --trace-out) has "
                      "phase, step, tokens, concurrency and group_size",
                      args.trace, what));
    }
  }
  if (!schema.has_phase) return Error::Input(fmt::format("{}: no phase column", args.trace));
  if (!sink.bad_phase().empty()) {
    return Error::Input(fmt::format("{}: column 'phase': '{}' is not a phase ({})", args.trace,
                                    sink.bad_phase(),
                                    "idle, startup, rollout, logprob, train, "
                                    "sync, checkpoint, stopped"));
  }
  auto base = CalibrationBase(args, schema.gpu_ids.size());
  if (!base) return std::move(base).error();
  if (static_cast<size_t>(base->gpus) != schema.gpu_ids.size()) {
    return Error::Usage(fmt::format("--base {}: {} GPUs, the trace has {}", base->name, base->gpus,
                                    schema.gpu_ids.size()));
  }
  const std::string name =
      args.name.empty() ? std::filesystem::path(args.out).stem().string() : args.name;
  auto c = twin::CalibrateFromTrace(sink.samples, *base, name);
  if (!c) return Error::Input(fmt::format("{}: {}", args.trace, c.error().message()));
  fmt::print(
      "base       {} (kept: model, hardware, prompts, ranges, power-limit curve, dynamics)\n",
      base->name);
  fmt::print("measured   {} complete steps, {} samples every {:.3g} s\n", c->steps,
             sink.samples.size(), c->interval_s);
  report::TextTable table({"key", "calibrated", "base", "how"});
  table.AlignLeft(0);
  table.AlignLeft(3);
  for (const auto& v : c->values) {
    table.AddRow({v.key, fmt::format("{:.6g}", v.value), fmt::format("{:.6g}", v.base), v.how});
  }
  fmt::print("{}", table.Render());
  // Checked by the parser before anything is written.
  std::vector<std::string> header = {
      fmt::format("Calibrated by `headroom twin calibrate --trace {}` on base scenario {}",
                  args.trace, base->name),
      fmt::format("from {} complete steps; measured keys:", c->steps)};
  for (const auto& v : c->values) {
    header.push_back(fmt::format("  {} = {:.6g} (base {:.6g}): {}", v.key, v.value, v.base, v.how));
  }
  toml = twin::ScenarioToToml(c->scenario, header);
  if (auto back = twin::ParseScenario(toml, args.out); !back) {
    return Error::Input(fmt::format("{}: the calibrated scenario is not valid: {}", args.trace,
                                    back.error().message()));
  }
  return OkStatus();
}

// Keeps one GPU's samples with their concurrency.
class ConcurrencySink final : public trace::SampleSink {
 public:
  explicit ConcurrencySink(std::string gpu_id) : gpu_id_(std::move(gpu_id)) {}
  void OnBatch(const trace::SampleBatch& batch, const trace::TraceSchema& schema) override {
    if (!schema.Has(trace::Field::kConcurrency)) return;  // the caller reports it
    const auto& c = batch.fields[trace::FieldIndex(trace::Field::kConcurrency)];
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::string& id = schema.gpu_ids[batch.gpu[i]];
      if (gpu_id_.empty()) gpu_id_ = id;
      if (id != gpu_id_ || std::isnan(c[i])) continue;
      t_s.push_back(batch.t_s[i]);
      power_w.push_back(batch.power_w[i]);
      concurrency.push_back(c[i]);
    }
  }
  std::vector<double> t_s, power_w, concurrency;

 private:
  std::string gpu_id_;
};

Status RunCalibrate(const CalibrateArgs& args) {
  if (auto st = RefuseOutputOverInput(args.out, "--out",
                                      {{"--trace", args.trace}, {"--mlenergy", args.mlenergy}});
      !st) {
    return st;
  }
  RemoveTempFilesOnSignals();
  std::string toml;
  if (args.fit_dynamics) {
    if (args.trace.empty()) return Error::Usage("--fit-dynamics needs --trace FILE");
    ConcurrencySink sink(args.gpu_id);
    auto summary = trace::ReadTraceFile(args.trace, {}, sink);
    if (!summary) return std::move(summary).error();
    if (!summary->schema.Has(trace::Field::kConcurrency)) {
      return Error::Input(
          fmt::format("{}: no concurrency column: dynamics are fitted on the "
                      "responses to concurrency changes",
                      args.trace));
    }
    auto fit = twin::FitDynamics(sink.t_s, sink.power_w, sink.concurrency);
    if (!fit) return Error::Input(fmt::format("{}: {}", args.trace, fit.error().message()));
    fmt::print(
        "dynamics   tau_up {:.3g} s, tau_down {:.3g} s, noise {:.3g} W (AR(1) rho {:.3g} "
        "per {:.3g} s sample); {} rises, {} falls\n",
        fit->tau_up_s, fit->tau_down_s, fit->noise_w, fit->noise_rho, fit->sample_interval_s,
        fit->up_steps, fit->down_steps);
    toml = twin::DynamicsFitToml(*fit, args.trace);
  } else if (!args.trace.empty()) {
    if (auto st = CalibrateFromAgentTrace(args, toml); !st) return st;
  } else {
    if (args.mlenergy.empty() || args.model.empty() || args.gpu.empty()) {
      return Error::Usage(
          "give --mlenergy FILE.csv --model M --gpu G, --trace AGENT_TRACE (a scenario), or "
          "--trace FILE --fit-dynamics");
    }
    auto rows = twin::ReadMlEnergyCsv(args.mlenergy);
    if (!rows) return std::move(rows).error();
    auto c = twin::CalibrateDecode(*rows, args.model, args.gpu, args.tp, args.task,
                                   args.held_out_models);
    if (!c) return Error::Input(fmt::format("{}: {}", args.mlenergy, c.error().message()));
    fmt::print("fit        {} on {} TP{}, task {}: {} points\n", c->model, c->gpu, c->tp,
               c->fit_task, c->power.points);
    fmt::print("power      RMSE {:.2f} W per GPU   (b0 {:.1f}, L {:.1f}, x0 {:.3f}, k {:.3f})\n",
               c->power.rmse, c->power.curve.b0, c->power.curve.l, c->power.curve.x0,
               c->power.curve.k);
    fmt::print("throughput RMSE {:.1f} tok/s per engine\n", c->tokens.rmse);
    if (c->held_out_power_rmse_w) {
      fmt::print(
          "held out   {} points of other tasks: power RMSE {:.2f} W, throughput RMSE "
          "{:.1f} tok/s\n",
          c->held_out_points, *c->held_out_power_rmse_w, *c->held_out_tokens_rmse);
    } else {
      fmt::print("held out   none: no other task for this model, GPU and TP\n");
    }
    for (const auto& m : c->held_out_models) {
      fmt::print("held out   model {} ({} points): power RMSE {:.2f} W\n", m.model, m.points,
                 m.power_rmse_w);
    }
    toml = twin::DecodeCalibrationToml(*c, args.mlenergy);
  }
  if (auto status = WriteFileAtomically(args.out, toml); !status) return status;
  fmt::print("wrote      {}\n", args.out);
  return OkStatus();
}

// ---- twin scenarios ------------------------------------------------------------------------

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
  auto calibrate_args = std::make_shared<CalibrateArgs>();
  calibrate->add_option("--mlenergy", calibrate_args->mlenergy,
                        "ML.ENERGY v3 flattened CSV (mlenergy_v3_llm_configs.csv)");
  calibrate->add_option("--model", calibrate_args->model,
                        "model_id, e.g. meta-llama/Llama-3.1-8B-Instruct");
  calibrate->add_option("--gpu", calibrate_args->gpu, "gpu_model, e.g. H100");
  calibrate->add_option("--tp", calibrate_args->tp, "Tensor-parallel degree")
      ->check(Integer(1, kMaxTp))
      ->capture_default_str();
  calibrate->add_option("--task", calibrate_args->task, "Task to fit on (others are held out)")
      ->capture_default_str();
  calibrate->add_option("--held-out-model", calibrate_args->held_out_models,
                        "Another model (same GPU and TP) to predict with the fit, and score");
  calibrate->add_option(
      "--trace", calibrate_args->trace,
      "An agent trace (headroom agent --trace-out): a whole scenario from it; with "
      "--fit-dynamics, any trace with a concurrency column: lag and noise");
  calibrate->add_flag("--fit-dynamics", calibrate_args->fit_dynamics,
                      "Fit lag and noise from --trace");
  calibrate->add_option("--gpu-id", calibrate_args->gpu_id,
                        "GPU of --trace to fit (default: first)");
  calibrate->add_option("--base", calibrate_args->base,
                        "With --trace (an agent trace): the scenario that supplies what the trace "
                        "cannot show (default: the built-in the trace's sidecar names, else the "
                        "one on its GPU model and count)");
  calibrate->add_option("--name", calibrate_args->name,
                        "With --trace: the calibrated scenario's name (default: --out's stem)");
  calibrate->add_option("--out", calibrate_args->out, "TOML to write")->required();
  calibrate->callback([selected, calibrate_args] {
    *selected = [calibrate_args] { return RunCalibrate(*calibrate_args); };
  });

  auto* scenarios = app.add_subcommand("scenarios", "List the built-in scenarios");
  scenarios->callback([selected] { *selected = [] { return ListScenarios(); }; });

  return [selected] { return (*selected)(); };
}

}  // namespace headroom::cli
