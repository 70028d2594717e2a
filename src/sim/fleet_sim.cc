#include "sim/fleet_sim.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/budget.h"
#include "agent/fleet_budget.h"
#include "analysis/window_stats.h"
#include "control/factory.h"
#include "control/policy.h"
#include "coord/coordinator.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "planning/fleet.h"
#include "sim/episode.h"
#include "sim/twin_link.h"
#include "twin/authority.h"
#include "twin/scenario.h"

namespace headroom::sim {

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

namespace {

struct Job {
  std::string name;
  twin::Scenario scenario;
  std::optional<control::Policy> policy;
  std::optional<control::BuiltController> controller;
  std::unique_ptr<agent::Agent> agent;
  std::unique_ptr<TwinLink> link;
  std::unique_ptr<coord::FleetMember> member;
  std::unique_ptr<agent::FleetBudget> budget;
  double floor_w = 0.0;   // job
  double static_w = 0.0;  // per GPU: the scenario's budget (the baseline's)
  double last_energy_j = 0.0;
  double grant_time_w_s = 0.0;  // integral of the acted-on job budget
  double last_acting_w = 0.0;
  bool admitted_ever = false;
  std::string last_from;
};

Result<control::Policy> ReadPolicy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Io(fmt::format("{}: cannot open", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return control::PolicyFromJson(ss.str(), path);
}

// One run: with a store (the site), or without (the baseline).
enum class Mode { kSite, kOwnBudgets, kUncontrolled };

Result<FleetSimRun> RunOnce(const FleetSimConfig& config, coord::Store* external, Mode mode,
                            std::vector<std::string>* names, uint64_t* reassignments,
                            uint64_t* writes, double* nameplate_w,
                            const std::function<void(double, double)>& progress, double offset,
                            double total, const std::function<void(const std::string&)>& log) {
  double now_s = 0.0;
  const auto clock = [&now_s] { return now_s; };
  const auto quiet = [](const std::string&) {};
  // In memory, leases expire on simulated time.
  std::optional<coord::MemoryStore> memory;
  coord::Store* store = nullptr;
  if (mode == Mode::kSite) {
    if (external == nullptr) memory.emplace(clock);
    store = external != nullptr ? external : &*memory;
    if (auto st = store->Delete(coord::Keys("fleet-sim").root, /*prefix=*/true); !st) {
      return Error::Io(fmt::format("{}: {}", store->Describe(), st.error().message()));
    }
  }
  std::deque<Job> jobs;  // stable: controllers point to their policies
  uint64_t index = 0;
  const bool by_value = mode == Mode::kSite && config.allocation == coord::Allocation::kValue;
  std::map<std::string, std::vector<coord::ValuePoint>> curves;  // per scenario, per GPU
  *nameplate_w = 0.0;
  for (const FleetSimJobSpec& spec : config.jobs) {
    auto scenario = twin::LoadScenario(spec.scenario);
    if (!scenario) return std::move(scenario).error();
    if (!scenario->has_rollout) {
      return Error::Usage(
          fmt::format("--jobs: scenario '{}' has no rollout to steer", spec.scenario));
    }
    for (int c = 0; c < spec.count; ++c, ++index) {
      Job j;
      j.name = fmt::format("{}-{}", spec.scenario, c + 1);
      j.scenario = *scenario;
      const std::string path = fmt::format("{}/{}.json", config.policies_dir, spec.scenario);
      control::ControllerSpec cs;
      cs.limits = LimitsOf(j.scenario);
      cs.interval_s = config.interval_s;
      if (mode != Mode::kUncontrolled && config.controller == "ppo" && std::ifstream(path).good()) {
        auto p = ReadPolicy(path);
        if (!p) return std::move(p).error();
        j.policy = std::move(*p);
      }
      jobs.push_back(std::move(j));
      Job& job = jobs.back();
      if (mode == Mode::kUncontrolled) {
        cs.kind = "uncontrolled";  // the trainer's own settings, no budget
        cs.concurrency = job.scenario.concurrency;
        cs.group_size = job.scenario.group_size;
      } else if (job.policy) {
        cs.kind = "ppo";
        cs.policy = &*job.policy;
      } else {
        cs.kind = "pid";
        cs.pid = control::PidGains{};
        cs.concurrency = job.scenario.concurrency_range.lo;
        cs.group_size = job.scenario.group_size;
      }
      auto built = control::MakeController(cs);
      if (!built) return std::move(built).error();
      job.controller.emplace(std::move(*built));
      const auto [lo_w, hi_w] = job.scenario.budget_range_w;
      const int gpus = job.scenario.gpus;
      const double floor_per_gpu_w =
          job.policy ? std::max(FloorPerGpuW(job.scenario), lo_w) : FloorPerGpuW(job.scenario);
      job.floor_w = floor_per_gpu_w * gpus;
      job.static_w = job.scenario.budget_w;
      *nameplate_w += job.scenario.nameplate_w * gpus;
      agent::AgentConfig ac;
      ac.interval_s = config.interval_s;
      ac.budget_w = store != nullptr              ? floor_per_gpu_w
                    : mode == Mode::kUncontrolled ? job.scenario.nameplate_w
                                                  : job.static_w;
      ac.budget_from = store != nullptr ? "the floor" : "the scenario";
      ac.floor_w = floor_per_gpu_w;
      ac.limits = cs.limits;
      ac.safe_concurrency = ac.limits.concurrency.lo;
      ac.safe_group_size = ac.limits.group_size.Clamp(job.scenario.group_size);
      ac.stale_after_s = 3.0 * config.interval_s;
      job.agent = std::make_unique<agent::Agent>(ac, job.controller->get());
      job.link = std::make_unique<TwinLink>(job.scenario, config.seed * 1000 + index);
      if (store != nullptr) {
        coord::MemberConfig mc;
        mc.site = "fleet-sim";
        mc.job = job.name;
        mc.gpus = gpus;
        mc.nameplate_w = job.scenario.nameplate_w * gpus;
        mc.floor_w = job.floor_w;
        mc.local_budget_w = job.floor_w;
        mc.lease_ttl_s = config.lease_ttl_s;
        mc.fence_margin_s = std::min(1.0, static_cast<double>(config.lease_ttl_s) / 3.0);
        if (by_value) {
          if (!curves.contains(spec.scenario)) {
            auto curve = twin::RolloutValueCurve(job.scenario, twin::AuthorityOptions{});
            if (!curve) return std::move(curve).error();
            for (const twin::RolloutPoint& p : *curve) {
              curves[spec.scenario].push_back({p.rollout_power_w, p.rollout_tokens_per_s});
            }
          }
          for (const coord::ValuePoint& p : curves[spec.scenario]) {
            mc.value_curve.push_back({p.budget_w * gpus, p.tokens_per_s});
          }
          mc.phase_demand = true;
        }
        job.member = std::make_unique<coord::FleetMember>(*store, mc, clock, quiet);
        job.budget = std::make_unique<agent::FleetBudget>(
            *job.member, gpus, [] { return 0.0; }, job.policy ? lo_w : agent::kMinBudgetPerGpuW,
            job.policy ? hi_w : job.scenario.nameplate_w, nullptr);
      }
    }
  }
  names->clear();
  for (const Job& j : jobs) names->push_back(j.name);

  std::unique_ptr<coord::Coordinator> coordinator;
  if (store != nullptr) {
    coord::CoordinatorConfig cc;
    cc.site = "fleet-sim";
    cc.site_budget_w = config.site_budget_w;
    cc.reserve_w = config.reserve_w;
    cc.period_s = config.period_s;
    cc.lease_ttl_s = config.lease_ttl_s;
    cc.id = "fleet-sim";
    cc.allocation = config.allocation;
    cc.fairness = config.fairness;
    coordinator =
        std::make_unique<coord::Coordinator>(*store, cc, clock, [&log](const std::string& l) {
          if (log) log(l);
        });
  }

  FleetSimRun run;
  std::array<std::optional<analysis::WindowStats>, 3> windows;
  for (size_t w = 0; w < 3; ++w) windows[w].emplace(kFleetWindowsS[w], config.site_budget_w);
  run.grant_w.assign(jobs.size(), {});
  const auto wall_start = std::chrono::steady_clock::now();
  const int64_t ticks = static_cast<int64_t>(std::llround(config.duration_s / config.interval_s));
  const int64_t per_period =
      std::max<int64_t>(1, std::llround(config.period_s / config.interval_s));
  const int64_t per_second = std::max<int64_t>(1, std::llround(1.0 / config.interval_s));
  double second_energy_j = 0.0;
  for (int64_t k = 0; k <= ticks; ++k) {
    now_s = static_cast<double>(k) * config.interval_s;
    if (config.speed > 0.0) {
      std::this_thread::sleep_until(wall_start +
                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(now_s / config.speed)));
    }
    double site_energy_j = 0.0;
    for (Job& j : jobs) {
      Result<telemetry::Sample> sample = j.link->Read(now_s);
      const double energy_j = j.link->twin().energy_j();
      site_energy_j += energy_j - j.last_energy_j;
      j.last_energy_j = energy_j;
      if (j.budget) {
        // What it acted on over the interval that ends now.
        if (k > 0) j.grant_time_w_s += j.last_acting_w * config.interval_s;
        const agent::BudgetInForce b = j.budget->Current(now_s);
        if (b.budget_per_gpu_w != j.agent->budget_w() || b.from != j.last_from) {
          j.agent->SetBudget(b.budget_per_gpu_w, b.from);
          j.last_from = b.from;
        }
      } else if (k > 0) {
        j.grant_time_w_s += j.agent->budget_w() * j.scenario.gpus * config.interval_s;
      }
      j.agent->Report(j.link->Report(now_s), now_s);
      const agent::Actuation& a = j.agent->Tick(now_s, sample);
      j.link->Apply(a);
      if (j.member) {
        double power_w = 0.0;
        for (double p : j.link->twin().power_w()) power_w += p;
        j.member->Observe(now_s, power_w, PhaseName(j.link->twin().current_phase()),
                          j.agent->tokens_per_s());
        j.member->Step();
        const coord::Acting acting = j.member->Current();
        j.last_acting_w = acting.job_budget_w;
        if (acting.state == coord::Acting::State::kGranted) j.admitted_ever = true;
      }
    }
    if (coordinator && k % per_period == 0) coordinator->Step();
    if (k > 0) {
      const double site_power_w = site_energy_j / config.interval_s;
      for (auto& w : windows) w->Add(now_s, site_power_w);
      second_energy_j += site_energy_j;
      if (k % per_second == 0) {
        run.t_s.push_back(now_s);
        run.site_power_w.push_back(second_energy_j);
        second_energy_j = 0.0;
        for (size_t i = 0; i < jobs.size(); ++i) {
          run.grant_w[i].push_back(jobs[i].budget
                                       ? jobs[i].last_acting_w
                                       : jobs[i].agent->budget_w() * jobs[i].scenario.gpus);
        }
      }
    }
    if (progress && k % (per_second * 60) == 0) progress(offset + now_s, total);
  }
  for (auto& w : windows) w->Finish(config.interval_s);
  for (size_t w = 0; w < 3; ++w) {
    const auto& s = *windows[w];
    run.violation_fraction[w] =
        s.counted() > 0 ? static_cast<double>(s.over_budget()) / static_cast<double>(s.counted())
                        : 0.0;
    run.peak_fraction_of_nameplate[w] = s.max_power_w().value_or(0.0) / *nameplate_w;
  }
  run.oversubscription_factor =
      planning::OversubscriptionFactor(*nameplate_w, {windows[1]->max_power_w().value_or(0.0)},
                                       planning::kDefaultQuantile, planning::kDefaultMargin);
  for (Job& j : jobs) {
    FleetSimJobResult r;
    r.job = j.name;
    r.scenario = j.scenario.name;
    r.gpus = j.scenario.gpus;
    r.tokens = j.link->twin().tokens_total();
    r.energy_j = j.link->twin().energy_j();
    r.mean_grant_w = config.duration_s > 0.0 ? j.grant_time_w_s / config.duration_s : 0.0;
    r.floor_w = j.floor_w;
    r.admitted = j.budget ? j.admitted_ever : true;
    run.tokens += r.tokens;
    run.energy_j += r.energy_j;
    run.jobs.push_back(std::move(r));
  }
  if (coordinator) {
    const auto& st = coordinator->status();
    *reassignments = st.ledger ? st.ledger->reassignments : 0;
    *writes = st.ledger_writes;
    coordinator->Resign();
    for (Job& j : jobs) j.member->Leave();
  }
  return run;
}

}  // namespace

Result<FleetSimResult> RunFleetSim(const FleetSimConfig& config, coord::Store* store,
                                   const std::string& store_name,
                                   const std::function<void(double, double)>& progress,
                                   const std::function<void(const std::string&)>& log) {
  FleetSimResult out;
  out.store = store_name;
  out.allocation = config.allocation == coord::Allocation::kValue ? "value" : "proportional";
  out.fairness = config.fairness == coord::Fairness::kMaxMin ? "max-min" : "none";
  FleetSimConfig alone = config;
  alone.speed = 0.0;  // the references need no pacing
  out.site_budget_w = config.site_budget_w;
  out.reserve_w = config.reserve_w;
  out.duration_s = config.duration_s;
  std::vector<std::string> names;
  uint64_t unused_r = 0, unused_w = 0;
  double nameplate_w = 0.0;
  const double total = 3.0 * config.duration_s;
  auto site = RunOnce(config, store, Mode::kSite, &names, &out.reassignments, &out.ledger_writes,
                      &nameplate_w, progress, 0.0, total, log);
  if (!site) return std::move(site).error();
  out.site = std::move(*site);
  auto own = RunOnce(alone, nullptr, Mode::kOwnBudgets, &names, &unused_r, &unused_w, &nameplate_w,
                     progress, config.duration_s, total, log);
  if (!own) return std::move(own).error();
  out.own_budgets = std::move(*own);
  auto free = RunOnce(alone, nullptr, Mode::kUncontrolled, &names, &unused_r, &unused_w,
                      &nameplate_w, progress, 2.0 * config.duration_s, total, log);
  if (!free) return std::move(free).error();
  out.baseline = std::move(*free);
  out.nameplate_w = nameplate_w;
  return out;
}

}  // namespace headroom::sim
