#include "site_sim/fleet_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <thread>

#include "analysis/budget_schedule.h"
#include "analysis/window_stats.h"
#include "coord/member.h"
#include "diloco_site/site_power.h"
#include "planning/fleet.h"
#include "site_sim/sim_site.h"

namespace headroom::site_sim {

Result<std::vector<FleetSimJobSpec>> ParseFleetJobs(std::string_view text) {
  std::vector<FleetSimJobSpec> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t colon = item.rfind(':');
    FleetSimJobSpec spec;
    spec.scenario = std::string(item.substr(0, colon));
    if (colon != std::string_view::npos) {
      const std::string_view n = item.substr(colon + 1);
      const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), spec.count);
      if (ec != std::errc() || end != n.data() + n.size() || spec.count < 1 || spec.count > 1000) {
        return Error::Usage(
            fmt::format("--jobs '{}': expected SCENARIO:COUNT with COUNT 1 to 1000", item));
      }
    }
    if (spec.scenario.empty()) {
      return Error::Usage(fmt::format("--jobs '{}': expected SCENARIO[:COUNT],...", text));
    }
    out.push_back(std::move(spec));
    pos = comma + 1;
  }
  return out;
}

double FrameBytes(const OpportunisticConfig& o) {
  const double n = static_cast<double>(o.parameters);
  return 28.0 + 8.0 + 4.0 * std::ceil(n / 256.0) + n + 32.0;
}

double ExchangeS(const OpportunisticConfig& o, int k, double rtt_s) {
  return o.comm_cpu_s_per_member * k + (k - 1) * FrameBytes(o) * 8.0 / o.link_bits_per_s +
         9.0 * rtt_s;
}

namespace {

// Below this duty a worker pauses (as the real one: diloco/worker.cc).
constexpr double kMinWorkerDuty = 0.05;

SimSiteConfig SiteConfigOf(const FleetSimConfig& c, SimSiteMode mode) {
  SimSiteConfig s;
  s.name = "fleet-sim";
  s.mode = mode;
  s.interval_s = c.interval_s;
  s.period_s = c.period_s;
  s.lease_ttl_s = c.lease_ttl_s;
  s.jobs = c.jobs;
  s.seed = c.seed;
  s.controller = c.controller;
  s.policies_dir = c.policies_dir;
  s.job_control = c.job_control;
  s.guard_power_limit = c.guard_power_limit;
  s.random_offsets = c.random_offsets;
  s.phase_demand = c.phase_demand;
  s.site_budget_w = c.site_budget_w;
  s.reserve_w = c.reserve_w;
  s.allocation = c.allocation;
  s.fairness = c.fairness;
  s.max_hold_s = c.max_hold_s;
  s.stagger_passes = c.stagger_passes;
  s.reserve_updates = c.reserve_updates;
  if (c.opportunistic.workers > 0) {
    // Loans to the workers, and the jobs publish each change of phase.
    s.publish_phase_changes = true;
    s.loan_lead_s = c.loan_lead_s > 0.0 ? c.loan_lead_s : 3.0 * c.period_s;
    s.loan_cover = c.loan_cover;
    s.loan_margin = c.loan_margin;
  }
  s.schedule = c.schedule;
  s.budget_lead_s = c.budget_lead_s;
  return s;
}

// The opportunistic DiLoCo workers of a site (docs/SITE.md, "Spare power in fleet-sim"), each
// an opportunistic member of it. Their one DiLoCo run's members progress together (a round's
// members wait for the slowest; a paused member holds its round), then exchange. None but in a
// site (SimSiteMode::kSite).
class Workers {
 public:
  Workers(const OpportunisticConfig& oc, double interval_s, SimSite& site)
      : oc_(oc),
        interval_s_(interval_s),
        round_s_(oc.inner_steps * oc.step_s),
        full_w_(diloco::WorkerPowerW(oc.threads, 1.0, oc.watts_per_core)) {
    if (site.config().mode != SimSiteMode::kSite) return;
    for (int i = 0; i < oc.workers; ++i) {
      Worker w;
      w.name = fmt::format("diloco-{}", i + 1);
      w.member = site.JoinOpportunistic(w.name, full_w_);
      workers_.push_back(std::move(w));
    }
  }
  bool empty() const { return workers_.empty(); }
  size_t size() const { return workers_.size(); }

