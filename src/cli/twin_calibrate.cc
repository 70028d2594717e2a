// `headroom twin calibrate`: decode curves fitted to ML.ENERGY data, dynamics to a trace, or a
// whole scenario to an agent's trace (twin/calibrate.h, twin/calibrate_trace.h).
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

constexpr int64_t kMaxTp = 64;  // the scenario files' bound

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

}  // namespace

Command SetupTwinCalibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  app.add_option("--mlenergy", a->mlenergy,
                 "ML.ENERGY v3 flattened CSV (mlenergy_v3_llm_configs.csv)");
  app.add_option("--model", a->model, "model_id, e.g. meta-llama/Llama-3.1-8B-Instruct");
  app.add_option("--gpu", a->gpu, "gpu_model, e.g. H100");
  app.add_option("--tp", a->tp, "Tensor-parallel degree")
      ->check(Integer(1, kMaxTp))
      ->capture_default_str();
  app.add_option("--task", a->task, "Task to fit on (others are held out)")->capture_default_str();
  app.add_option("--held-out-model", a->held_out_models,
                 "Another model (same GPU and TP) to predict with the fit, and score");
  app.add_option("--trace", a->trace,
                 "An agent trace (headroom agent --trace-out): a whole scenario from it; with "
                 "--fit-dynamics, any trace with a concurrency column: lag and noise");
  app.add_flag("--fit-dynamics", a->fit_dynamics, "Fit lag and noise from --trace");
  app.add_option("--gpu-id", a->gpu_id, "GPU of --trace to fit (default: first)");
  app.add_option("--base", a->base,
                 "With --trace (an agent trace): the scenario that supplies what the trace "
                 "cannot show (default: the built-in the trace's sidecar names, else the "
                 "one on its GPU model and count)");
  app.add_option("--name", a->name,
                 "With --trace: the calibrated scenario's name (default: --out's stem)");
  app.add_option("--out", a->out, "TOML to write")->required();
  return [a] { return RunCalibrate(*a); };
}

}  // namespace headroom::cli
