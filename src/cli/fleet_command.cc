#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/output_files.h"
#include "cli/progress.h"
#include "cli/trace_input.h"
#include "cli/trace_options.h"
#include "common/atomic_file.h"
#include "common/paths.h"
#include "planning/fleet.h"
#include "report/html.h"
#include "report/json.h"
#include "report/table.h"
#include "trace/meta.h"

namespace headroom::cli {
namespace {

// Option bounds (README, `headroom fleet --help`).
constexpr int64_t kMaxTrials = 100000;
constexpr double kMinBudgetFraction = 0.01;
constexpr double kMaxBudgetFraction = 10.0;
constexpr double kMaxMargin = 10.0;  // +1000 %
constexpr double kMaxCapacityCostUsdPerKwYear = 1e6;
constexpr int64_t kMaxCopies = 100000;
// Grid points x copies x distinct trials: under a minute of composition on one core (about
// 4.6 ns a sample measured, 3.6e9 samples in 16.6 s).
constexpr uint64_t kMaxCompositionSamples = 10'000'000'000;
constexpr uint64_t kMinCompositionSamplesToShow = 100'000'000;

struct FleetArgs {
  std::vector<std::string> traces;
  planning::FleetOptions options;
  std::string offsets = "random";
  std::string windows = "0.5s,30s,5min";
  std::string risk_window = "30s";
  bool json = false;
  std::string report;
  TraceOptions trace_options;
  PrometheusOptions prometheus;
};

// "path[:COPIES]": a trailing ":COPIES" that starts with a digit or a sign is the copy count,
// an integer in [1, kMaxCopies]; anything else after the last ':' is part of the path.
// In prometheus://HOST:PORT[/PREFIX][:COPIES] the colon of the port is not one.
Result<std::pair<std::string, uint32_t>> SplitCopies(const std::string& arg) {
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon + 1 == arg.size()) return std::pair{arg, 1u};
  if (IsPrometheusUrl(arg) && arg.find(':', std::string_view("prometheus://").size()) == colon) {
    return std::pair{arg, 1u};
  }
  const std::string_view suffix = std::string_view(arg).substr(colon + 1);
  const char first = suffix.front();
  if (!(first == '+' || first == '-' || (first >= '0' && first <= '9'))) {
    return std::pair{arg, 1u};
  }
  auto copies = ParseInteger(suffix, 1, kMaxCopies);
  if (!copies) {
    return Error::Usage(fmt::format("TRACE[:COPIES] {}: COPIES {}", QuoteForMessage(arg),
                                    copies.error().message()));
  }
  return std::pair{arg.substr(0, colon), static_cast<uint32_t>(*copies)};
}

Status RunFleet(FleetArgs& args) {
  auto offsets = planning::ParseOffsets(args.offsets);
  if (!offsets) return std::move(offsets).error();
  args.options.offsets = *offsets;
  auto windows = ParseWindowListS("--windows", args.windows);
  if (!windows) return std::move(windows).error();
  args.options.windows_s = *windows;
  auto risk = ParseWindowS("--risk-window", args.risk_window);
  if (!risk) return std::move(risk).error();
  args.options.risk_window_s = *risk;
  auto read_options = args.trace_options.ToReadOptions();
  if (!read_options) return std::move(read_options).error();
  std::vector<std::pair<std::string, uint32_t>> traces;
  for (const std::string& arg : args.traces) {
    auto split = SplitCopies(arg);
    if (!split) return std::move(split).error();
    traces.push_back(std::move(split).value());
  }
  if (!args.report.empty()) {
    std::vector<std::pair<std::string, std::string>> inputs;
    for (const auto& trace : traces) {
      for (auto& input : TraceInputs("TRACE", trace.first)) inputs.push_back(std::move(input));
    }
    if (auto st = RefuseOutputOverInput(args.report, "--report", inputs); !st) return st;
    RemoveTempFilesOnSignals();
  }

  size_t urls = 0;
  for (const auto& trace : traces) urls += IsPrometheusUrl(trace.first) ? 1 : 0;
  if (auto st = args.prometheus.Check(urls); !st) return st;
  std::vector<std::string> warnings;
  std::vector<planning::Job> jobs;
  size_t url_index = 0;
  for (const auto& [path, copies] : traces) {
    const bool url = IsPrometheusUrl(path);
    if (url && !args.trace_options.nameplate_w) {
      return Error::Usage(fmt::format("{}: no nameplate: give --nameplate-w", path));
    }
    // The trace first: a missing trace is "cannot open", whatever else is missing.
    std::optional<Progress> asking;
    if (url) asking.emplace("querying " + path, std::nullopt);
    auto source = OpenTrace(path, url ? url_index++ : 0, args.prometheus, read_options->max_gpus,
                            [&](size_t done, size_t total) {
                              if (asking) {
                                asking->UpdateCount(static_cast<double>(done),
                                                    static_cast<double>(total), "queries");
                              }
                            });
    if (!source) return std::move(source).error();
    asking.reset();
    if (!source->resolution.empty()) {
      warnings.push_back(fmt::format("{}: {}", path, source->resolution));
    }
    std::optional<double> nameplate_w = args.trace_options.nameplate_w;
    if (!url) {
      auto meta = trace::LoadMetaFor(path, &warnings);
      if (!meta) return std::move(meta).error();
      if (!nameplate_w && *meta) nameplate_w = (*meta)->nameplate_w;
    }
    if (!nameplate_w) {
      return Error::Usage(
          fmt::format("{}: no nameplate: give --nameplate-w or a {} with "
                      "nameplate_w",
                      path, trace::MetaPathFor(path)));
    }
    Progress progress("reading " + path, source->source->SizeBytes());
    trace::ReadOptions options = *read_options;
    if (source->made_in_memory) options.format = trace::TraceFormat::kLong;
    options.on_progress = [&progress](uint64_t bytes) { progress.Update(bytes); };
    trace::CollectingSink sink;
    auto summary = trace::ReadTrace(*source->source, path, options, sink);
    if (!summary) return std::move(summary).error();
    warnings.insert(warnings.end(), summary->warnings.begin(), summary->warnings.end());
    auto job = planning::MakeJob(path, copies, std::move(sink.series()),
                                 summary->schema.Has(trace::Field::kTokens), *nameplate_w);
    if (!job) return std::move(job).error();
    jobs.push_back(std::move(job).value());
  }
  // Composition time grows with grid points x copies x trials: bounded, and shown.
  const uint64_t samples = planning::CompositionSamples(jobs, args.options);
  if (samples > kMaxCompositionSamples) {
    uint64_t copies = 0;
    for (const auto& job : jobs) copies += job.copies;
    return Error::Usage(fmt::format(
        "fleet: {} copies x {} trials on the fleet grid make {:.3g} samples to compose, more "
        "than the {:.3g} allowed: fewer COPIES or --trials, or shorter traces",
        copies, args.options.offsets == planning::Offsets::kNone ? 1u : args.options.trials,
        static_cast<double>(samples), static_cast<double>(kMaxCompositionSamples)));
  }
  Progress compose_progress("composing the fleet", std::nullopt);
  if (samples >= kMinCompositionSamplesToShow) {
    args.options.on_progress = [&compose_progress](uint64_t done, uint64_t total) {
      compose_progress.UpdateCount(static_cast<double>(done) / 1e6,
                                   static_cast<double>(total) / 1e6, "M samples");
    };
  }
  auto result = planning::Compose(jobs, args.options);
  if (!result) return std::move(result).error();
  PrintWarnings(warnings);

  const auto& r = *result;
  return EmitResult(args.report, args.json,
                    {[&] { return report::FleetReportHtml(r, jobs); },
                     [&] { return report::FleetToJson(r, jobs).dump(2); },
                     [&] { return report::FleetToText(r, jobs); }});
}

}  // namespace