  // One tick, between the site's BeginTick and EndTick: what they drew since the last tick (k >
  // 0, also into `site_energy_j`), then each serves its grant and the run goes on at the duty
  // the slowest member's grant allows.
  void Tick(int64_t k, double now_s, double* site_energy_j, OpportunisticRun* o) {
    for (Worker& w : workers_) {
      if (k > 0) {
        *site_energy_j += w.power_w * interval_s_;
        o->energy_j += w.power_w * interval_s_;
      }
      w.allowed =
          diloco::DutyForGrant(StepOpportunistic(*w.member), oc_.threads, oc_.watts_per_core);
      if (k > 0 && w.allowed < kMinWorkerDuty) o->worker_s_paused += interval_s_;
    }
    for (Worker& w : workers_) w.power_w = 0.0;
    if (exchange_left_s_ > 0.0) {
      Exchange(o);
    } else {
      if (members_ == 0) StartRound(o);
      Compute(o);
    }
    for (Worker& w : workers_) {
      w.member->Observe(now_s, w.power_w, w.power_w > 0.0 ? "train" : "idle", 0.0);
      if (w.shrink_from_s >= 0.0 && w.power_w <= w.shrink_to_w + 1e-6) {
        o->shrink_s.push_back(now_s - w.shrink_from_s);
        w.shrink_from_s = -1.0;
      }
    }
  }

  // After the coordinator's period: each worker's grant as the ledger now has it; a lower one
  // starts a shrink.
  void NoteLedger(const SimSite& site, double now_s) {
    for (Worker& w : workers_) {
      const std::optional<double> grant_w = site.LedgerGrantW(w.name);
      if (!grant_w) break;
      const double g = *grant_w;
      if (g < w.ledger_grant_w - 1e-6 && w.power_w > g + 1e-6) {
        if (w.shrink_from_s < 0.0) w.shrink_from_s = now_s;
        w.shrink_to_w = g;
      } else if (w.shrink_from_s >= 0.0) {
        w.shrink_to_w = std::max(w.shrink_to_w, g);  // raised again before it was met
      }
      w.ledger_grant_w = g;
    }
  }

  double power_w() const {
    double sum_w = 0.0;
    for (const Worker& w : workers_) sum_w += w.power_w;
    return sum_w;
  }
  int training() const {
    int n = 0;
    for (const Worker& w : workers_) n += w.power_w > 0.0 ? 1 : 0;
    return n;
  }

  // Coordination: the workers' requests, and the coordinator's in proportion to the members
  // the workers are; each request at store_request_cpu_s of a core. The exchanges' bytes on
  // the site's network.
  void Finish(const SimSite& site, OpportunisticRun* o) const {
    o->workers = static_cast<int>(workers_.size());
    const double share = static_cast<double>(workers_.size()) /
                         static_cast<double>(workers_.size() + site.job_count());
    o->store_requests = site.opportunistic_requests();
    o->membership_j = (static_cast<double>(site.opportunistic_requests()) +
                       share * static_cast<double>(site.coordinator_requests())) *
                      oc_.store_request_cpu_s * oc_.watts_per_core;
    o->exchange_j += o->bytes_sent * oc_.network_j_per_byte;
  }

  void Leave() {
    for (Worker& w : workers_) w.member->Leave();
  }

 private:
  struct Worker {
    std::string name;
    std::unique_ptr<coord::SiteMember> member;
    double allowed = 0.0;   // the duty its grant allows
    double power_w = 0.0;   // decided at the last tick, drawn until this one
    bool in_round = false;  // a member of the round in progress
    int model_round = 0;    // the rounds agreed when it last held the run's model
    double ledger_grant_w = 0.0;
    double shrink_from_s = -1.0;  // a lower grant written then, not met yet
    double shrink_to_w = 0.0;
  };

