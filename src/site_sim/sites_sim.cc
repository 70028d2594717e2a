#include "site_sim/sites_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "coord/member.h"
#include "diloco_site/site_power.h"
#include "site_sim/sim_site.h"

namespace headroom::site_sim {
namespace {

constexpr double kMinSiteWorkerDuty = 0.05;  // below it a worker pauses (diloco/worker.cc)
constexpr double kSimJPerKwh = 3.6e6;

// One site of a run: a SimSite (its store and coordinator on simulated time, its guaranteed
// jobs as one member whose power is the budget less the signals' spare), and what the workers
// did there.
struct Site {
  const SitesSimSite* spec = nullptr;
  std::unique_ptr<SimSite> sim;
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

SimSiteConfig SiteConfigOf(const SitesSimConfig& config, const SitesSimSite& spec) {
  SimSiteConfig c;
  c.name = spec.name;
  c.interval_s = config.interval_s;
  c.period_s = config.period_s;
  c.lease_ttl_s = config.lease_ttl_s;
  c.site_budget_w = spec.site_budget_w;
  c.trace_jobs_w = [&spec](double t_s) {
    return spec.site_budget_w - std::min(spec.site_budget_w, spec.signals.At(t_s).spare_w);
  };
  return c;
}

// One policy's run over the sites: every tick the sites' jobs step, the workers serve their
// grants, the DiLoCo run goes on (placed at each round's start), and the coordinators step.
class PolicyRun {
 public:
  PolicyRun(const SitesSimConfig& config, const std::string& policy)
      : config_(config),
        oc_(config.worker),
        full_w_(diloco::WorkerPowerW(oc_.threads, 1.0, oc_.watts_per_core)),
        round_s_(oc_.inner_steps * oc_.step_s),
        frame_(FrameBytes(oc_)),
        dedicated_(policy == "dedicated"),
        policy_(policy),
        per_minute_(std::max<int64_t>(1, std::llround(60.0 / config.interval_s))) {
    run_.policy = policy;
  }

  Status Build() {
    for (const SitesSimSite& spec : config_.sites) {
      auto sim = SimSite::Build(SiteConfigOf(config_, spec), nullptr, Logger());
      if (!sim) return std::move(sim).error();
      Site s;
      s.spec = &spec;
      s.result.name = spec.name;
      s.sim = std::move(*sim);
      sites_.push_back(std::move(s));
    }
    workers_.resize(static_cast<size_t>(config_.workers));
    return OkStatus();
  }

  int64_t per_minute() const { return per_minute_; }

  void Tick(int64_t k) {
    const double now_s = static_cast<double>(k) * config_.interval_s;
    if (k > 0) Account(now_s);
    // The sites' jobs, then the workers, serve and step.
    for (Site& s : sites_) s.sim->BeginTick(k);
    for (SiteWorker& w : workers_) {
      w.allowed = dedicated_ ? 1.0
                  : w.member ? diloco::DutyForGrant(StepOpportunistic(*w.member), oc_.threads,
                                                    oc_.watts_per_core)
                             : 0.0;
    }
    for (SiteWorker& w : workers_) w.power_w = 0.0;
    if (exchange_left_s_ > 0.0) {
      Exchange();
    } else {
      if (members_ == 0) StartRound(now_s);
      Compute();
    }
    for (SiteWorker& w : workers_) {
      if (w.member) w.member->Observe(now_s, w.power_w, w.power_w > 0.0 ? "train" : "idle", 0.0);
    }
    for (Site& s : sites_) s.sim->EndTick(k);
    if (k % per_minute_ == 0) Record(k, now_s);
  }

  SitesSimRun Finish() {
    // Membership: the workers' requests, and each coordinator's in proportion to the members
    // the workers were there (at most all of them: workers / (workers + 1)).
    const double share =
        static_cast<double>(config_.workers) / static_cast<double>(config_.workers + 1);
    double requests = 0.0;
    for (Site& s : sites_) {
      requests += static_cast<double>(s.sim->opportunistic_requests());
      if (s.result.worker_s > 0.0) {
        requests += share * static_cast<double>(s.sim->coordinator_requests()) *
                    std::min(1.0, s.result.worker_s / (config_.workers * config_.duration_s));
      }
    }
    if (!dedicated_) run_.coordination_j += requests * oc_.store_request_cpu_s * oc_.watts_per_core;
    for (SiteWorker& w : workers_) {
      if (w.member) w.member->Leave();
    }
    for (Site& s : sites_) {
      s.sim->Close();
      run_.carbon_g += s.result.carbon_g;
      run_.cost_eur += s.result.cost_eur;
      run_.sites.push_back(std::move(s.result));
    }
    return std::move(run_);
  }

