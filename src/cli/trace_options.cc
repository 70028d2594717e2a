#include "cli/trace_options.h"

#include <fmt/format.h>

#include "cli/numbers.h"
#include "common/atomic_file.h"

namespace headroom::cli {

void TraceOptions::Register(CLI::App& app) {
  app.add_option("--format", format, "Trace format: auto, long, wide or nvidia-smi")
      ->capture_default_str();
  app.add_option("--gpus", gpus,
                 "GPUs per poll of an nvidia-smi log without an index column (rows of one poll "
                 "are consecutive, in GPU order)")
      ->check(Integer(1, kMaxGpus));
  app.add_option("--max-gpus", max_gpus,
                 "GPUs one trace may name (memory grows with each): a trace or Prometheus "
                 "answer naming more is refused")
      ->check(Integer(1, static_cast<int64_t>(trace::kMaxMaxGpus)))
      ->capture_default_str();
  app.add_option("--nameplate-w", nameplate_w,
                 "Nameplate (TDP) per GPU in W; overrides the trace's .meta.json")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
}

Result<trace::ReadOptions> TraceOptions::ToReadOptions() const {
  auto parsed = trace::ParseTraceFormat(format);
  if (!parsed) return std::move(parsed).error();
  trace::ReadOptions options;
  options.format = *parsed;
  options.gpus_per_poll = gpus;
  options.max_gpus = static_cast<size_t>(max_gpus);
  return options;
}

Status EmitResult(const std::string& report_path, bool json, const Renderers& render) {
  if (!report_path.empty()) {
    if (auto status = WriteFileAtomically(report_path, render.html()); !status) return status;
  }
  if (json) {
    fmt::print("{}\n", render.json());
  } else {
    fmt::print("{}", render.text());
    if (!report_path.empty()) fmt::print("\nreport     {}\n", report_path);
  }
  return OkStatus();
}

void PrintWarnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) fmt::print(stderr, "headroom: warning: {}\n", w);
}

}  // namespace headroom::cli