  // Exchanging: one core each, busy for the exchange's CPU seconds.
  void Exchange(OpportunisticRun* o) {
    for (Worker& w : workers_) {
      if (!w.in_round) continue;
      w.power_w = exchange_busy_ * oc_.watts_per_core;
      o->exchange_j += w.power_w * interval_s_;
      o->worker_s_waiting += interval_s_;
    }
    exchange_left_s_ -= interval_s_;
    if (exchange_left_s_ > 1e-9) return;
    exchange_left_s_ = 0.0;
    ++o->rounds;
    o->tokens +=
        static_cast<double>(members_) * oc_.inner_steps * oc_.threads * oc_.tokens_per_thread_step;
    for (Worker& w : workers_) {
      if (w.in_round) w.model_round = o->rounds;
      w.in_round = false;  // the next round's members are those with watts at its start
    }
    members_ = 0;
  }

  // A round starts: every worker with watts; one that missed a round resyncs first (the
  // donor's state: model, outer momentum, inner AdamW, 16 bytes a parameter).
  void StartRound(OpportunisticRun* o) {
    for (Worker& w : workers_) {
      if (w.allowed < kMinWorkerDuty) continue;
      w.in_round = true;
      ++members_;
      if (w.model_round != o->rounds) {
        ++o->resyncs;
        o->bytes_sent += 16.0 * static_cast<double>(oc_.parameters);
        w.model_round = o->rounds;
      }
    }
    progress_s_ = 0.0;
  }

  // The round's compute at the slowest member's duty; at its end, the exchange.
  void Compute(OpportunisticRun* o) {
    double duty = 1.0;
    for (const Worker& w : workers_) {
      if (w.in_round) duty = std::min(duty, w.allowed);
    }
    if (members_ > 0 && duty >= kMinWorkerDuty) {
      progress_s_ += duty * interval_s_;
      for (Worker& w : workers_) {
        if (!w.in_round) continue;
        w.power_w = duty * full_w_;
        o->compute_energy_j += w.power_w * interval_s_;
      }
      if (progress_s_ >= round_s_ - 1e-9) {
        const int m = members_;
        // Whole ticks; one core each, busy for the exchange's CPU seconds.
        exchange_left_s_ =
            interval_s_ *
            std::max(1.0, std::ceil(ExchangeS(oc_, m, oc_.rtt_s) / interval_s_ - 1e-9));
        exchange_busy_ = std::min(1.0, oc_.comm_cpu_s_per_member * m / exchange_left_s_);
        o->bytes_sent += static_cast<double>(m) * (m - 1) * FrameBytes(oc_);
      }
    } else if (members_ > 0) {
      for (const Worker& w : workers_) {
        if (w.in_round) o->worker_s_waiting += interval_s_;
      }
    }
  }

  const OpportunisticConfig& oc_;
  const double interval_s_, round_s_, full_w_;
  std::vector<Worker> workers_;
  double progress_s_ = 0.0;       // of the round's compute, at duty 1
  double exchange_left_s_ = 0.0;  // > 0: exchanging
  int members_ = 0;               // of the round in progress
  double exchange_busy_ = 0.0;    // of a core, while exchanging
};

// The site's true power against its budget (fixed, or the schedule's of the moment) over the
// three windows, each decrease's settling, and the per-second series of the report.
class SiteMeter {
 public:
  SiteMeter(const FleetSimConfig& config, size_t jobs, FleetSimRun* run)
      : config_(config),
        per_second_(std::max<int64_t>(1, std::llround(1.0 / config.interval_s))),
        run_(*run) {
    if (!config.schedule.empty()) {
      moving_.Append(0.0, config.site_budget_w);
      for (const coord::BudgetEvent& e : config.schedule) moving_.Append(e.t_s, e.site_budget_w);
      settle_.emplace(&moving_);  // settle_s of each decrease, on the site's true power
    }
    for (size_t w = 0; w < 3; ++w) {
      if (config.schedule.empty()) {
        windows_[w].emplace(kFleetWindowsS[w], config.site_budget_w);
      } else {
        windows_[w].emplace(kFleetWindowsS[w], &moving_);
      }
    }
    run_.grant_w.assign(jobs, {});
    run_.phase.assign(jobs, {});
  }
  SiteMeter(const SiteMeter&) = delete;
  SiteMeter& operator=(const SiteMeter&) = delete;

