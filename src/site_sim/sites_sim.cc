#include "site_sim/sites_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>

#include "coord/coordinator.h"
#include "coord/counting_store.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "diloco_site/site_power.h"

namespace headroom::sim {
namespace {

constexpr double kMinSiteWorkerDuty = 0.05;  // below it a worker pauses (diloco/worker.cc)
constexpr double kSimJPerKwh = 3.6e6;

// One site: its store and coordinator on simulated time, its guaranteed jobs as one member.
struct SimSite {
  const SitesSimSite* spec = nullptr;
  std::unique_ptr<coord::MemoryStore> store;
  std::unique_ptr<coord::CountingStore> worker_store, coordinator_store;
  std::unique_ptr<coord::Coordinator> coordinator;
  std::unique_ptr<coord::SiteMember> jobs;
  SitesSimSiteResult result;
  double minute_start_j = 0.0;
};

struct SiteWorker {
  int site = -1;  // placed at; -1: nowhere
  std::unique_ptr<coord::SiteMember> member;
  double allowed = 0.0;
  double power_w = 0.0;  // decided at the last tick
  bool in_round = false;
  int model_round = 0;
  int last_site = -1;
  int incarnation = 0;  // a new member name per placement (the old lease may linger)
};

// How many whole workers each site takes at time t under a policy.
std::vector<int> Placement(const std::string& policy, const SitesSimConfig& config, double full_w,
                           double t_s) {
  const size_t n = config.sites.size();
  std::vector<int> out(n, 0);
  const auto signal = [&](size_t i) -> const SiteSignal& {
    return config.sites[i].signals.At(t_s);
  };
  const auto fits = [&](size_t i) {
    return static_cast<int>(std::floor(config.fill * signal(i).spare_w / full_w));
  };
  if (policy.starts_with("single:")) {
    for (size_t i = 0; i < n; ++i) {
      if (config.sites[i].name == policy.substr(7)) {
        out[i] = std::clamp(fits(i), 0, config.workers);
      }
    }
    return out;
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const SiteSignal &x = signal(a), &y = signal(b);
    if (policy == "carbon") {
      return x.carbon_g_per_kwh != y.carbon_g_per_kwh ? x.carbon_g_per_kwh < y.carbon_g_per_kwh
                                                      : x.price_eur_per_mwh < y.price_eur_per_mwh;
    }
    if (policy == "price") {
      return x.price_eur_per_mwh != y.price_eur_per_mwh ? x.price_eur_per_mwh < y.price_eur_per_mwh
                                                        : x.carbon_g_per_kwh < y.carbon_g_per_kwh;
    }
    return x.spare_w > y.spare_w;  // spare
  });
  int placed = 0;
  for (size_t i : order) {
    // Carbon-aware: a dirty site only for what the floor still lacks.
    const int want = policy == "carbon" && signal(i).carbon_g_per_kwh > config.max_carbon_g_per_kwh
                         ? std::max(0, config.min_workers - placed)
                         : config.workers - placed;
    out[i] = std::clamp(fits(i), 0, want);
    placed += out[i];
  }
  return out;
}

Result<SitesSimRun> RunPolicy(const SitesSimConfig& config, const std::string& policy,
                              const std::function<void(double, double)>& progress, double offset,
                              double total) {
  double now_s = 0.0;
  const auto clock = [&now_s] { return now_s; };
  const auto quiet = [](const std::string&) {};
  const OpportunisticConfig& oc = config.worker;
  const double full_w = dist::WorkerPowerW(oc.threads, 1.0, oc.watts_per_core);
  const double round_s = oc.inner_steps * oc.step_s;
  const double frame = FrameBytes(oc);
  const bool dedicated = policy == "dedicated";

  std::vector<SimSite> sites(config.sites.size());
  for (size_t i = 0; i < sites.size(); ++i) {
    SimSite& s = sites[i];
    s.spec = &config.sites[i];
    s.result.name = s.spec->name;
    s.store = std::make_unique<coord::MemoryStore>(clock);
    s.worker_store = std::make_unique<coord::CountingStore>(*s.store);
    s.coordinator_store = std::make_unique<coord::CountingStore>(*s.store);
    coord::CoordinatorConfig cc;
    cc.site = s.spec->name;
    cc.site_budget_w = s.spec->site_budget_w;
    cc.period_s = config.period_s;
    cc.lease_ttl_s = config.lease_ttl_s;
    cc.id = s.spec->name;
    s.coordinator = std::make_unique<coord::Coordinator>(*s.coordinator_store, cc, clock, quiet);
    coord::MemberConfig mc;
    mc.site = s.spec->name;
    mc.job = "site-jobs";
    mc.nameplate_w = s.spec->site_budget_w;
    mc.lease_ttl_s = config.lease_ttl_s;
    mc.fence_margin_s = std::min(1.0, static_cast<double>(config.lease_ttl_s) / 3.0);
    mc.update_s = config.interval_s;
    s.jobs = std::make_unique<coord::SiteMember>(*s.store, mc, clock, quiet);
  }
  std::vector<SiteWorker> workers(static_cast<size_t>(config.workers));
  const auto place = [&](SiteWorker& w, int site, int index) {
    if (w.site == site) return;
    if (w.member) {
      w.member->Leave();
      w.member.reset();
    }
    w.site = site;
    w.allowed = 0.0;
    if (site < 0) return;
    if (w.last_site >= 0 && w.last_site != site) ++w.incarnation;
    w.last_site = site;
    coord::MemberConfig mc;
    mc.site = sites[static_cast<size_t>(site)].spec->name;
    mc.job = fmt::format("diloco-{}-{}", index + 1, w.incarnation);
    mc.gpus = 1;
    mc.nameplate_w = full_w;
    mc.lease_ttl_s = config.lease_ttl_s;
    mc.fence_margin_s = std::min(1.0, static_cast<double>(config.lease_ttl_s) / 3.0);
    mc.job_class = coord::JobClass::kOpportunistic;
    w.member = std::make_unique<coord::SiteMember>(*sites[static_cast<size_t>(site)].worker_store,
                                                   mc, clock, quiet);
  };

  SitesSimRun run;
  run.policy = policy;
  double progress_s = 0.0, exchange_left_s = 0.0, exchange_busy = 0.0;
  int members = 0;
  const int64_t ticks = static_cast<int64_t>(std::llround(config.duration_s / config.interval_s));
  const int64_t per_period =
      std::max<int64_t>(1, std::llround(config.period_s / config.interval_s));
  const int64_t per_minute = std::max<int64_t>(1, std::llround(60.0 / config.interval_s));
  for (int64_t k = 0; k <= ticks; ++k) {
    now_s = static_cast<double>(k) * config.interval_s;
    // What the workers drew since the last tick, at each site's signals of that interval.
    if (k > 0) {
      for (SiteWorker& w : workers) {
        if (w.site < 0 || !(w.power_w > 0.0)) continue;
        SimSite& s = sites[static_cast<size_t>(w.site)];
        const SiteSignal& sig = s.spec->signals.At(now_s - config.interval_s);
        const double j = w.power_w * config.interval_s;
        s.result.energy_j += j;
        s.result.carbon_g += j / kSimJPerKwh * sig.carbon_g_per_kwh;
        s.result.cost_eur += j / kSimJPerKwh / 1000.0 * sig.price_eur_per_mwh;
        run.energy_j += j;
      }
      for (SimSite& s : sites)
        s.result.spare_j += s.spec->signals.At(now_s).spare_w * config.interval_s;
      for (const SiteWorker& w : workers) {
        if (w.site >= 0) sites[static_cast<size_t>(w.site)].result.worker_s += config.interval_s;
      }
    }
    // The sites' jobs, then the workers, serve and step.
    for (SimSite& s : sites) {
      const double spare_w = std::min(s.spec->site_budget_w, s.spec->signals.At(now_s).spare_w);
      const double used_w = s.spec->site_budget_w - spare_w;
      s.jobs->Current();
      s.jobs->Observe(now_s, used_w, "train", 0.0);
      s.jobs->SetDemandW(used_w);  // the trace says what they draw: their demand
      s.jobs->Step();
    }
    for (SiteWorker& w : workers) {
      if (dedicated) {
        w.allowed = 1.0;
        continue;
      }
      if (!w.member) {
        w.allowed = 0.0;
        continue;
      }
      w.member->Step();
      const coord::Acting a = w.member->Current();
      const double grant_w = a.state == coord::Acting::State::kGranted ? a.job_budget_w : 0.0;
      w.allowed = dist::DutyForGrant(grant_w, oc.threads, oc.watts_per_core);
    }
    for (SiteWorker& w : workers) w.power_w = 0.0;
    if (exchange_left_s > 0.0) {
      for (SiteWorker& w : workers) {
        if (!w.in_round) continue;
        w.power_w = exchange_busy * oc.watts_per_core;
        run.coordination_j += w.power_w * config.interval_s;
      }
      exchange_left_s -= config.interval_s;
      if (exchange_left_s <= 1e-9) {
        exchange_left_s = 0.0;
        ++run.rounds;
        run.round_members.push_back(members);
        run.tokens +=
            static_cast<double>(members) * oc.inner_steps * oc.threads * oc.tokens_per_thread_step;
        for (SiteWorker& w : workers) {
          if (w.in_round) w.model_round = run.rounds;
          w.in_round = false;
        }
        members = 0;
      }
    } else {
      if (members == 0) {
        // A round starts: the placement.
        std::vector<int> per_site(sites.size(), 0);
        if (dedicated) {
          per_site[0] = config.workers;
        } else {
          per_site = Placement(policy, config, full_w, now_s);
        }
        const int placeable = std::accumulate(per_site.begin(), per_site.end(), 0);
        if (placeable < config.min_workers) {
          for (size_t i = 0; i < workers.size(); ++i) place(workers[i], -1, static_cast<int>(i));
          run.idle_s += config.interval_s;
        } else {
          // Workers already at a site stay there while it keeps room for them; the rest move.
          std::vector<int> room = per_site;
          std::vector<size_t> unplaced;
          for (size_t i = 0; i < workers.size(); ++i) {
            SiteWorker& w = workers[i];
            if (w.site >= 0 && room[static_cast<size_t>(w.site)] > 0) {
              --room[static_cast<size_t>(w.site)];
            } else {
              unplaced.push_back(i);
            }
          }
          size_t next = 0;
          for (size_t si = 0; si < room.size(); ++si) {
            for (; room[si] > 0 && next < unplaced.size(); --room[si], ++next) {
              SiteWorker& w = workers[unplaced[next]];
              if (w.last_site >= 0 && w.last_site != static_cast<int>(si)) ++run.moves;
              place(w, static_cast<int>(si), static_cast<int>(unplaced[next]));
            }
          }
          for (; next < unplaced.size(); ++next) {
            place(workers[unplaced[next]], -1, static_cast<int>(unplaced[next]));
          }
          for (SiteWorker& w : workers) {
            if (w.site < 0) continue;
            w.in_round = true;
            ++members;
            if (w.model_round != run.rounds) {
              // A resync: the model, outer momentum and inner AdamW from a donor.
              const double bytes = 16.0 * static_cast<double>(oc.parameters);
              if (config.sites.size() > 1) {
                run.wan_bytes += bytes;
                run.coordination_j += bytes * config.wan_j_per_byte;
              }
              w.model_round = run.rounds;
            }
          }
          progress_s = 0.0;
        }
      }
      double duty = 1.0;
      for (const SiteWorker& w : workers) {
        if (w.in_round) duty = std::min(duty, w.allowed);
      }
      if (members > 0 && duty >= kMinSiteWorkerDuty) {
        progress_s += duty * config.interval_s;
        for (SiteWorker& w : workers) {
          if (!w.in_round) continue;
          w.power_w = duty * full_w;
          run.compute_energy_j += w.power_w * config.interval_s;
        }
        if (progress_s >= round_s - 1e-9) {
          // The exchange: each member's frame to every other, across sites over the WAN.
          std::vector<int> at(sites.size(), 0);
          for (const SiteWorker& w : workers) {
            if (w.in_round) ++at[static_cast<size_t>(w.site)];
          }
          bool spans = false;
          for (const SiteWorker& w : workers) {
            if (!w.in_round) continue;
            const int local = at[static_cast<size_t>(w.site)] - 1;
            const int remote = members - 1 - local;
            spans = spans || remote > 0;
            run.lan_bytes += local * frame;
            run.wan_bytes += remote * frame;
            run.coordination_j +=
                local * frame * oc.network_j_per_byte + remote * frame * config.wan_j_per_byte;
          }
          const double exchange_s = ExchangeS(oc, members, spans ? config.wan_rtt_s : oc.rtt_s);
          exchange_left_s =
              config.interval_s * std::max(1.0, std::ceil(exchange_s / config.interval_s - 1e-9));
          exchange_busy = std::min(1.0, oc.comm_cpu_s_per_member * members / exchange_left_s);
        }
      }
    }
    for (SiteWorker& w : workers) {
      if (w.member) {
        w.member->Observe(now_s, w.power_w, w.power_w > 0.0 ? "train" : "idle", 0.0);
      }
    }
    if (k % per_period == 0) {
      for (SimSite& s : sites) s.coordinator->Step();
    }
    if (k % per_minute == 0) {
      for (SimSite& s : sites) {
        s.result.workers.push_back(0);
        s.result.power_w.push_back(k > 0 ? (s.result.energy_j - s.minute_start_j) / 60.0 : 0.0);
        s.minute_start_j = s.result.energy_j;
        const SiteSignal& sig = s.spec->signals.At(now_s);
        s.result.spare_w.push_back(sig.spare_w);
        s.result.carbon_g_per_kwh.push_back(sig.carbon_g_per_kwh);
      }
      for (const SiteWorker& w : workers) {
        if (w.site >= 0) ++sites[static_cast<size_t>(w.site)].result.workers.back();
      }
      if (progress && k % (per_minute * 60) == 0) progress(offset + now_s, total);
    }
  }
  // Membership: the workers' requests, and each coordinator's in proportion to the members
  // the workers were there (at most all of them: workers / (workers + 1)).
  const double share =
      static_cast<double>(config.workers) / static_cast<double>(config.workers + 1);
  double requests = 0.0;
  for (SimSite& s : sites) {
    requests += static_cast<double>(s.worker_store->requests());
    if (s.result.worker_s > 0.0) {
      requests += share * static_cast<double>(s.coordinator_store->requests()) *
                  std::min(1.0, s.result.worker_s / (config.workers * config.duration_s));
    }
  }
  if (!dedicated) run.coordination_j += requests * oc.store_request_cpu_s * oc.watts_per_core;
  for (SiteWorker& w : workers) {
    if (w.member) w.member->Leave();
  }
  for (SimSite& s : sites) {
    run.carbon_g += s.result.carbon_g;
    run.cost_eur += s.result.cost_eur;
    run.sites.push_back(std::move(s.result));
  }
  return run;
}

}  // namespace