 private:
  // What the workers drew since the last tick, at each site's signals of that interval.
  void Account(double now_s) {
    for (SiteWorker& w : workers_) {
      if (w.site < 0 || !(w.power_w > 0.0)) continue;
      Site& s = sites_[static_cast<size_t>(w.site)];
      const SiteSignal& sig = s.spec->signals.At(now_s - config_.interval_s);
      const double j = w.power_w * config_.interval_s;
      s.result.energy_j += j;
      s.result.carbon_g += j / kSimJPerKwh * sig.carbon_g_per_kwh;
      s.result.cost_eur += j / kSimJPerKwh / 1000.0 * sig.price_eur_per_mwh;
      run_.energy_j += j;
    }
    for (Site& s : sites_) {
      s.result.spare_j += s.spec->signals.At(now_s).spare_w * config_.interval_s;
    }
    for (const SiteWorker& w : workers_) {
      if (w.site >= 0) sites_[static_cast<size_t>(w.site)].result.worker_s += config_.interval_s;
    }
  }

  // A worker to a site (a new member there) or nowhere (-1).
  void Place(SiteWorker& w, int site, int index) {
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
    w.member = sites_[static_cast<size_t>(site)].sim->JoinOpportunistic(
        fmt::format("diloco-{}-{}", index + 1, w.incarnation), full_w_);
  }

  void Exchange() {
    for (SiteWorker& w : workers_) {
      if (!w.in_round) continue;
      w.power_w = exchange_busy_ * oc_.watts_per_core;
      run_.coordination_j += w.power_w * config_.interval_s;
    }
    exchange_left_s_ -= config_.interval_s;
    if (exchange_left_s_ > 1e-9) return;
    exchange_left_s_ = 0.0;
    ++run_.rounds;
    run_.round_members.push_back(members_);
    run_.tokens +=
        static_cast<double>(members_) * oc_.inner_steps * oc_.threads * oc_.tokens_per_thread_step;
    for (SiteWorker& w : workers_) {
      if (w.in_round) w.model_round = run_.rounds;
      w.in_round = false;
    }
    members_ = 0;
  }

  // A round starts: the placement.
  void StartRound(double now_s) {
    std::vector<int> per_site(sites_.size(), 0);
    if (dedicated_) {
      per_site[0] = config_.workers;
    } else {
      per_site = Placement(policy_, config_, full_w_, now_s);
    }
    const int placeable = std::accumulate(per_site.begin(), per_site.end(), 0);
    if (placeable < config_.min_workers) {
      for (size_t i = 0; i < workers_.size(); ++i) Place(workers_[i], -1, static_cast<int>(i));
      run_.idle_s += config_.interval_s;
      return;
    }
    // Workers already at a site stay there while it keeps room for them; the rest move.
    std::vector<int> room = per_site;
    std::vector<size_t> unplaced;
    for (size_t i = 0; i < workers_.size(); ++i) {
      SiteWorker& w = workers_[i];
      if (w.site >= 0 && room[static_cast<size_t>(w.site)] > 0) {
        --room[static_cast<size_t>(w.site)];
      } else {
        unplaced.push_back(i);
      }
    }
    size_t next = 0;
    for (size_t si = 0; si < room.size(); ++si) {
      for (; room[si] > 0 && next < unplaced.size(); --room[si], ++next) {
        SiteWorker& w = workers_[unplaced[next]];
        if (w.last_site >= 0 && w.last_site != static_cast<int>(si)) ++run_.moves;
        Place(w, static_cast<int>(si), static_cast<int>(unplaced[next]));
      }
    }
    for (; next < unplaced.size(); ++next) {
      Place(workers_[unplaced[next]], -1, static_cast<int>(unplaced[next]));
    }
    for (SiteWorker& w : workers_) {
      if (w.site < 0) continue;
      w.in_round = true;
      ++members_;
      if (w.model_round != run_.rounds) {
        // A resync: the model, outer momentum and inner AdamW from a donor.
        const double bytes = 16.0 * static_cast<double>(oc_.parameters);
        if (config_.sites.size() > 1) {
          run_.wan_bytes += bytes;
          run_.coordination_j += bytes * config_.wan_j_per_byte;
        }
        w.model_round = run_.rounds;
      }
    }
    progress_s_ = 0.0;
  }

