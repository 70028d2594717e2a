#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "analysis/analyzer.h"
#include "cli/budget_options.h"
#include "cli/commands.h"
#include "cli/output_files.h"
#include "cli/progress.h"
#include "cli/trace_input.h"
#include "cli/trace_options.h"
#include "common/atomic_file.h"
#include "common/paths.h"
#include "report/html.h"
#include "report/json.h"
#include "report/table.h"
#include "trace/meta.h"
#include "trace/threaded_sink.h"

namespace headroom::cli {
namespace {

struct AnalyzeArgs {
  std::string trace;
  std::optional<double> budget_w;
  std::string budget_schedule;
  std::string scope = "gpu";
  std::string windows = "0.5s,30s,5min";
  std::string band = "0.1,20";
  int threads = 2;
  bool json = false;
  std::string report;
  TraceOptions trace_options;
  PrometheusOptions prometheus;
};

constexpr double kMaxBandHz = 1e6;

Result<std::pair<double, double>> ParseBand(const std::string& text) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos) {
    return Error::Usage(
        fmt::format("--band-hz: {}: expected LO,HI in Hz, e.g. 0.1,20", QuoteForMessage(text)));
  }
  auto lo = ParseReal(std::string_view(text).substr(0, comma), 0.0, kMaxBandHz);
  if (!lo) return Error::Usage(fmt::format("--band-hz: LO {}", lo.error().message()));
  auto hi = ParseReal(std::string_view(text).substr(comma + 1), 0.0, kMaxBandHz);
  if (!hi) return Error::Usage(fmt::format("--band-hz: HI {}", hi.error().message()));
  if (!(*hi > *lo)) {
    return Error::Usage(fmt::format("--band-hz: {}: need LO < HI", QuoteForMessage(text)));
  }
  return std::pair{*lo, *hi};
}

Status RunAnalyze(const AnalyzeArgs& args) {
  if (!args.report.empty()) {
    if (auto st = RefuseOutputOverInput(args.report, "--report", TraceInputs("TRACE", args.trace));
        !st) {
      return st;
    }
    RemoveTempFilesOnSignals();
  }
  analysis::AnalyzeOptions options;
  auto scope = analysis::ParseScope(args.scope);
  if (!scope) return std::move(scope).error();
  options.scope = *scope;
  auto windows = ParseWindowListS("--windows", args.windows);
  if (!windows) return std::move(windows).error();
  options.windows_s = *windows;
  auto band = ParseBand(args.band);
  if (!band) return std::move(band).error();
  options.band_lo_hz = band->first;
  options.band_hi_hz = band->second;
  options.budget_w = args.budget_w;
  if (!args.budget_schedule.empty()) {
    if (args.budget_w) return Error::Usage("--budget-w and --budget-schedule: give one");
    auto schedule = LoadBudgetSchedule(args.budget_schedule, kMaxSitePowerW);
    if (!schedule) return std::move(schedule).error();
    options.budget_schedule = std::move(*schedule);
  }
  options.plot_data = !args.report.empty();
  auto read_options = args.trace_options.ToReadOptions();
  if (!read_options) return std::move(read_options).error();

  if (auto st = args.prometheus.Check(IsPrometheusUrl(args.trace) ? 1 : 0); !st) return st;
  std::vector<std::string> warnings;
  std::optional<trace::TraceMeta> meta;
  if (!IsPrometheusUrl(args.trace)) {
    auto m = trace::LoadMetaFor(args.trace, &warnings);
    if (!m) return std::move(m).error();
    meta = std::move(*m);
  }
  options.nameplate_w = args.trace_options.nameplate_w;
  if (!options.nameplate_w && meta) options.nameplate_w = meta->nameplate_w;

  std::optional<Progress> asking;
  if (IsPrometheusUrl(args.trace)) asking.emplace("querying " + args.trace, std::nullopt);
  auto source = OpenTrace(
      args.trace, 0, args.prometheus, read_options->max_gpus, [&](size_t done, size_t total) {
        if (asking)
          asking->UpdateCount(static_cast<double>(done), static_cast<double>(total), "queries");
      });
  if (!source) return std::move(source).error();
  asking.reset();
  if (source->made_in_memory) read_options->format = trace::TraceFormat::kLong;
  Progress progress("reading " + args.trace, source->source->SizeBytes());
  read_options->on_progress = [&progress](uint64_t bytes) { progress.Update(bytes); };

  analysis::Analyzer analyzer(options);
  // --threads 2: the reader parses on this thread while the analyzer takes the batches before
  // on a second (trace/threaded_sink.h); the same batches, in the same order.
  auto summary = [&] {
    if (args.threads < 2)
      return trace::ReadTrace(*source->source, args.trace, *read_options, analyzer);
    trace::ThreadedSink threaded(analyzer);
    auto read = trace::ReadTrace(*source->source, args.trace, *read_options, threaded);
    threaded.Finish();
    return read;
  }();
  if (!summary) return std::move(summary).error();
  warnings.insert(warnings.end(), summary->warnings.begin(), summary->warnings.end());
  auto result = analyzer.Finish(summary->schema);
  if (!result) return Error::Input(fmt::format("{}: {}", args.trace, result.error().message()));
  PrintWarnings(warnings);

  const report::TraceInfo info{args.trace,
                               source->format.empty()
                                   ? std::string(trace::TraceFormatName(summary->schema.format))
                                   : source->format,
                               source->resolution};
  const auto& r = *result;
  return EmitResult(args.report, args.json,
                    {[&] { return report::AnalyzeReportHtml(r, info); },
                     [&] { return report::AnalyzeToJson(r, info).dump(2); },
                     [&] { return report::AnalyzeToText(r, info); }});
}

}  // namespace

Command SetupAnalyze(CLI::App& app) {
  auto args = std::make_shared<AnalyzeArgs>();
  app.add_option("TRACE", args->trace,
                 "Trace file (long CSV, wide CSV or nvidia-smi log), a saved Prometheus range "
                 "answer (FILE.json), or prometheus://HOST:PORT with --query, --start, --end")
      ->required();
  app.add_option("--budget-w", args->budget_w,
                 "Power budget in W, of one GPU (scope gpu) or of the sum (scope sum)")
      ->check(Real(kMinGpuPowerW, kMaxSitePowerW));
  app.add_option("--budget-schedule", args->budget_schedule,
                 "A budget that moves: CSV t_s,budget_w (a step function in the trace's time, "
                 "units as --budget-w). Without either, the trace's budget_w column is used");
  app.add_option("--scope", args->scope, "gpu: each GPU's own samples; sum: all GPUs summed")
      ->capture_default_str();
  app.add_option("--windows", args->windows,
                 "Window lengths, comma-separated, each with its unit (ms, s, min, h), in "
                 "[1ms, 30 days]")
      ->capture_default_str();
  app.add_option("--band-hz", args->band,
                 "Power-swing band LO,HI in Hz, 0 <= LO < HI <= 1e6 (clipped at Nyquist)")
      ->capture_default_str();
  app.add_option("--threads", args->threads,
                 "1: read and analyse on one thread; 2: reading and analysis at once, on two")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  app.add_flag("--json", args->json, "Print one JSON object instead of tables");
  app.add_option("--report", args->report, "Write a self-contained HTML report to this file");
  args->trace_options.Register(app);
  args->prometheus.Register(app);
  return [args] { return RunAnalyze(*args); };
}

}  // namespace headroom::cli
