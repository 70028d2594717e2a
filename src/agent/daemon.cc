#include "agent/daemon.h"

#include <fmt/format.h>

#include <optional>

#include "control/controller.h"
#include "coord/member_session.h"

namespace headroom::agent {

AgentDaemon::AgentDaemon(DaemonParts parts, DaemonClock clock, Logger log)
    : parts_(std::move(parts)),
      clock_(std::move(clock)),
      log_(std::move(log)),
      core_(parts_.config, *parts_.controller),
      budget_(parts_.config.budget_w, parts_.config.budget_from) {
  shared_.agent = &core_;
  shared_.budget = &budget_;
  shared_.gpus = parts_.source->gpus();
  shared_.budget_range_w = parts_.budget_range_w;
  shared_.now_s = [this] { return agent_now_s_.load(); };
  shared_.unix_s = clock_.unix_s;
  shared_.reports_checked = parts_.link == nullptr || parts_.link->follows_trainer();
  if (!parts_.site) return;
  SiteParts& site = *parts_.site;
  shared_.budget = nullptr;  // the site sets the budget: POST /v1/budget answers 409
  shared_.site = true;
  member_.emplace(*site.store, site.member, clock_.monotonic_s, log_);
  shared_.site_health = [this] { return Health(); };
  site_budget_.emplace(
      *member_, parts_.source->gpus(),
      [this] { return parts_.site->overhead_w(clock_.monotonic_s()); }, site.budget_range_w.first,
      site.budget_range_w.second,
      [this](const coord::Acting& a, double per_gpu_w) {
        if (parts_.site_log) parts_.site_log->Budget(clock_.monotonic_s(), a, per_gpu_w);
      });
}

AgentDaemon::~AgentDaemon() = default;

SiteHealth AgentDaemon::Health() const {
  const coord::MemberStatus st = member_->status();
  SiteHealth h;
  h.site = parts_.site->member.site;
  h.job = parts_.site->member.job;
  h.state = std::string(coord::StateName(st.acting));
  h.job_budget_w = st.acting_job_budget_w;
  h.lease = static_cast<uint64_t>(st.lease);
  h.term = st.acting_term > 0 ? st.acting_term : st.max_term;
  h.fenced = st.acting == coord::Acting::State::kFenced;
  h.fences = st.fences;
  h.leases_lost = st.leases_lost;
  h.grants_watched = st.grants_watched;
  return h;
}

Status AgentDaemon::Listen(const std::string& host, int port, const ApiConfig& api,
                           const net::ServerLimits& limits) {
  server_.emplace(shared_, api, limits);
  return server_->Start(host, port);
}

void AgentDaemon::PowerLimit(double limit_w) {
  if (parts_.guard) {
    parts_.guard->Follow(limit_w, log_);
  } else if (parts_.hardware_limit) {
    parts_.hardware_limit(limit_w);
  } else if (limit_w > 0.0 && !limit_unwritten_said_) {
    log_.Warn(
        fmt::format("{} asks for a power limit of {:.0f} W per GPU; not written: "
                    "--guard-power-limit lets the agent write the GPUs' limits",
                    parts_.controller->name(), limit_w));
    limit_unwritten_said_ = true;
  }
}

void AgentDaemon::Observe(const telemetry::Sample& s, double budget_w) {
  if (parts_.guard) {
    parts_.guard->SetBudget(budget_w, log_);
    parts_.guard->Observe(s, log_);
  }
  SiteLog* const site_log = parts_.site_log.get();
  if (member_) {
    double power_w = parts_.site->overhead_w(clock_.monotonic_s());
    for (const auto& g : s.gpus) power_w += g.power_w.value_or(0.0);
    std::string phase = "rollout";
    double tokens_per_s = 0.0;
    {
      MutexLock lock(shared_.mu);
      if (const auto& report = core_.report()) phase = control::PhaseName(report->phase);
      tokens_per_s = core_.tokens_per_s();
    }
    member_->Observe(s.t_s, power_w, phase, tokens_per_s);
    if (site_log != nullptr && parts_.energy_j) {
      // The twin's true power over the interval that just ended, for an auditor's site sum.
      const double energy_j = parts_.energy_j();
      site_log->Power(clock_.monotonic_s(), (energy_j - last_energy_j_) / parts_.config.interval_s,
                      phase);
      last_energy_j_ = energy_j;
    }
  }
  if (site_log != nullptr) {
    // Its failed writes, where /metrics reads them.
    const uint64_t errors = site_log->errors();
    MutexLock lock(shared_.mu);
    for (; site_log_errors_noted_ < errors; ++site_log_errors_noted_) core_.NoteTraceWriteError();
  }
}

AgentDaemon::Stopped AgentDaemon::Run(const std::atomic<bool>& stop) {
  const double start_s = clock_.monotonic_s();
  const double speed = parts_.speed;
  Clock clock;
  // Agent time: wall time x speed; with speed 0 the loop runs as fast as it can and the API
  // sees the agent's own clock.
  clock.sleep_until = [&](double t_s) {
    agent_now_s_.store(t_s);
    if (speed > 0.0) clock_.sleep_until(start_s + t_s / speed);
  };
  RunnerOptions options;
  options.interval_s = parts_.config.interval_s;
  options.duration_s = parts_.duration_s;
  options.monotonic_s = clock_.monotonic_s;
  options.unix_s = clock_.unix_s;
  options.budget = site_budget_ ? static_cast<BudgetSource*>(&*site_budget_) : &budget_;
  options.power_limit = [this](double limit_w) { PowerLimit(limit_w); };
  options.observe = [this](const telemetry::Sample& s, double budget_w) { Observe(s, budget_w); };

  // The site's threads (coord/member_session.h): the member's store work four times a second,
  // and the grant's watch, a stream that brings each grant as the coordinator writes it
  // (docs/SITE.md, "Members watch their grant").
  std::optional<coord::MemberSession> session;
  if (member_) {
    session.emplace(*member_, coord::MemberSession::Options{0.25, /*watch=*/true,
                                                            parts_.site->grant_quiet_s, nullptr});
  }
  Stopped out;
  out.summary = agent::Run(*parts_.source, parts_.link, shared_, recorder_ ? &*recorder_ : nullptr,
                           options, clock, stop, log_);
  // 1. The power limits: nothing else may delay them.
  out.restored = parts_.guard ? parts_.guard->Restore(log_) : OkStatus();
  // 2. The server, which closes every connection at once whatever its clients do.
  if (server_) server_->Stop();
  if (member_) {
    // 3. The site threads.
    session->Stop();
    // 4. The lease, at once: the ledger keeps the floor until it forgets the job.
    member_->Leave();
  }
  return out;
}

}  // namespace headroom::agent
