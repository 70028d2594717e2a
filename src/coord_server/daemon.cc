#include "coord_server/daemon.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>
#include <vector>

#include "build_info/build_info.h"

namespace headroom::coord_server {

CoordinatorDaemon::CoordinatorDaemon(coord::Store& store, coord::CoordinatorConfig config,
                                     CoordinatorApiConfig api, std::optional<SlurmParts> slurm,
                                     CoordinatorClock clock, Logger log,
                                     std::optional<ParentParts> parent)
    : store_(store),
      config_(std::move(config)),
      api_(std::move(api)),
      slurm_(std::move(slurm)),
      clock_(std::move(clock)),
      log_(std::move(log)),
      server_(api_) {
  if (slurm_) suspender_.emplace(slurm_->suspender);
  if (parent) link_.emplace(*parent->store, parent->config, clock_.monotonic_s, log_);
}

Status CoordinatorDaemon::Listen(const net::ListenAddress& listen) {
  if (auto st = server_.Bind(listen.host, listen.port); !st) return st;
  config_.listen = listen.WithPort(server_.port());
  if (store_.WatchWaits()) {
    feed_ = std::make_unique<coord::FollowedFeed>(store_, coord::Keys(config_.site).root,
                                                  config_.period_s);
  }
  host_.emplace(store_, config_, clock_.monotonic_s, log_, feed_.get());
  // A target accepted is planned at once, not at the next period.
  host_->SetOnTarget(clock_.wake);
  // The last hour, one point per period, stamped with the wall clock (GET /v1/history).
  host_->KeepHistory(clock_.unix_s);
  return OkStatus();
}

void CoordinatorDaemon::StartLines() const {
  log_.Info(
      fmt::format("version {} (commit {}), replica {} of site '{}': etcd {}, site budget {:.1f} W "
                  "(when the site has no ledger yet), "
                  "reserve {:.1f} W, period {} s, lease TTL {} s, forget after {} s, token {}",
                  Version(), Commit(), config_.id, config_.site, store_.Describe(),
                  config_.site_budget_w, config_.reserve_w, config_.period_s, config_.lease_ttl_s,
                  config_.forget_after_s,
                  api_.access.token.empty()    ? "none"
                  : api_.access.token_on_reads ? "required on every route but the page"
                                               : "required on POST and GET /v1/history"),
      {{"version", Version()},
       {"commit", Commit()},
       {"replica", config_.id},
       {"site", config_.site},
       {"site_budget_w", config_.site_budget_w},
       {"reserve_w", config_.reserve_w}});
  if (link_) {
    const coord::ParentStatus p = link_->status();
    log_.Info(fmt::format("a domain of site '{}' (etcd {}): its budget is its grant from there",
                          p.site, p.etcd),
              {{"parent_site", p.site}});
  }
  log_.Info(fmt::format("listening on http://{}/", config_.listen), {{"listen", config_.listen}});
}

void CoordinatorDaemon::ApplySuspensions() {
  slurm::BatchScheduler& scheduler = *slurm_->scheduler;
  const std::vector<slurm::SuspendAction> actions =
      suspender_->Decide(host_->Snapshot(), clock_.monotonic_s());
  for (const slurm::SuspendAction& a : actions) {
    const bool suspend = a.kind == slurm::SuspendAction::Kind::kSuspend;
    const Status st = suspend ? scheduler.Suspend(a.slurm_job) : scheduler.Resume(a.slurm_job);
    if (st) {
      log_.Info(fmt::format("{}: slurm job {} {}", a.job, a.slurm_job,
                            suspend ? "suspended (no watts granted)" : "resumed (watts back)"),
                {{"job", a.job}, {"slurm_job", a.slurm_job}});
    } else {
      log_.Error(fmt::format("{}: {}", a.job, st.error().message()),
                 {{"job", a.job}, {"slurm_job", a.slurm_job}});
    }
    suspender_->Applied(a, st.ok(), clock_.monotonic_s());
  }
}

void CoordinatorDaemon::StepDomain() {
  const coord::CoordinatorStatus s = host_->Snapshot();
  const std::optional<double> want = link_->Step(s.role == "leader", s.ledger, s.members);
  if (want) {
    const SiteBudgetAnswer a = host_->RequestTarget(*want, std::nullopt);
    if (a.outcome == SiteBudgetAnswer::Outcome::kAccepted) {
      link_->Requested(*want);
      last_refusal_.clear();
    } else if (a.message != last_refusal_) {
      log_.Warn(fmt::format("domain '{}': its grant {:.1f} W is not its target yet: {}",
                            config_.site, *want, a.message),
                {{"site_budget_w", *want}});
      last_refusal_ = a.message;
    }
  }
  host_->SetParent(link_->status());
}

void CoordinatorDaemon::RunDomain() {
  const double period_s = config_.period_s;
  double next_s = clock_.monotonic_s();
  for (;;) {
    StepDomain();
    const double now_s = clock_.monotonic_s();
    while (next_s <= now_s) next_s += period_s;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(next_s - now_s));
    MutexLock lock(domain_mu_);
    if (WaitUntil(domain_wake_, domain_mu_, until,
                  [this]() REQUIRES(domain_mu_) { return domain_stop_; })) {
      break;
    }
  }
  link_->Leave();  // the parent lease: another replica takes the domain's place at once
}

void CoordinatorDaemon::Run(const std::atomic<bool>& stop) {
  server_.Serve(*host_);
  StartLines();
  if (link_) domain_thread_ = std::thread([this] { RunDomain(); });
  // Every period on the monotonic clock; a period missed (a slow store) is skipped, not caught
  // up.
  const double period_s = config_.period_s;
  double next_s = clock_.monotonic_s();
  while (!stop) {
    host_->Step();
    if (suspender_) ApplySuspensions();
    const double now_s = clock_.monotonic_s();
    while (next_s <= now_s) next_s += period_s;
    clock_.sleep_until(next_s);
  }
  // 1. The lease revoked, so another replica leads at once (not after the TTL); the API still
  // answers meanwhile.
  host_->Resign();
  if (domain_thread_.joinable()) {  // then the parent lease
    {
      MutexLock lock(domain_mu_);
      domain_stop_ = true;
    }
    domain_wake_.notify_all();
    domain_thread_.join();
  }
  // 2. Then the API.
  server_.Stop();
  log_("stopped");
}

}  // namespace headroom::coord_server