Result<SitesSimResult> RunSitesSim(const SitesSimConfig& config,
                                   const std::function<void(double, double)>& progress) {
  if (config.sites.empty()) return Error::Usage("sites-sim: no --site");
  std::vector<std::string> policies = config.policies;
  if (policies.empty()) {
    policies = {"carbon", "spare"};
    for (const SitesSimSite& s : config.sites) policies.push_back("single:" + s.name);
  }
  for (const std::string& p : policies) {
    const bool site = p.starts_with("single:") &&
                      std::any_of(config.sites.begin(), config.sites.end(),
                                  [&](const SitesSimSite& s) { return "single:" + s.name == p; });
    if (p != "carbon" && p != "price" && p != "spare" && !site) {
      return Error::Usage(fmt::format(
          "--policies: unknown '{}' (carbon, price, spare, single:NAME of a --site)", p));
    }
  }
  if (config.min_workers < 1 || config.min_workers > config.workers) {
    return Error::Usage(fmt::format("--min-workers {}: expected 1 to --workers {}",
                                    config.min_workers, config.workers));
  }
  SitesSimResult out;
  out.duration_s = config.duration_s;
  out.workers = config.workers;
  for (const SitesSimSite& s : config.sites) out.site_names.push_back(s.name);
  policies.push_back("dedicated");
  const double total = config.duration_s * static_cast<double>(policies.size());
  for (size_t i = 0; i < policies.size(); ++i) {
    auto r =
        RunPolicy(config, policies[i], progress, config.duration_s * static_cast<double>(i), total);
    if (!r) return std::move(r).error();
    out.runs.push_back(std::move(*r));
  }
  return out;
}

}  // namespace headroom::sim
