#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "trace/synthetic.h"
#include "trace/writer.h"

namespace headroom::cli {
namespace {

struct SynthArgs {
  trace::SyntheticSpec spec;
  std::string out;
  bool minimal = false;
};

Status RunSynth(const SynthArgs& args) {
  std::bitset<trace::kFieldCount> fields;
  if (!args.minimal) {
    fields.set(trace::FieldIndex(trace::Field::kStep));
    fields.set(trace::FieldIndex(trace::Field::kTokens));
  }
  auto writer = trace::TraceWriter::Open(args.out, fields, /*with_phase=*/!args.minimal);
  if (!writer) return std::move(writer).error();
  uint64_t rows = 0;
  trace::GenerateSyntheticTrace(args.spec, [&](const trace::SyntheticSample& s) {
    trace::TraceRow row;
    row.t_s = s.t_s;
    row.gpu = s.gpu;
    row.power_w = s.power_w;
    row.phase = s.phase;
    row.fields[trace::FieldIndex(trace::Field::kStep)] = s.step;
    row.fields[trace::FieldIndex(trace::Field::kTokens)] = s.tokens;
    writer->Write(row);
    ++rows;
  });
  trace::TraceMeta meta;
  meta.gpu_model = "synthetic";
  meta.nameplate_w = args.spec.nameplate_w;
  meta.sample_interval_s = args.spec.interval_s;
  meta.job = "synthetic GRPO-like training (headroom synth)";
  meta.notes =
      fmt::format("seed {}; illustrative shape, not calibrated to any machine", args.spec.seed);
  if (auto status = writer->Commit(meta); !status) return status;
  fmt::print(stderr, "wrote {} samples to {}\n", rows, args.out);
  return OkStatus();
}

}  // namespace

Command SetupSynth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  auto& s = args->spec;
  app.add_option("--out", args->out, "Trace to write (long CSV) and its .meta.json")->required();
  app.add_option("--gpus", s.gpus, "GPUs")->check(Integer(1, kMaxGpus))->capture_default_str();
  app.add_option("--duration-s", s.duration_s, "Duration in s")
      ->check(Real(kMinDurationS, kMaxDurationS))
      ->capture_default_str();
  app.add_option("--interval-s", s.interval_s, "Sample interval in s")
      ->check(Real(kMinIntervalS, kMaxIntervalS))
      ->capture_default_str();
  app.add_option("--nameplate-w", s.nameplate_w, "Nameplate per GPU in W")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW))
      ->capture_default_str();
  app.add_option("--seed", s.seed, "Random seed")
      ->check(Integer(0, kMaxSeed))
      ->capture_default_str();
  app.add_flag("--minimal", args->minimal, "Only the t_s, gpu and power_w columns");
  return [args] { return RunSynth(*args); };
}

}  // namespace headroom::cli