  // The round's compute at the slowest member's duty; at its end, the exchange.
  void Compute() {
    double duty = 1.0;
    for (const SiteWorker& w : workers_) {
      if (w.in_round) duty = std::min(duty, w.allowed);
    }
    if (members_ == 0 || duty < kMinSiteWorkerDuty) return;
    progress_s_ += duty * config_.interval_s;
    for (SiteWorker& w : workers_) {
      if (!w.in_round) continue;
      w.power_w = duty * full_w_;
      run_.compute_energy_j += w.power_w * config_.interval_s;
    }
    if (progress_s_ >= round_s_ - 1e-9) StartExchange();
  }

  // The exchange: each member's frame to every other, across sites over the WAN.
  void StartExchange() {
    std::vector<int> at(sites_.size(), 0);
    for (const SiteWorker& w : workers_) {
      if (w.in_round) ++at[static_cast<size_t>(w.site)];
    }
    bool spans = false;
    for (const SiteWorker& w : workers_) {
      if (!w.in_round) continue;
      const int local = at[static_cast<size_t>(w.site)] - 1;
      const int remote = members_ - 1 - local;
      spans = spans || remote > 0;
      run_.lan_bytes += local * frame_;
      run_.wan_bytes += remote * frame_;
      run_.coordination_j +=
          local * frame_ * oc_.network_j_per_byte + remote * frame_ * config_.wan_j_per_byte;
    }
    const double exchange_s = ExchangeS(oc_, members_, spans ? config_.wan_rtt_s : oc_.rtt_s);
    exchange_left_s_ =
        config_.interval_s * std::max(1.0, std::ceil(exchange_s / config_.interval_s - 1e-9));
    exchange_busy_ = std::min(1.0, oc_.comm_cpu_s_per_member * members_ / exchange_left_s_);
  }

  // Each site's minute: its workers, their mean power, its signals.
  void Record(int64_t k, double now_s) {
    for (Site& s : sites_) {
      s.result.workers.push_back(0);
      s.result.power_w.push_back(k > 0 ? (s.result.energy_j - s.minute_start_j) / 60.0 : 0.0);
      s.minute_start_j = s.result.energy_j;
      const SiteSignal& sig = s.spec->signals.At(now_s);
      s.result.spare_w.push_back(sig.spare_w);
      s.result.carbon_g_per_kwh.push_back(sig.carbon_g_per_kwh);
    }
    for (const SiteWorker& w : workers_) {
      if (w.site >= 0) ++sites_[static_cast<size_t>(w.site)].result.workers.back();
    }
  }

  const SitesSimConfig& config_;
  const OpportunisticConfig& oc_;
  const double full_w_, round_s_, frame_;
  const bool dedicated_;
  const std::string policy_;
  const int64_t per_minute_;
  std::vector<Site> sites_;
  std::vector<SiteWorker> workers_;  // after sites_: their members go first
  SitesSimRun run_;
  double progress_s_ = 0.0, exchange_left_s_ = 0.0, exchange_busy_ = 0.0;
  int members_ = 0;
};

Result<SitesSimRun> RunPolicy(const SitesSimConfig& config, const std::string& policy,
                              const std::function<void(double, double)>& progress, double offset,
                              double total) {
  PolicyRun run(config, policy);
  if (auto st = run.Build(); !st) return std::move(st).error();
  const int64_t ticks = static_cast<int64_t>(std::llround(config.duration_s / config.interval_s));
  for (int64_t k = 0; k <= ticks; ++k) {
    run.Tick(k);
    if (progress && k % (run.per_minute() * 60) == 0) {
      progress(offset + static_cast<double>(k) * config.interval_s, total);
    }
  }
  return run.Finish();
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

}  // namespace headroom::site_sim
