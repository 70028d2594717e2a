#include "site_sim/sim_site.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <tuple>

#include "agent/agent.h"
#include "agent/budget.h"
#include "agent/guard.h"
#include "agent/site_budget.h"
#include "control/factory.h"
#include "control/policy.h"
#include "coord/layout.h"
#include "sim/episode.h"
#include "twin/authority.h"
#include "twin/scenario.h"
#include "twin_link/twin_link.h"

namespace headroom::site_sim {

struct SimSite::Job {
  std::string name;
  std::string controller_kind;  // what MakeController built: ppo, pid, uncontrolled
  std::string policy_path;      // the ppo policy's file
  std::string controller_note;  // why ppo was asked and pid runs
  twin::Scenario scenario;
  std::optional<control::Policy> policy;
  std::optional<control::BuiltController> controller;
  std::unique_ptr<agent::Agent> agent;
  std::unique_ptr<sim::TwinLink> link;
  std::unique_ptr<coord::SiteMember> member;
  std::unique_ptr<agent::SiteBudget> budget;
  std::unique_ptr<agent::PowerLimitGuard> guard;  // --guard-power-limit
  double lo_w = 0.0, hi_w = 0.0;                  // per GPU: the budgets it may act on
  double floor_w = 0.0;                           // job
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

namespace {

const auto kQuiet = [](const std::string&) {};

// The member's lease and its fence: a third of the TTL, at most 1 s.
coord::MemberConfig MemberBase(const std::string& site, const std::string& job,
                               int64_t lease_ttl_s) {
  coord::MemberConfig mc;
  mc.site = site;
  mc.job = job;
  mc.lease_ttl_s = lease_ttl_s;
  mc.fence_margin_s = std::min(1.0, static_cast<double>(lease_ttl_s) / 3.0);
  return mc;
}

coord::CoordinatorConfig CoordinatorConfigOf(const SimSiteConfig& c) {
  coord::CoordinatorConfig cc;
  cc.site = c.name;
  cc.site_budget_w = c.site_budget_w;
  cc.reserve_w = c.reserve_w;
  cc.period_s = c.period_s;
  cc.lease_ttl_s = c.lease_ttl_s;
  cc.id = c.name;
  cc.allocation = c.allocation;
  cc.fairness = c.fairness;
  cc.max_hold_s = c.max_hold_s;
  cc.stagger_passes = c.stagger_passes;
  cc.reserve_updates = c.reserve_updates;
  if (c.loan_lead_s > 0.0) {
    cc.loan_lead_s = c.loan_lead_s;
    cc.loan_cover = c.loan_cover;
    cc.loan_margin = c.loan_margin;
  }
  return cc;
}

// Whether the job runs the power limit guard under its controller (agent/guard.h).
bool Guarded(const SimSiteConfig& c) {
  return c.job_control && c.guard_power_limit && c.mode != SimSiteMode::kUncontrolled;
}

// What steers a job: its trainer's own settings without job control or with no budget at all,
// else its ppo policy where it has one, else pid.
control::ControllerSpec ControllerSpecOf(const SimSiteConfig& c, const twin::Scenario& s,
                                         const std::optional<control::Policy>& policy) {
  control::ControllerSpec cs;
  cs.limits = sim::LimitsOf(s);
  cs.interval_s = c.interval_s;
  if (c.mode == SimSiteMode::kUncontrolled || !c.job_control) {
    cs.kind = "uncontrolled";  // the trainer's own settings (no budget, or a power limit)
    cs.concurrency = s.concurrency;
    cs.group_size = s.group_size;
  } else if (policy) {
    cs.kind = "ppo";
    cs.policy = &*policy;
  } else {
    cs.kind = "pid";
    cs.pid = control::PidGains{};
    // The fleet's jobs steer the workload only: the power limit there is the guard's
    // (guard_power_limit), sized by the coordinator's grants (docs/SITE.md).
    cs.pid.assist.enabled = false;
    cs.concurrency = s.concurrency_range.lo;
    cs.group_size = s.group_size;
  }
  return cs;
}

}  // namespace

double StepOpportunistic(coord::SiteMember& member) {
  member.Step();
  const coord::Acting a = member.Current();
  return a.state == coord::Acting::State::kGranted ? a.job_budget_w : 0.0;
}

SimSite::SimSite(const SimSiteConfig& config)
    : config_(config),
      per_period_(std::max<int64_t>(1, std::llround(config.period_s / config.interval_s))) {}

SimSite::~SimSite() = default;

Result<std::unique_ptr<SimSite>> SimSite::Build(const SimSiteConfig& config, coord::Store* external,
                                                const Logger& log) {
  std::unique_ptr<SimSite> site(new SimSite(config));
  if (auto st = site->Open(external, log); !st) return std::move(st).error();
  return site;
}

Status SimSite::Open(coord::Store* external, const Logger& log) {
  log_ = log;
  const auto clock = [this] { return now_s_; };
  if (config_.mode == SimSiteMode::kSite) {
    // In memory, leases expire on simulated time.
    if (external == nullptr) memory_.emplace(clock);
    store_ = external != nullptr ? external : &*memory_;
    if (auto st = store_->Delete(coord::Keys(config_.name).root, /*prefix=*/true); !st) {
      return Error::Io(fmt::format("{}: {}", store_->Describe(), st.error().message()));
    }
  }
  if (auto st = AddJobs(); !st) return st;
  if (store_ == nullptr) return OkStatus();
  opportunistic_store_.emplace(*store_);
  coordinator_store_.emplace(*store_);
  if (config_.trace_jobs_w) {
    coord::MemberConfig mc = MemberBase(config_.name, "site-jobs", config_.lease_ttl_s);
    mc.nameplate_w = config_.site_budget_w;
    mc.update_s = config_.interval_s;
    trace_jobs_ = std::make_unique<coord::SiteMember>(*store_, mc, clock, kQuiet);
  }
  coordinator_ = std::make_unique<coord::Coordinator>(*coordinator_store_,
                                                      CoordinatorConfigOf(config_), clock, log_);
  const double lead_s =
      config_.budget_lead_s > 0.0 ? config_.budget_lead_s : 3.0 * config_.period_s;
  requests_ = coord::PlanBudgetRequests(config_.schedule, config_.site_budget_w, lead_s);
  return OkStatus();
}

Status SimSite::AddJobs() {
  uint64_t index = 0;
  for (const FleetSimJobSpec& spec : config_.jobs) {
    auto scenario = twin::LoadScenario(spec.scenario);
    if (!scenario) return std::move(scenario).error();
    if (!scenario->has_rollout) {
      return Error::Usage(
          fmt::format("--jobs: scenario '{}' has no rollout to steer", spec.scenario));
    }
    for (int c = 0; c < spec.count; ++c, ++index) {
      if (auto st = AddJob(spec.scenario, *scenario, c, index); !st) return st;
    }
  }
  return OkStatus();
}

Status SimSite::AddJob(const std::string& scenario_name, const twin::Scenario& scenario, int copy,
                       uint64_t index) {
  auto owned = std::make_unique<Job>();
  Job& job = *owned;
  job.name = fmt::format("{}-{}", scenario_name, copy + 1);
  job.scenario = scenario;
  const twin::Scenario& s = job.scenario;
  const std::string& dir = config_.policies_dir;
  const std::string path =
      dir.empty() ? std::string() : fmt::format("{}/{}.json", dir, scenario_name);
  const bool wants_ppo = config_.mode != SimSiteMode::kUncontrolled && config_.job_control &&
                         config_.controller == "ppo";
  if (wants_ppo && !path.empty() && std::ifstream(path).good()) {
    auto p = control::LoadPolicy(path);
    if (!p) return std::move(p).error();
    job.policy = std::move(*p);
    job.policy_path = path;
  } else if (wants_ppo) {
    job.controller_note = dir.empty() ? "no policies directory"
                                      : fmt::format("no policy for this scenario in {}", dir);
  }
  const control::ControllerSpec cs = ControllerSpecOf(config_, s, job.policy);
  job.controller_kind = cs.kind;
  auto built = control::MakeController(cs);
  if (!built) return std::move(built).error();
  job.controller.emplace(std::move(*built));
  // A policy acts on the budgets it was trained on (its envelope for this scenario).
  const control::PolicyEnvelope* envelope =
      job.policy ? control::FindEnvelope(*job.policy, s.name) : nullptr;
  std::tie(job.lo_w, job.hi_w) = envelope ? envelope->budget_range_w : s.budget_range_w;
  // Without job control a power limit is the only actuator, and with the guard one is the
  // backstop under the controller: the lowest limit is the floor (as the agent's). As the
  // agent's too (agent/options.cc), a policy's floor is at least the low end of its trained
  // range: SiteBudget clamps what the job acts on into that range, which must never raise
  // it above the grant.
  const bool guarded = Guarded(config_);
  const double base_floor_per_gpu_w =
      !config_.job_control || guarded ? s.power_limit_min_w : sim::FloorPerGpuW(s);
  const double floor_per_gpu_w = config_.job_control && job.policy
                                     ? std::max(base_floor_per_gpu_w, job.lo_w)
                                     : base_floor_per_gpu_w;
  job.floor_w = floor_per_gpu_w * s.gpus;
  nameplate_w_ += s.nameplate_w * s.gpus;
  agent::AgentConfig ac;
  ac.interval_s = config_.interval_s;
  ac.budget_w = store_ != nullptr                            ? floor_per_gpu_w
                : config_.mode == SimSiteMode::kUncontrolled ? s.nameplate_w
                                                             : s.budget_w;
  ac.budget_from = store_ != nullptr ? "the floor" : "the scenario";
  ac.floor_w = floor_per_gpu_w;
  ac.limits = cs.limits;
  ac.safe_concurrency = ac.limits.concurrency.lo;
  ac.safe_group_size = ac.limits.group_size.Clamp(s.group_size);
  ac.stale_after_s = 3.0 * config_.interval_s;
  job.agent = std::make_unique<agent::Agent>(ac, job.controller->get());
  job.link = std::make_unique<sim::TwinLink>(s, config_.seed * 1000 + index);
  if (guarded) {
    sim::TwinLink* link = job.link.get();
    job.guard = std::make_unique<agent::PowerLimitGuard>(
        [link](int, double limit_w) {
          link->SetPowerLimit(limit_w);  // the twin's GPUs share one limit
          return OkStatus();
        },
        ac.budget_w);
  }
  if (config_.random_offsets) {
    if (!step_s_.contains(scenario_name)) {
      step_s_[scenario_name] =
          twin::MeasureSetting(s, s.concurrency, s.group_size, 0.0, {2, {config_.seed}})
              .step_time_s;
    }
    std::mt19937_64 draw(config_.seed * 7919 + index);
    job.offset_s = std::uniform_real_distribution<double>(0.0, step_s_[scenario_name])(draw);
    (void)job.link->Read(job.offset_s);  // at its defaults, before anyone steers it
  }
  job.last_energy_j = job.link->twin().energy_j();
  job.tokens_at_start = job.link->twin().tokens_total();
  job.energy_at_start_j = job.last_energy_j;
  if (store_ != nullptr) {
    if (auto st = JoinJob(job, scenario_name); !st) return st;
  }
  jobs_.push_back(std::move(owned));
  return OkStatus();
}

Status SimSite::JoinJob(Job& job, const std::string& scenario_name) {
  const twin::Scenario& s = job.scenario;
  const int gpus = s.gpus;
  const bool guarded = Guarded(config_);
  coord::MemberConfig mc = MemberBase(config_.name, job.name, config_.lease_ttl_s);
  mc.gpus = gpus;
  mc.nameplate_w = s.nameplate_w * gpus;
  mc.floor_w = job.floor_w;
  mc.local_budget_w = job.floor_w;
  // What it draws held before admission (its GPUs idle with the model loaded), as the
  // agent measures it at start; counted so once the job is held (coord::StandbyChargeW).
  mc.standby_w = s.idle_loaded_w * gpus;
  mc.update_w = sim::UpdatePerGpuW(s) * gpus;
  if (config_.allocation == coord::Allocation::kValue) {
    if (!curves_.contains(scenario_name)) {
      auto curve = twin::RolloutValueCurve(s, twin::AuthorityOptions{});
      if (!curve) return std::move(curve).error();
      for (const twin::RolloutPoint& p : *curve) {
        curves_[scenario_name].push_back({p.rollout_power_w, p.rollout_tokens_per_s});
      }
    }
    for (const coord::ValuePoint& p : curves_[scenario_name]) {
      mc.value_curve.push_back({p.budget_w * gpus, p.tokens_per_s});
    }
    // Demand by phase (the floor outside rollout) where the floor is what the job's
    // other phases draw at its lowest actuation; with the guard the floor is the lowest
    // power limit, far below its training, so its demand stays the nameplate throughout.
    mc.phase_demand = !guarded;
  }
  if (config_.phase_demand) mc.phase_demand = !guarded;
  mc.publish_phase_changes = config_.publish_phase_changes;
  job.member = std::make_unique<coord::SiteMember>(
      *store_, mc, [this] { return now_s_; }, kQuiet);
  job.budget = std::make_unique<agent::SiteBudget>(
      *job.member, gpus, [] { return 0.0; }, job.policy ? job.lo_w : agent::kMinBudgetPerGpuW,
      job.policy ? job.hi_w : s.nameplate_w, nullptr);
  return OkStatus();
}

void SimSite::BeginTick(int64_t k) {
  now_s_ = static_cast<double>(k) * config_.interval_s;
  jobs_energy_j_ = 0.0;
  for (const std::unique_ptr<Job>& j : jobs_) TickJob(*j, k);
  if (trace_jobs_) TickTraceJobs();
}

void SimSite::TickJob(Job& j, int64_t k) {
  const double job_t_s = now_s_ + j.offset_s;  // the job's own clock
  Result<telemetry::Sample> sample = j.link->Read(job_t_s);
  const double energy_j = j.link->twin().energy_j();
  jobs_energy_j_ += energy_j - j.last_energy_j;
  j.last_energy_j = energy_j;
  if (j.budget) {
    // What it acted on over the interval that ends now.
    if (k > 0) j.grant_time_w_s += j.last_acting_w * config_.interval_s;
    const agent::BudgetInForce b = j.budget->Current(now_s_);
    if (b.budget_per_gpu_w != j.agent->budget_w() || b.from != j.last_from) {
      j.agent->SetBudget(b.budget_per_gpu_w, b.from);
      j.last_from = b.from;
    }
    j.agent->SetHold(b.hold_s, b.hold_id);  // reaches the twin through the actuation
    // Not admitted: the trainer starts no step (fails closed, as the agent's trainers do).
    j.agent->SetSite(b.site, b.standby);
  } else if (k > 0) {
    j.grant_time_w_s += j.agent->budget_w() * j.scenario.gpus * config_.interval_s;
  }
  const bool held = j.link->twin().current_phase() == twin::Phase::kIdle;
  if (held && !j.was_held) ++j.holds;
  j.was_held = held;
  j.agent->Report(j.link->Report(job_t_s), job_t_s);
  const agent::Actuation& a = j.agent->Tick(job_t_s, sample);
  j.link->Apply(a);
  const bool uncontrolled = config_.mode == SimSiteMode::kUncontrolled;
  // Without job control the budget is a hardware power limit (none with no budget at all).
  if (!config_.job_control && !uncontrolled) j.link->SetPowerLimit(j.agent->budget_w());
  if (j.guard && sample.ok()) {
    j.guard->SetBudget(j.agent->budget_w(), kQuiet);
    j.guard->Observe(*sample, kQuiet);
  }
  // The controller's own power limit (hybrid actuation: a policy's third head, the shield's
  // decrease backstop): through the guard where there is one, else straight to the GPUs.
  if (config_.job_control) {
    if (j.guard) {
      j.guard->Follow(a.power_limit_w, kQuiet);
    } else if (!uncontrolled) {
      j.link->SetPowerLimit(a.power_limit_w);
    }
  }
  if (j.member) {
    double power_w = 0.0;
    for (double p : j.link->twin().power_w()) power_w += p;
    j.member->Observe(now_s_, power_w, PhaseName(j.link->twin().current_phase()),
                      j.agent->tokens_per_s());
    j.member->Step();
    const coord::Acting acting = j.member->Current();
    j.last_acting_w = acting.job_budget_w;
    if (acting.state == coord::Acting::State::kGranted) j.admitted_ever = true;
  }
}

void SimSite::TickTraceJobs() {
  // The trace says what they draw: their demand.
  const double used_w = config_.trace_jobs_w(now_s_);
  trace_jobs_->Current();
  trace_jobs_->Observe(now_s_, used_w, "train", 0.0);
  trace_jobs_->SetDemandW(used_w);
  trace_jobs_->Step();
}

bool SimSite::EndTick(int64_t k) {
  while (next_request_ < requests_.size() && requests_[next_request_].at_s <= now_s_ + 1e-9) {
    if (auto st = coordinator_->RequestSiteBudget(requests_[next_request_].site_budget_w);
        !st && log_) {
      log_.Error(st.error().message());
    }
    ++next_request_;
  }
  if (!coordinator_ || k % per_period_ != 0) return false;
  coordinator_->Step();
  return true;
}

std::unique_ptr<coord::SiteMember> SimSite::JoinOpportunistic(const std::string& job,
                                                              double nameplate_w) {
  coord::MemberConfig mc = MemberBase(config_.name, job, config_.lease_ttl_s);
  mc.gpus = 1;
  mc.nameplate_w = nameplate_w;
  mc.job_class = coord::JobClass::kOpportunistic;
  return std::make_unique<coord::SiteMember>(
      *opportunistic_store_, mc, [this] { return now_s_; }, kQuiet);
}

void SimSite::Close() {
  if (!coordinator_) return;
  coordinator_->Resign();
  for (const std::unique_ptr<Job>& j : jobs_) j->member->Leave();
  if (trace_jobs_) trace_jobs_->Leave();
}

size_t SimSite::job_count() const { return jobs_.size(); }

double SimSite::JobGrantW(size_t i) const {
  const Job& j = *jobs_[i];
  return j.budget ? j.last_acting_w : j.agent->budget_w() * j.scenario.gpus;
}

Phase SimSite::JobPhase(size_t i) const { return jobs_[i]->link->twin().current_phase(); }

double SimSite::JobHeldS(size_t i) const { return jobs_[i]->link->twin().held_s(); }

uint64_t SimSite::JobHolds(size_t i) const { return jobs_[i]->holds; }

FleetSimJobResult SimSite::JobResult(size_t i, double duration_s) const {
  const Job& j = *jobs_[i];
  FleetSimJobResult r;
  r.job = j.name;
  r.scenario = j.scenario.name;
  r.gpus = j.scenario.gpus;
  r.tokens = j.link->twin().tokens_total() - j.tokens_at_start;
  r.energy_j = j.link->twin().energy_j() - j.energy_at_start_j;
  r.mean_grant_w = duration_s > 0.0 ? j.grant_time_w_s / duration_s : 0.0;
  r.floor_w = j.floor_w;
  r.admitted = j.budget ? j.admitted_ever : true;
  r.controller = j.controller_kind;
  r.policy = j.policy_path;
  r.controller_note = j.controller_note;
  return r;
}

std::optional<double> SimSite::LedgerGrantW(const std::string& job) const {
  if (!coordinator_ || !coordinator_->status().ledger) return std::nullopt;
  const coord::Ledger& ledger = *coordinator_->status().ledger;
  const auto it = ledger.jobs.find(job);
  return it == ledger.jobs.end() ? 0.0 : it->second.grant_w;
}

uint64_t SimSite::reassignments() const {
  if (!coordinator_) return 0;
  const auto& ledger = coordinator_->status().ledger;
  return ledger ? ledger->reassignments : 0;
}

uint64_t SimSite::ledger_writes() const {
  return coordinator_ ? coordinator_->status().ledger_writes : 0;
}

uint64_t SimSite::opportunistic_requests() const {
  return opportunistic_store_ ? opportunistic_store_->requests() : 0;
}

uint64_t SimSite::coordinator_requests() const {
  return coordinator_store_ ? coordinator_store_->requests() : 0;
}

}  // namespace headroom::site_sim
