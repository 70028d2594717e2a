#include "site_sim/fleet_sim.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/budget.h"
#include "agent/guard.h"
#include "agent/site_budget.h"
#include "analysis/window_stats.h"
#include "common/read_file.h"
#include "control/factory.h"
#include "control/policy.h"
#include "coord/coordinator.h"
#include "coord/counting_store.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "diloco_site/site_power.h"
#include "planning/fleet.h"
#include "sim/episode.h"
#include "twin/authority.h"
#include "twin/scenario.h"
#include "twin_link/twin_link.h"

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

double FrameBytes(const OpportunisticConfig& o) {
  const double n = static_cast<double>(o.parameters);
  return 28.0 + 8.0 + 4.0 * std::ceil(n / 256.0) + n + 32.0;
}

double ExchangeS(const OpportunisticConfig& o, int k, double rtt_s) {
  return o.comm_cpu_s_per_member * k + (k - 1) * FrameBytes(o) * 8.0 / o.link_bits_per_s +
         9.0 * rtt_s;
}

namespace {

struct Job {
  std::string name;
  std::string controller_kind;  // what MakeController built: ppo, pid, uncontrolled
  std::string policy_path;      // the ppo policy's file
  std::string controller_note;  // why ppo was asked and pid runs
  twin::Scenario scenario;
  std::optional<control::Policy> policy;
  std::optional<control::BuiltController> controller;
  std::unique_ptr<agent::Agent> agent;
  std::unique_ptr<TwinLink> link;
  std::unique_ptr<coord::SiteMember> member;
  std::unique_ptr<agent::SiteBudget> budget;
  std::unique_ptr<agent::PowerLimitGuard> guard;  // --guard-power-limit
  double floor_w = 0.0;                           // job
  double static_w = 0.0;                          // per GPU: the scenario's budget (the baseline's)
  double last_energy_j = 0.0;
  double grant_time_w_s = 0.0;  // integral of the acted-on job budget
  double last_acting_w = 0.0;
  double offset_s = 0.0;  // job time = site time + offset (advanced before the run)
  double tokens_at_start = 0.0;
  double energy_at_start_j = 0.0;
  bool was_held = false;
  uint64_t holds = 0;
  bool admitted_ever = false;
  std::string last_from;
};

// Below this duty a worker pauses (as the real one: diloco/worker.cc).
constexpr double kMinWorkerDuty = 0.05;

// An opportunistic DiLoCo worker (docs/FLEET.md, "Spare power in fleet-sim").
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

// The workers' one DiLoCo run: its members progress together (a round's members wait for the
// slowest; a paused member holds its round), then exchange.
struct WorkerRun {
  double progress_s = 0.0;       // of the round's compute, at duty 1
  double exchange_left_s = 0.0;  // > 0: exchanging
  int members = 0;               // of the round in progress
  double exchange_busy = 0.0;    // of a core, while exchanging
};

// One run: with a store (the site), or without (the baseline).
enum class Mode { kSite, kOwnBudgets, kUncontrolled };

Result<FleetSimRun> RunOnce(const FleetSimConfig& config, coord::Store* external, Mode mode,
                            std::vector<std::string>* names, uint64_t* reassignments,
                            uint64_t* writes, double* nameplate_w,
                            const std::function<void(double, double)>& progress, double offset,
                            double total, const Logger& log) {
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
  std::map<std::string, double> step_s;                          // per scenario, at defaults
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
      const std::string path = config.policies_dir.empty()
                                   ? std::string()
                                   : fmt::format("{}/{}.json", config.policies_dir, spec.scenario);
      control::ControllerSpec cs;
      cs.limits = LimitsOf(j.scenario);
      cs.interval_s = config.interval_s;
      const bool wants_ppo =
          mode != Mode::kUncontrolled && config.job_control && config.controller == "ppo";
      if (wants_ppo && !path.empty() && std::ifstream(path).good()) {
        auto p = control::LoadPolicy(path);
        if (!p) return std::move(p).error();
        j.policy = std::move(*p);
        j.policy_path = path;
      } else if (wants_ppo) {
        j.controller_note =
            config.policies_dir.empty()
                ? "no policies directory"
                : fmt::format("no policy for this scenario in {}", config.policies_dir);
      }
      jobs.push_back(std::move(j));
      Job& job = jobs.back();
      if (mode == Mode::kUncontrolled || !config.job_control) {
        cs.kind = "uncontrolled";  // the trainer's own settings (no budget, or a power limit)
        cs.concurrency = job.scenario.concurrency;
        cs.group_size = job.scenario.group_size;
      } else if (job.policy) {
        cs.kind = "ppo";
        cs.policy = &*job.policy;
      } else {
        cs.kind = "pid";
        cs.pid = control::PidGains{};
        // The fleet's jobs steer the workload only: the power limit there is the guard's
        // (guard_power_limit), sized by the coordinator's grants (docs/FLEET.md).
        cs.pid.assist.enabled = false;
        cs.concurrency = job.scenario.concurrency_range.lo;
        cs.group_size = job.scenario.group_size;
      }
      job.controller_kind = cs.kind;
      auto built = control::MakeController(cs);
      if (!built) return std::move(built).error();
      job.controller.emplace(std::move(*built));
      // A policy acts on the budgets it was trained on (its envelope for this scenario).
      const control::PolicyEnvelope* envelope =
          job.policy ? control::FindEnvelope(*job.policy, job.scenario.name) : nullptr;
      const auto [lo_w, hi_w] = envelope ? envelope->budget_range_w : job.scenario.budget_range_w;
      const int gpus = job.scenario.gpus;
      // Without job control a power limit is the only actuator, and with the guard one is the
      // backstop under the controller: the lowest limit is the floor (as the agent's). As the
      // agent's too (agent/options.cc), a policy's floor is at least the low end of its trained
      // range: SiteBudget clamps what the job acts on into that range, which must never raise
      // it above the grant.
      const bool guarded =
          config.job_control && config.guard_power_limit && mode != Mode::kUncontrolled;
      const double base_floor_per_gpu_w = !config.job_control || guarded
                                              ? job.scenario.power_limit_min_w
                                              : FloorPerGpuW(job.scenario);
      const double floor_per_gpu_w = config.job_control && job.policy
                                         ? std::max(base_floor_per_gpu_w, lo_w)
                                         : base_floor_per_gpu_w;
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
      if (guarded) {
        TwinLink* link = job.link.get();
        job.guard = std::make_unique<agent::PowerLimitGuard>(
            [link](int, double limit_w) {
              link->SetPowerLimit(limit_w);  // the twin's GPUs share one limit
              return OkStatus();
            },
            ac.budget_w);
      }
      if (config.random_offsets) {
        if (!step_s.contains(spec.scenario)) {
          step_s[spec.scenario] =
              twin::MeasureSetting(job.scenario, job.scenario.concurrency, job.scenario.group_size,
                                   0.0, {2, {config.seed}})
                  .step_time_s;
        }
        std::mt19937_64 draw(config.seed * 7919 + index);
        job.offset_s = std::uniform_real_distribution<double>(0.0, step_s[spec.scenario])(draw);
        (void)job.link->Read(job.offset_s);  // at its defaults, before anyone steers it
      }
      job.last_energy_j = job.link->twin().energy_j();
      job.tokens_at_start = job.link->twin().tokens_total();
      job.energy_at_start_j = job.last_energy_j;
      if (store != nullptr) {
        coord::MemberConfig mc;
        mc.site = "fleet-sim";
        mc.job = job.name;
        mc.gpus = gpus;
        mc.nameplate_w = job.scenario.nameplate_w * gpus;
        mc.floor_w = job.floor_w;
        mc.local_budget_w = job.floor_w;
        // What it draws held before admission (its GPUs idle with the model loaded), as the
        // agent measures it at start; counted so once the job is held (coord::StandbyChargeW).
        mc.standby_w = job.scenario.idle_loaded_w * gpus;
        mc.update_w = UpdatePerGpuW(job.scenario) * gpus;
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
          // Demand by phase (the floor outside rollout) where the floor is what the job's
          // other phases draw at its lowest actuation; with the guard the floor is the lowest
          // power limit, far below its training, so its demand stays the nameplate throughout.
          mc.phase_demand = !guarded;
        }
        if (config.phase_demand) mc.phase_demand = !guarded;
        mc.publish_phase_changes = config.opportunistic.workers > 0;
        job.member = std::make_unique<coord::SiteMember>(*store, mc, clock, quiet);
        job.budget = std::make_unique<agent::SiteBudget>(
            *job.member, gpus, [] { return 0.0; }, job.policy ? lo_w : agent::kMinBudgetPerGpuW,
            job.policy ? hi_w : job.scenario.nameplate_w, nullptr);
      }
    }
  }
  names->clear();
  for (const Job& j : jobs) names->push_back(j.name);

  // The opportunistic workers, their requests counted apart (and the coordinator's).
  const OpportunisticConfig& oc = config.opportunistic;
  std::optional<coord::CountingStore> worker_store, coordinator_store;
  std::vector<Worker> workers;
  WorkerRun wrun;
  if (store != nullptr) {
    worker_store.emplace(*store);
    coordinator_store.emplace(*store);
    for (int i = 0; i < oc.workers; ++i) {
      Worker w;
      w.name = fmt::format("diloco-{}", i + 1);
      coord::MemberConfig mc;
      mc.site = "fleet-sim";
      mc.job = w.name;
      mc.gpus = 1;
      mc.nameplate_w = dist::WorkerPowerW(oc.threads, 1.0, oc.watts_per_core);
      mc.lease_ttl_s = config.lease_ttl_s;
      mc.fence_margin_s = std::min(1.0, static_cast<double>(config.lease_ttl_s) / 3.0);
      mc.job_class = coord::JobClass::kOpportunistic;
      w.member = std::make_unique<coord::SiteMember>(*worker_store, mc, clock, quiet);
      workers.push_back(std::move(w));
    }
  }

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
    cc.max_hold_s = config.max_hold_s;
    cc.stagger_passes = config.stagger_passes;
    cc.reserve_updates = config.reserve_updates;
    if (config.opportunistic.workers > 0) {
      cc.loan_lead_s = config.loan_lead_s > 0.0 ? config.loan_lead_s : 3.0 * config.period_s;
      cc.loan_cover = config.loan_cover;
      cc.loan_margin = config.loan_margin;
    }
    coordinator = std::make_unique<coord::Coordinator>(*coordinator_store, cc, clock, log);
  }

  FleetSimRun run;
  std::array<std::optional<analysis::WindowStats>, 3> windows;
  analysis::BudgetSchedule moving;  // the site budget of the moment, with a schedule
  if (!config.schedule.empty()) {
    moving.Append(0.0, config.site_budget_w);
    for (const coord::BudgetEvent& e : config.schedule) moving.Append(e.t_s, e.site_budget_w);
  }
  for (size_t w = 0; w < 3; ++w) {
    if (config.schedule.empty()) {
      windows[w].emplace(kFleetWindowsS[w], config.site_budget_w);
    } else {
      windows[w].emplace(kFleetWindowsS[w], &moving);
    }
  }
  // The schedule's requests, and each decrease's settling.
  const double lead_s = config.budget_lead_s > 0.0 ? config.budget_lead_s : 3.0 * config.period_s;
  const std::vector<coord::BudgetRequest> requests =
      coordinator ? coord::PlanBudgetRequests(config.schedule, config.site_budget_w, lead_s)
                  : std::vector<coord::BudgetRequest>{};
  size_t next_request = 0;
  // settle_s of each decrease, on the site's true power (analysis::SettleTracker).
  std::optional<analysis::SettleTracker> settle;
  if (!config.schedule.empty()) settle.emplace(&moving);
  run.grant_w.assign(jobs.size(), {});
  run.phase.assign(jobs.size(), {});
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
      const double job_t_s = now_s + j.offset_s;  // the job's own clock
      Result<telemetry::Sample> sample = j.link->Read(job_t_s);
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
        j.agent->SetHold(b.hold_s, b.hold_id);  // reaches the twin through the actuation
        // Not admitted: the trainer starts no step (fails closed, as the agent's trainers do).
        j.agent->SetSite(b.site, b.standby);
      } else if (k > 0) {
        j.grant_time_w_s += j.agent->budget_w() * j.scenario.gpus * config.interval_s;
      }
      const bool held = j.link->twin().current_phase() == twin::Phase::kIdle;
      if (held && !j.was_held) ++j.holds;
      j.was_held = held;
      j.agent->Report(j.link->Report(job_t_s), job_t_s);
      const agent::Actuation& a = j.agent->Tick(job_t_s, sample);
      j.link->Apply(a);
      // Without job control the budget is a hardware power limit (none with no budget at all).
      if (!config.job_control && mode != Mode::kUncontrolled) {
        j.link->SetPowerLimit(j.agent->budget_w());
      }
      if (j.guard && sample.ok()) {
        j.guard->SetBudget(j.agent->budget_w(), quiet);
        j.guard->Observe(*sample, quiet);
      }
      // The controller's own power limit (hybrid actuation: a policy's third head, the shield's
      // decrease backstop): through the guard where there is one, else straight to the GPUs.
      if (config.job_control) {
        if (j.guard) {
          j.guard->Follow(a.power_limit_w, quiet);
        } else if (mode != Mode::kUncontrolled) {
          j.link->SetPowerLimit(a.power_limit_w);
        }
      }
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
    // The workers: what they drew since the last tick, then each serves its grant and the run
    // goes on at the duty the slowest member's grant allows.
    double opportunistic_w = 0.0;
    if (!workers.empty()) {
      OpportunisticRun& o = run.opportunistic;
      for (Worker& w : workers) {
        if (k > 0) {
          site_energy_j += w.power_w * config.interval_s;
          o.energy_j += w.power_w * config.interval_s;
        }
        w.member->Step();
        const coord::Acting a = w.member->Current();
        const double grant_w = a.state == coord::Acting::State::kGranted ? a.job_budget_w : 0.0;
        w.allowed = dist::DutyForGrant(grant_w, oc.threads, oc.watts_per_core);
        if (k > 0 && w.allowed < kMinWorkerDuty) o.worker_s_paused += config.interval_s;
      }
      const double round_s = oc.inner_steps * oc.step_s;
      const double full_w = dist::WorkerPowerW(oc.threads, 1.0, oc.watts_per_core);
      for (Worker& w : workers) w.power_w = 0.0;
      if (wrun.exchange_left_s > 0.0) {
        // Exchanging: one core each, busy for the exchange's CPU seconds.
        for (Worker& w : workers) {
          if (!w.in_round) continue;
          w.power_w = wrun.exchange_busy * oc.watts_per_core;
          o.exchange_j += w.power_w * config.interval_s;
          o.worker_s_waiting += config.interval_s;
        }
        wrun.exchange_left_s -= config.interval_s;
        if (wrun.exchange_left_s <= 1e-9) {
          wrun.exchange_left_s = 0.0;
          ++o.rounds;
          o.tokens += static_cast<double>(wrun.members) * oc.inner_steps * oc.threads *
                      oc.tokens_per_thread_step;
          for (Worker& w : workers) {
            if (w.in_round) w.model_round = o.rounds;
            w.in_round = false;  // the next round's members are those with watts at its start
          }
          wrun.members = 0;
        }
      } else {
        if (wrun.members == 0) {
          // A round starts: every worker with watts; one that missed a round resyncs first
          // (the donor's state: model, outer momentum, inner AdamW, 16 bytes a parameter).
          for (Worker& w : workers) {
            if (w.allowed < kMinWorkerDuty) continue;
            w.in_round = true;
            ++wrun.members;
            if (w.model_round != o.rounds) {
              ++o.resyncs;
              o.bytes_sent += 16.0 * static_cast<double>(oc.parameters);
              w.model_round = o.rounds;
            }
          }
          wrun.progress_s = 0.0;
        }
        double duty = 1.0;
        for (const Worker& w : workers) {
          if (w.in_round) duty = std::min(duty, w.allowed);
        }
        if (wrun.members > 0 && duty >= kMinWorkerDuty) {
          wrun.progress_s += duty * config.interval_s;
          for (Worker& w : workers) {
            if (w.in_round) {
              w.power_w = duty * full_w;
              o.compute_energy_j += w.power_w * config.interval_s;
            }
          }
          if (wrun.progress_s >= round_s - 1e-9) {
            const int m = wrun.members;
            // Whole ticks; one core each, busy for the exchange's CPU seconds.
            wrun.exchange_left_s =
                config.interval_s *
                std::max(1.0, std::ceil(ExchangeS(oc, m, oc.rtt_s) / config.interval_s - 1e-9));
            wrun.exchange_busy = std::min(1.0, oc.comm_cpu_s_per_member * m / wrun.exchange_left_s);
            o.bytes_sent += static_cast<double>(m) * (m - 1) * FrameBytes(oc);
          }
        } else if (wrun.members > 0) {
          for (const Worker& w : workers) {
            if (w.in_round) o.worker_s_waiting += config.interval_s;
          }
        }
      }
      for (Worker& w : workers) {
        w.member->Observe(now_s, w.power_w, w.power_w > 0.0 ? "train" : "idle", 0.0);
        opportunistic_w += w.power_w;
        if (w.shrink_from_s >= 0.0 && w.power_w <= w.shrink_to_w + 1e-6) {
          o.shrink_s.push_back(now_s - w.shrink_from_s);
          w.shrink_from_s = -1.0;
        }
      }
    }
    while (next_request < requests.size() && requests[next_request].at_s <= now_s + 1e-9) {
      if (auto st = coordinator->RequestSiteBudget(requests[next_request].site_budget_w);
          !st && log) {
        log.Error(st.error().message());
      }
      ++next_request;
    }
    if (coordinator && k % per_period == 0) {
      coordinator->Step();
      // Each worker's grant as the ledger now has it: a lower one starts a shrink.
      const auto& ledger = coordinator->status().ledger;
      for (Worker& w : workers) {
        if (!ledger) break;
        const auto it = ledger->jobs.find(w.name);
        const double g = it == ledger->jobs.end() ? 0.0 : it->second.grant_w;
        if (g < w.ledger_grant_w - 1e-6 && w.power_w > g + 1e-6) {
          if (w.shrink_from_s < 0.0) w.shrink_from_s = now_s;
          w.shrink_to_w = g;
        } else if (w.shrink_from_s >= 0.0) {
          w.shrink_to_w = std::max(w.shrink_to_w, g);  // raised again before it was met
        }
        w.ledger_grant_w = g;
      }
    }

    if (k > 0) {
      const double site_power_w = site_energy_j / config.interval_s;
      for (auto& w : windows) w->Add(now_s, site_power_w);
      if (settle) settle->Add(now_s, site_power_w);
      second_energy_j += site_energy_j;
      if (k % per_second == 0) {
        run.t_s.push_back(now_s);
        run.site_power_w.push_back(second_energy_j);
        if (!workers.empty()) {
          run.opportunistic.power_w.push_back(opportunistic_w);
          int training = 0;
          for (const Worker& w : workers) training += w.power_w > 0.0 ? 1 : 0;
          run.opportunistic.training.push_back(training);
        }
        second_energy_j = 0.0;
        run.budget_w.push_back(moving.empty() ? config.site_budget_w : moving.At(now_s));
        for (size_t i = 0; i < jobs.size(); ++i) {
          run.phase[i].push_back(static_cast<uint8_t>(jobs[i].link->twin().current_phase()));
          run.grant_w[i].push_back(jobs[i].budget
                                       ? jobs[i].last_acting_w
                                       : jobs[i].agent->budget_w() * jobs[i].scenario.gpus);
        }
      }
    }
    if (progress && k % (per_second * 60) == 0) progress(offset + now_s, total);
  }
  for (auto& w : windows) w->Finish(config.interval_s);
  if (settle) {
    settle->Finish();
    run.settle_s = settle->settled_s();
    run.unsettled = settle->unsettled();
  }
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
  double hold_tokens = 0.0;
  for (Job& j : jobs) {
    FleetSimJobResult r;
    r.job = j.name;
    r.scenario = j.scenario.name;
    r.gpus = j.scenario.gpus;
    r.tokens = j.link->twin().tokens_total() - j.tokens_at_start;
    r.energy_j = j.link->twin().energy_j() - j.energy_at_start_j;
    r.mean_grant_w = config.duration_s > 0.0 ? j.grant_time_w_s / config.duration_s : 0.0;
    r.floor_w = j.floor_w;
    r.admitted = j.budget ? j.admitted_ever : true;
    r.controller = j.controller_kind;
    r.policy = j.policy_path;
    r.controller_note = j.controller_note;
    run.tokens += r.tokens;
    run.energy_j += r.energy_j;
    const double held_s = j.link->twin().held_s();
    run.hold_count += j.holds;
    run.hold_total_s += held_s;
    if (config.duration_s > held_s) hold_tokens += held_s * r.tokens / (config.duration_s - held_s);
    run.jobs.push_back(std::move(r));
  }
  run.hold_tokens_cost_pct = run.tokens > 0.0 ? 100.0 * hold_tokens / run.tokens : 0.0;
  if (!workers.empty()) {
    // Coordination: the workers' requests, and the coordinator's in proportion to the members
    // the workers are; each request at store_request_cpu_s of a core. The exchanges' bytes on
    // the site's network.
    OpportunisticRun& o = run.opportunistic;
    o.workers = static_cast<int>(workers.size());
    const double share =
        static_cast<double>(workers.size()) / static_cast<double>(workers.size() + jobs.size());
    o.store_requests = worker_store->requests();
    o.membership_j = (static_cast<double>(worker_store->requests()) +
                      share * static_cast<double>(coordinator_store->requests())) *
                     oc.store_request_cpu_s * oc.watts_per_core;
    o.exchange_j += o.bytes_sent * oc.network_j_per_byte;
  }
  if (coordinator) {
    const auto& st = coordinator->status();
    *reassignments = st.ledger ? st.ledger->reassignments : 0;
    *writes = st.ledger_writes;
    coordinator->Resign();
    for (Job& j : jobs) j.member->Leave();
    for (Worker& w : workers) w.member->Leave();
  }
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
  std::vector<std::string> names;
  uint64_t unused_r = 0, unused_w = 0;
  double nameplate_w = 0.0;
  const bool scheduled = !config.schedule.empty();
  const bool opportunistic = config.opportunistic.workers > 0;
  const double total = ((scheduled ? 4.0 : 3.0) + (opportunistic ? 1.0 : 0.0)) * config.duration_s;
  auto site = RunOnce(config, store, Mode::kSite, &names, &out.reassignments, &out.ledger_writes,
                      &nameplate_w, progress, 0.0, total, log);
  if (!site) return std::move(site).error();
  out.site = std::move(*site);
  const double site_nameplate_w = nameplate_w;
  if (opportunistic) {
    // The same site, jobs and seeds without the workers.
    auto without = RunOnce(alone, nullptr, Mode::kSite, &names, &unused_r, &unused_w, &nameplate_w,
                           progress, (scheduled ? 4.0 : 3.0) * config.duration_s, total, log);
    if (!without) return std::move(without).error();
    out.opportunistic = true;
    out.alone = std::move(*without);
  }
  auto own = RunOnce(alone, nullptr, Mode::kOwnBudgets, &names, &unused_r, &unused_w, &nameplate_w,
                     progress, config.duration_s, total, log);
  if (!own) return std::move(own).error();
  out.own_budgets = std::move(*own);
  auto free = RunOnce(alone, nullptr, Mode::kUncontrolled, &names, &unused_r, &unused_w,
                      &nameplate_w, progress, 2.0 * config.duration_s, total, log);
  if (!free) return std::move(free).error();
  out.baseline = std::move(*free);
  out.nameplate_w = site_nameplate_w;
  if (scheduled) {
    // The same site with its budget held where it started: what the schedule cost.
    FleetSimConfig steady = alone;
    steady.schedule.clear();
    auto flat = RunOnce(steady, nullptr, Mode::kSite, &names, &unused_r, &unused_w, &nameplate_w,
                        progress, 3.0 * config.duration_s, total, log);
    if (!flat) return std::move(flat).error();
    out.scheduled = true;
    out.tokens_unscheduled = flat->tokens;
    out.decreases = out.site.settle_s.size() + out.site.unsettled;
  }
  return out;
}

}  // namespace headroom::sim