Command SetupFleet(CLI::App& app) {
  auto args = std::make_shared<FleetArgs>();
  auto& o = args->options;
  app.add_option("TRACE[:COPIES]", args->traces,
                 "Job traces (files, saved Prometheus answers FILE.json, or "
                 "prometheus://HOST:PORT with --query); each is one job (all its GPUs), repeated "
                 "COPIES times (1 to 100000; copies x trials x grid points at most 1e10)")
      ->required();
  app.add_option("--seed", o.seed, "Seed of the random offsets")
      ->check(Integer(0, kMaxSeed))
      ->capture_default_str();
  app.add_option("--offsets", args->offsets,
                 "random: each copy starts at a random point of its trace; none: all aligned")
      ->capture_default_str();
  app.add_option("--trials", o.trials, "Random compositions to draw")
      ->check(Integer(1, kMaxTrials))
      ->capture_default_str();
  app.add_option("--windows", args->windows,
                 "Window lengths, each with its unit (ms, s, min, h), in [1ms, 30 days]")
      ->capture_default_str();
  auto* budget = app.add_option("--budget-w", o.budget_w, "Fleet power budget in W")
                     ->check(Real(kMinGpuPowerW, kMaxSitePowerW));
  app.add_option("--budget-fraction", o.budget_fraction,
                 "Fleet power budget as a fraction of nameplate")
      ->check(Real(kMinBudgetFraction, kMaxBudgetFraction))
      ->excludes(budget);
  app.add_option("--quantile", o.quantile,
                 "Quantile of the trials' largest risk-window power used to size the fleet")
      ->check(Real(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--risk-window", args->risk_window,
                 "Window the oversubscription is sized on, with its unit, in [1ms, 30 days]")
      ->capture_default_str();
  app.add_option("--margin", o.margin, "Safety margin on the sized peak (0.05 = 5 %)")
      ->check(Real(0.0, kMaxMargin))
      ->capture_default_str();
  app.add_option("--capacity-cost-usd-per-kw-year", o.capacity_cost_usd_per_kw_year,
                 "Yearly cost of 1 kW of provisioned power capacity (USD)")
      ->check(Real(0.0, kMaxCapacityCostUsdPerKwYear))
      ->capture_default_str();
  app.add_option("--energy-price-usd-per-mwh", o.energy_price_usd_per_mwh,
                 "Energy price (USD per MWh)")
      ->check(Real(0.0, kMaxEnergyPriceUsdPerMwh))
      ->capture_default_str();
  app.add_option("--carbon-g-per-kwh", o.carbon_g_per_kwh, "Grid carbon intensity (g CO2e per kWh)")
      ->check(Real(0.0, kMaxCarbonGPerKwh))
      ->capture_default_str();
  app.add_flag("--json", args->json, "Print one JSON object instead of tables");
  app.add_option("--report", args->report, "Write a self-contained HTML report to this file");
  args->trace_options.Register(app);
  args->prometheus.Register(app);
  return [args] { return RunFleet(*args); };
}

}  // namespace headroom::cli
