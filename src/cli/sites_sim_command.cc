// `headroom sites-sim`: one DiLoCo run's workers on several sites' spare power, placed by
// policy (docs/SITE.md, "Several sites"). Thin: options, the signals files, progress, outputs.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/trace_options.h"
#include "common/atomic_file.h"
#include "coord/layout.h"
#include "site_sim/sites_sim.h"
#include "site_sim/sites_sim_report.h"

namespace headroom::cli {
namespace {

struct SitesSimArgs {
  std::vector<std::string> sites;  // NAME:FILE:BUDGET_W
  std::string policies;            // "": carbon, spare, single:NAME of every site
  double max_carbon_g_per_kwh = 300.0;
  int workers = 8;
  int min_workers = 4;
  double duration_s = 86400.0;
  int threads = 8;
  double watts_per_core = 10.0;
  int inner_steps = 100;
  bool json = false;
  std::string report;
  std::string schedule_dir;
};

Status RunSitesSimCommand(const SitesSimArgs& args) {
  site_sim::SitesSimConfig config;
  for (const std::string& spec : args.sites) {
    const size_t a = spec.find(':');
    const size_t b = spec.rfind(':');
    if (a == std::string::npos || a == b) {
      return Error::Usage(fmt::format("--site '{}': expected NAME:FILE:BUDGET_W", spec));
    }
    site_sim::SitesSimSite site;
    site.name = spec.substr(0, a);
    if (auto st = coord::CheckName(site.name, "--site NAME"); !st) return st;
    for (const auto& s : config.sites) {
      if (s.name == site.name) {
        return Error::Usage(fmt::format("--site '{}': the name is given twice", site.name));
      }
    }
    auto budget = ParseReal(spec.substr(b + 1), 1.0, 1e9);
    if (!budget) {
      return Error::Usage(fmt::format("--site '{}': BUDGET_W: {}", spec, budget.error().message()));
    }
    site.site_budget_w = *budget;
    auto signals = site_sim::ReadSiteSignals(spec.substr(a + 1, b - a - 1));
    if (!signals) return std::move(signals).error();
    site.signals = std::move(*signals);
    config.sites.push_back(std::move(site));
  }
  config.policies.clear();
  for (size_t pos = 0; !args.policies.empty() && pos <= args.policies.size();) {
    const size_t comma = std::min(args.policies.find(',', pos), args.policies.size());
    config.policies.push_back(args.policies.substr(pos, comma - pos));
    pos = comma + 1;
  }
  config.max_carbon_g_per_kwh = args.max_carbon_g_per_kwh;
  config.workers = args.workers;
  config.min_workers = args.min_workers;
  config.duration_s = args.duration_s;
  config.worker.threads = args.threads;
  config.worker.watts_per_core = args.watts_per_core;
  config.worker.inner_steps = args.inner_steps;
  if (!args.schedule_dir.empty()) {
    // Before the simulation, not after it: a directory (made now) or nothing yet.
    std::error_code ec;
    std::filesystem::create_directories(args.schedule_dir, ec);
    if (!std::filesystem::is_directory(args.schedule_dir)) {
      return Error::Io(fmt::format("--schedule-dir {}: not a directory{}", args.schedule_dir,
                                   ec ? fmt::format(" ({})", ec.message()) : std::string()));
    }
  }
  Progress progress("sites-sim", std::nullopt);
  auto result = site_sim::RunSitesSim(config, [&](double done_s, double total_s) {
    progress.UpdateCount(done_s, total_s, "simulated s");
  });
  if (!result) return std::move(result).error();
  const auto& r = *result;
  if (!args.schedule_dir.empty()) {
    // Each run's membership per round, for `headroom diloco replay --schedule`.
    for (const auto& run : r.runs) {
      std::string name = run.policy;
      std::replace(name.begin(), name.end(), ':', '-');
      std::string csv = fmt::format(
          "# {}: the workers of each round (headroom sites-sim)\n"
          "round,workers\n",
          run.policy);
      for (size_t i = 0; i < run.round_members.size(); ++i) {
        csv += fmt::format("{},{}\n", i, run.round_members[i]);
      }
      const std::string path =
          (std::filesystem::path(args.schedule_dir) / (name + ".csv")).string();
      if (auto st = WriteFileAtomically(path, csv); !st) return st;
    }
  }
  return EmitResult(args.report, args.json,
                    {[&] { return site_sim::SitesSimReportHtml(r, config); },
                     [&] { return site_sim::SitesSimToJson(r).dump(2); },
                     [&] { return site_sim::SitesSimToText(r); }});
}

}  // namespace

Command SetupSitesSim(CLI::App& app) {
  auto a = std::make_shared<SitesSimArgs>();
  app.add_option("--site", a->sites,
                 "NAME:FILE:BUDGET_W, repeatable: a site, its signals file (t_s,spare_w,"
                 "price_eur_per_mwh,carbon_g_per_kwh) and its budget")
      ->required();
  app.add_option("--policies", a->policies,
                 "Placements to compare, comma-separated: carbon, price, spare, single:NAME "
                 "(default: carbon, spare and single:NAME of every site; the dedicated run is "
                 "always added)");
  app.add_option("--max-carbon-g-per-kwh", a->max_carbon_g_per_kwh,
                 "`carbon`: a site above this intensity takes workers only to reach "
                 "--min-workers")
      ->check(Real(0.0, 5000.0))
      ->capture_default_str();
  app.add_option("--workers", a->workers, "The run's workers")
      ->check(Integer(1, 1000))
      ->capture_default_str();
  app.add_option("--min-workers", a->min_workers,
                 "A round starts only with this many placed (the floor for progress)")
      ->check(Integer(1, 1000))
      ->capture_default_str();
  app.add_option("--duration-s", a->duration_s, "Simulated time")
      ->check(Real(60.0, 30 * 86400.0))
      ->capture_default_str();
  app.add_option("--opportunistic-threads", a->threads, "Each worker's cores")
      ->check(Integer(1, 1024))
      ->capture_default_str();
  app.add_option("--cpu-watts-per-core", a->watts_per_core, "W per busy core")
      ->check(Real(0.1, 1000.0))
      ->capture_default_str();
  app.add_option("--inner-steps", a->inner_steps, "H")
      ->check(Integer(1, 100000))
      ->capture_default_str();
  app.add_option("--schedule-dir", a->schedule_dir,
                 "Write each run's workers per round to DIR/<policy>.csv (round,workers), for "
                 "`headroom diloco replay --schedule`");
  app.add_flag("--json", a->json, "Print the result as JSON");
  app.add_option("--report", a->report, "Write an HTML report");
  return [a]() -> Status { return RunSitesSimCommand(*a); };
}

}  // namespace headroom::cli
