#pragma once
// `headroom sites-sim`: one DiLoCo run's workers on the spare power of several sites
// (docs/SITE.md, "Several sites"). Each site is a SimSite (site_sim/sim_site.h): its own
// coordinator and budget over its own in-memory store, on simulated time; its guaranteed jobs
// are one member whose demand and power are the site budget less the spare power of the site's
// signals file; the workers are opportunistic members of the site they are placed at, powered
// and paced as in fleet-sim (OpportunisticConfig). At every round's start a placement
// policy says how many workers train where, each site taking as many whole workers as its
// spare watts hold (x `fill`), at most `workers` in all; a round starts only with
// `min_workers` placed (the floor for progress):
//   carbon       the sites in order of grid carbon intensity, then price; a site above
//                `max_carbon_g_per_kwh` only to reach the floor;
//   price        in order of price, then carbon;
//   spare        in order of spare watts (most first), the signals ignored;
//   single:NAME  that site only.
// The same run on dedicated workers
// (all of them every round, on their own power at the first site) is the reference. Pure
// simulation: deterministic, no I/O, no clock.
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "site_sim/fleet_sim.h"
#include "site_sim/site_signals.h"

namespace headroom::site_sim {

struct SitesSimSite {
  std::string name;
  SiteSignals signals;
  double site_budget_w = 0.0;
};

struct SitesSimConfig {
  std::vector<SitesSimSite> sites;
  std::vector<std::string> policies;    // "": carbon, spare, single:NAME of every site
  double max_carbon_g_per_kwh = 300.0;  // `carbon`: above it, the floor only
  int workers = 8;
  int min_workers = 2;
  OpportunisticConfig worker;  // `workers` is ignored: the count above
  double duration_s = 86400.0;
  double interval_s = 1.0;
  double period_s = 1.0;
  int64_t lease_ttl_s = 3;
  double fill = 0.9;  // a site takes whole workers for this share of its spare watts
  // Between sites, per byte sent: a path of ten core routers at 2 W/Gbps and twenty
  // transceivers at 0.09 W/Gbps (arXiv 2504.14022, 2024 devices): 21.8 W/Gbps.
  double wan_j_per_byte = 21.8e-9 * 8.0;
  double wan_rtt_s = 0.05;
};

struct SitesSimSiteResult {
  std::string name;
  double energy_j = 0.0;                 // the workers' there
  double carbon_g = 0.0;                 // of that energy, at the site's intensity of the moment
  double cost_eur = 0.0;                 // at its price of the moment
  double worker_s = 0.0;                 // worker-seconds placed there
  double spare_j = 0.0;                  // its spare power x time (what could have been used)
  std::vector<int> workers;              // per minute: workers placed there
  std::vector<double> power_w;           // per minute: the workers' mean power there
  std::vector<double> spare_w;           // per minute: the spare power of its signals
  std::vector<double> carbon_g_per_kwh;  // per minute: its grid's intensity
};

struct SitesSimRun {
  std::string policy;  // carbon, price, spare, single:NAME, dedicated
  double tokens = 0.0;
  int rounds = 0;
  double energy_j = 0.0;
  double compute_energy_j = 0.0;
  double carbon_g = 0.0;
  double cost_eur = 0.0;
  double coordination_j = 0.0;  // membership, exchanges (CPU and bytes), resyncs
  double wan_bytes = 0.0, lan_bytes = 0.0;
  int moves = 0;                   // a worker placed at another site than its last
  double idle_s = 0.0;             // no round possible (fewer than min_workers placeable)
  std::vector<int> round_members;  // per completed round
  std::vector<SitesSimSiteResult> sites;
  double carbon_g_per_mtoken() const { return tokens > 0.0 ? carbon_g / (tokens / 1e6) : 0.0; }
};

struct SitesSimResult {
  double duration_s = 0.0;
  int workers = 0;
  std::vector<SitesSimRun> runs;  // the policies asked for, then "dedicated"
  std::vector<std::string> site_names;
  const SitesSimRun* Find(const std::string& policy) const {
    for (const SitesSimRun& r : runs) {
      if (r.policy == policy) return &r;
    }
    return nullptr;
  }
};

// Policies by name (none: carbon, spare and single:NAME of every site); an unknown one is a
// usage error naming it.
Result<SitesSimResult> RunSitesSim(const SitesSimConfig& config,
                                   const std::function<void(double, double)>& progress);

}  // namespace headroom::site_sim
