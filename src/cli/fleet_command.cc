#include <fmt/format.h>

#include <charconv>
#include <memory>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/trace_options.h"
#include "common/duration.h"
#include "fleet/fleet.h"
#include "report/html.h"
#include "report/json.h"
#include "report/table.h"
#include "trace/meta.h"

namespace headroom::cli {
namespace {

struct FleetArgs {
  std::vector<std::string> traces;
  fleet::FleetOptions options;
  std::string offsets = "random";
  std::string windows = "0.5s,30s,5min";
  std::string risk_window = "30s";
  bool json = false;
  std::string report;
  TraceOptions trace_options;
};

// "path[:COPIES]": a trailing ":<digits>" is the copy count.
Result<std::pair<std::string, uint32_t>> SplitCopies(const std::string& arg) {
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon + 1 == arg.size()) return std::pair{arg, 1u};
  const std::string_view digits(arg.data() + colon + 1, arg.size() - colon - 1);
  uint32_t copies = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), copies);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::pair{arg, 1u};
  if (copies == 0) return Error::Usage(fmt::format("'{}': COPIES must be >= 1", arg));
  return std::pair{arg.substr(0, colon), copies};
}

Status RunFleet(FleetArgs& args) {
  auto offsets = fleet::ParseOffsets(args.offsets);
  if (!offsets) return std::move(offsets).error();
  args.options.offsets = *offsets;
  auto windows = ParseDurationListS(args.windows);
  if (!windows) return std::move(windows).error();
  args.options.windows_s = *windows;
  auto risk = ParseDurationS(args.risk_window);
  if (!risk) return std::move(risk).error();
  args.options.risk_window_s = *risk;
  auto read_options = args.trace_options.ToReadOptions();
  if (!read_options) return std::move(read_options).error();

  std::vector<std::string> warnings;
  std::vector<fleet::Job> jobs;
  for (const std::string& arg : args.traces) {
    auto split = SplitCopies(arg);
    if (!split) return std::move(split).error();
    const auto& [path, copies] = *split;
    auto meta = trace::LoadMetaFor(path, &warnings);
    if (!meta) return std::move(meta).error();
    std::optional<double> nameplate_w = args.trace_options.nameplate_w;
    if (!nameplate_w && *meta) nameplate_w = (*meta)->nameplate_w;
    if (!nameplate_w) {
      return Error::Usage(
          fmt::format("{}: no nameplate: give --nameplate-w or a {} with "
                      "nameplate_w",
                      path, trace::MetaPathFor(path)));
    }
    auto source = trace::FileSource::Open(path);
    if (!source) return std::move(source).error();
    Progress progress("reading " + path, (*source)->SizeBytes());
    trace::ReadOptions options = *read_options;
    options.on_progress = [&progress](uint64_t bytes) { progress.Update(bytes); };
    trace::CollectingSink sink;
    auto summary = trace::ReadTrace(**source, path, options, sink);
    if (!summary) return std::move(summary).error();
    warnings.insert(warnings.end(), summary->warnings.begin(), summary->warnings.end());
    auto job = fleet::MakeJob(path, copies, std::move(sink.series()),
                              summary->schema.Has(trace::Field::kTokens), *nameplate_w);
    if (!job) return std::move(job).error();
    jobs.push_back(std::move(job).value());
  }
  auto result = fleet::Compose(jobs, args.options);
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
                 "Job traces; each is one job (all its GPUs), repeated COPIES times")
      ->required();
  app.add_option("--seed", o.seed, "Seed of the random offsets")->capture_default_str();
  app.add_option("--offsets", args->offsets,
                 "random: each copy starts at a random point of its trace; none: all aligned")
      ->capture_default_str();
  app.add_option("--trials", o.trials, "Random compositions to draw")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--windows", args->windows, "Window lengths (units ms, s, min, h)")
      ->capture_default_str();
  auto* budget = app.add_option("--budget-w", o.budget_w, "Fleet power budget in W")
                     ->check(CLI::PositiveNumber);
  app.add_option("--budget-fraction", o.budget_fraction,
                 "Fleet power budget as a fraction of nameplate")
      ->check(CLI::PositiveNumber)
      ->excludes(budget);
  app.add_option("--quantile", o.quantile,
                 "Quantile of the trials' largest risk-window power used to size the fleet")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--risk-window", args->risk_window, "Window the oversubscription is sized on")
      ->capture_default_str();
  app.add_option("--margin", o.margin, "Safety margin on the sized peak (0.05 = 5 %)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--capacity-cost-usd-per-kw-year", o.capacity_cost_usd_per_kw_year,
                 "Yearly cost of 1 kW of provisioned power capacity (USD)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--energy-price-usd-per-mwh", o.energy_price_usd_per_mwh,
                 "Energy price (USD per MWh)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--carbon-g-per-kwh", o.carbon_g_per_kwh, "Grid carbon intensity (g CO2e per kWh)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--json", args->json, "Print one JSON object instead of tables");
  app.add_option("--report", args->report, "Write a self-contained HTML report to this file");
  args->trace_options.Register(app);
  return [args] { return RunFleet(*args); };
}

}  // namespace headroom::cli