  // The site's energy over the interval that ends at tick k > 0.
  void Add(int64_t k, double site_energy_j, const SimSite& site, const Workers& workers) {
    const double now_s = site.now_s();
    const double site_power_w = site_energy_j / config_.interval_s;
    for (auto& w : windows_) w->Add(now_s, site_power_w);
    if (settle_) settle_->Add(now_s, site_power_w);
    second_energy_j_ += site_energy_j;
    if (k % per_second_ != 0) return;
    run_.t_s.push_back(now_s);
    run_.site_power_w.push_back(second_energy_j_);
    if (!workers.empty()) {
      run_.opportunistic.power_w.push_back(workers.power_w());
      run_.opportunistic.training.push_back(workers.training());
    }
    second_energy_j_ = 0.0;
    run_.budget_w.push_back(moving_.empty() ? config_.site_budget_w : moving_.At(now_s));
    for (size_t i = 0; i < site.job_count(); ++i) {
      run_.phase[i].push_back(static_cast<uint8_t>(site.JobPhase(i)));
      run_.grant_w[i].push_back(site.JobGrantW(i));
    }
  }

  void Finish(double nameplate_w) {
    for (auto& w : windows_) w->Finish(config_.interval_s);
    if (settle_) {
      settle_->Finish();
      run_.settle_s = settle_->settled_s();
      run_.unsettled = settle_->unsettled();
    }
    for (size_t w = 0; w < 3; ++w) {
      const auto& s = *windows_[w];
      run_.violation_fraction[w] =
          s.counted() > 0 ? static_cast<double>(s.over_budget()) / static_cast<double>(s.counted())
                          : 0.0;
      run_.peak_fraction_of_nameplate[w] = s.max_power_w().value_or(0.0) / nameplate_w;
    }
    run_.oversubscription_factor =
        planning::OversubscriptionFactor(nameplate_w, {windows_[1]->max_power_w().value_or(0.0)},
                                         planning::kDefaultQuantile, planning::kDefaultMargin);
  }

 private:
  const FleetSimConfig& config_;
  const int64_t per_second_;
  FleetSimRun& run_;
  analysis::BudgetSchedule moving_;  // the site budget of the moment, with a schedule
  std::array<std::optional<analysis::WindowStats>, 3> windows_;
  std::optional<analysis::SettleTracker> settle_;
  double second_energy_j_ = 0.0;
};

// Each job's tokens, energy and holds, and their sums.
void AddJobResults(const SimSite& site, double duration_s, FleetSimRun* run) {
  double hold_tokens = 0.0;
  for (size_t i = 0; i < site.job_count(); ++i) {
    FleetSimJobResult r = site.JobResult(i, duration_s);
    run->tokens += r.tokens;
    run->energy_j += r.energy_j;
    const double held_s = site.JobHeldS(i);
    run->hold_count += site.JobHolds(i);
    run->hold_total_s += held_s;
    if (duration_s > held_s) hold_tokens += held_s * r.tokens / (duration_s - held_s);
    run->jobs.push_back(std::move(r));
  }
  run->hold_tokens_cost_pct = run->tokens > 0.0 ? 100.0 * hold_tokens / run->tokens : 0.0;
}

// What the coordinator did in a run, and the jobs' nameplate.
struct SiteCounts {
  uint64_t reassignments = 0;
  uint64_t ledger_writes = 0;
  double nameplate_w = 0.0;
};

// One run: the site (kSite) or a reference without one. Builds the site, ticks it for
// duration_s (paced at `speed`), and measures.
Result<FleetSimRun> RunOnce(const FleetSimConfig& config, coord::Store* external, SimSiteMode mode,
                            SiteCounts* counts, const std::function<void(double, double)>& progress,
                            double offset, double total, const Logger& log) {
  auto built = SimSite::Build(SiteConfigOf(config, mode), external, log);
  if (!built) return std::move(built).error();
  SimSite& site = **built;
  Workers workers(config.opportunistic, config.interval_s, site);
  FleetSimRun run;
  SiteMeter meter(config, site.job_count(), &run);
  const auto wall_start = std::chrono::steady_clock::now();
  const int64_t ticks = static_cast<int64_t>(std::llround(config.duration_s / config.interval_s));
  const int64_t per_minute = 60 * std::max<int64_t>(1, std::llround(1.0 / config.interval_s));
  for (int64_t k = 0; k <= ticks; ++k) {
    const double now_s = static_cast<double>(k) * config.interval_s;
    if (config.speed > 0.0) {
      std::this_thread::sleep_until(wall_start +
                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(now_s / config.speed)));
    }
    site.BeginTick(k);
    double site_energy_j = site.jobs_energy_j();
    workers.Tick(k, now_s, &site_energy_j, &run.opportunistic);
    if (site.EndTick(k)) workers.NoteLedger(site, now_s);
    if (k > 0) meter.Add(k, site_energy_j, site, workers);
    if (progress && k % per_minute == 0) progress(offset + now_s, total);
  }
  meter.Finish(site.nameplate_w());
  AddJobResults(site, config.duration_s, &run);
  if (!workers.empty()) workers.Finish(site, &run.opportunistic);
  *counts = {site.reassignments(), site.ledger_writes(), site.nameplate_w()};
  site.Close();
  workers.Leave();
  return run;
}

}  // namespace

