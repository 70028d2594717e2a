#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cli/commands.h"
#include "cli/output_files.h"
#include "cli/progress.h"
#include "common/atomic_file.h"
#include "trace/synthetic.h"
#include "trace/writer.h"

namespace headroom::cli {
namespace {

struct SynthArgs {
  trace::SyntheticSpec spec;
  std::string out;
  bool minimal = false;
};

std::bitset<trace::kFieldCount> SynthFields(bool minimal) {
  std::bitset<trace::kFieldCount> fields;
  if (!minimal) {
    fields.set(trace::FieldIndex(trace::Field::kStep));
    fields.set(trace::FieldIndex(trace::Field::kTokens));
  }
  return fields;
}

trace::TraceRow RowOf(const trace::SyntheticSample& s) {
  trace::TraceRow row;
  row.t_s = s.t_s;
  row.gpu = s.gpu;
  row.power_w = s.power_w;
  row.phase = s.phase;
  row.fields[trace::FieldIndex(trace::Field::kStep)] = s.step;
  row.fields[trace::FieldIndex(trace::Field::kTokens)] = s.tokens;
  return row;
}

// The size of the trace `args` makes, about: the rows are known (ticks x GPUs), the bytes per
// row are measured on the first kProbeRows rows (the generator's start does not depend on the
// duration), with the time text measured over the whole duration.
double ProjectSynthBytes(const SynthArgs& args) {
  constexpr double kProbeRows = 100'000;
  const double ticks = std::floor(args.spec.duration_s / args.spec.interval_s) + 1;
  const double gpus = args.spec.gpus;
  trace::SyntheticSpec probe = args.spec;
  probe.duration_s =
      args.spec.interval_s * std::min(ticks - 1, std::max(0.0, std::floor(kProbeRows / gpus)));
  const auto fields = SynthFields(args.minimal);
  std::string line;
  double bytes = 0.0, time_bytes = 0.0, rows = 0.0;
  trace::GenerateSyntheticTrace(probe, [&](const trace::SyntheticSample& s) {
    trace::TraceWriter::FormatRow(RowOf(s), fields, /*with_phase=*/!args.minimal, line);
    bytes += static_cast<double>(line.size());
    time_bytes += static_cast<double>(fmt::formatted_size("{}", s.t_s));
    rows += 1.0;
  });
  constexpr int kTimeSamples = 64;
  double full_time_bytes = 0.0;
  for (int i = 0; i < kTimeSamples; ++i) {
    const double t_s = std::floor(ticks * (i + 0.5) / kTimeSamples) * args.spec.interval_s;
    full_time_bytes += static_cast<double>(fmt::formatted_size("{}", std::round(t_s * 1e6) / 1e6));
  }
  return ticks * gpus * ((bytes - time_bytes) / rows + full_time_bytes / kTimeSamples);
}

Status RunSynth(const SynthArgs& args) {
  if (auto st = CheckOutputSpace("synth", args.out, ProjectSynthBytes(args)); !st) return st;
  RemoveTempFilesOnSignals();
  auto writer =
      trace::TraceWriter::Open(args.out, SynthFields(args.minimal), /*with_phase=*/!args.minimal);
  if (!writer) return std::move(writer).error();
  uint64_t rows = 0;
  Progress progress("synth " + args.out, std::nullopt);
  trace::GenerateSyntheticTrace(args.spec, [&](const trace::SyntheticSample& s) {
    writer->Write(RowOf(s));
    if (++rows % 65536 == 0) progress.UpdateCount(s.t_s, args.spec.duration_s, "s");
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