Result<FleetSimResult> RunFleetSim(const FleetSimConfig& config, coord::Store* store,
                                   const std::string& store_name,
                                   const std::function<void(double, double)>& progress,
                                   const Logger& log) {
  FleetSimResult out;
  out.store = store_name;
  out.allocation = config.allocation == coord::Allocation::kValue ? "value" : "proportional";
  out.fairness = config.fairness == coord::Fairness::kMaxMin ? "max-min" : "none";
  out.offsets = config.random_offsets ? "random" : "aligned";
  out.job_control = config.job_control;
  out.guard_power_limit = config.job_control && config.guard_power_limit;
  out.max_hold_s = config.max_hold_s;
  out.stagger = config.reserve_updates      ? "reserve"
                : config.max_hold_s <= 0.0  ? "none"
                : config.stagger_passes > 1 ? "descent"
                                            : "greedy";
  FleetSimConfig alone = config;
  alone.speed = 0.0;  // the references need no pacing
  alone.opportunistic.workers = 0;
  out.site_budget_w = config.site_budget_w;
  out.reserve_w = config.reserve_w;
  out.duration_s = config.duration_s;
  SiteCounts counts, unused;
  const bool scheduled = !config.schedule.empty();
  const bool opportunistic = config.opportunistic.workers > 0;
  const double total = ((scheduled ? 4.0 : 3.0) + (opportunistic ? 1.0 : 0.0)) * config.duration_s;
  auto site = RunOnce(config, store, SimSiteMode::kSite, &counts, progress, 0.0, total, log);
  if (!site) return std::move(site).error();
  out.site = std::move(*site);
  out.reassignments = counts.reassignments;
  out.ledger_writes = counts.ledger_writes;
  if (opportunistic) {
    // The same site, jobs and seeds without the workers.
    auto without = RunOnce(alone, nullptr, SimSiteMode::kSite, &unused, progress,
                           (scheduled ? 4.0 : 3.0) * config.duration_s, total, log);
    if (!without) return std::move(without).error();
    out.opportunistic = true;
    out.alone = std::move(*without);
  }
  auto own = RunOnce(alone, nullptr, SimSiteMode::kOwnBudgets, &unused, progress, config.duration_s,
                     total, log);
  if (!own) return std::move(own).error();
  out.own_budgets = std::move(*own);
  auto free = RunOnce(alone, nullptr, SimSiteMode::kUncontrolled, &unused, progress,
                      2.0 * config.duration_s, total, log);
  if (!free) return std::move(free).error();
  out.baseline = std::move(*free);
  out.nameplate_w = counts.nameplate_w;
  if (scheduled) {
    // The same site with its budget held where it started: what the schedule cost.
    FleetSimConfig steady = alone;
    steady.schedule.clear();
    auto flat = RunOnce(steady, nullptr, SimSiteMode::kSite, &unused, progress,
                        3.0 * config.duration_s, total, log);
    if (!flat) return std::move(flat).error();
    out.scheduled = true;
    out.tokens_unscheduled = flat->tokens;
    out.decreases = out.site.settle_s.size() + out.site.unsettled;
  }
  return out;
}

}  // namespace headroom::site_sim
