#include "diloco_site/site_power.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace headroom::diloco {

double WorkerPowerW(int threads, double duty, double watts_per_core) {
  return std::max(0, threads) * std::clamp(duty, 0.0, 1.0) * watts_per_core;
}

double DutyForGrant(double grant_w, int threads, double watts_per_core) {
  const double full_w = WorkerPowerW(threads, 1.0, watts_per_core);
  if (!(full_w > 0.0) || !(grant_w > 0.0)) return 0.0;
  return std::min(1.0, grant_w / full_w);
}

SitePower::SitePower(coord::Store& store, const SitePowerConfig& config,
                     std::function<double()> now_s, Logger log)
    : config_(config), now_s_(std::move(now_s)) {
  coord::MemberConfig mc;
  mc.site = config.site;
  mc.job = config.job;
  mc.gpus = 1;  // a CPU worker: the field counts the job's accelerators, at least one
  mc.nameplate_w = WorkerPowerW(config.threads, 1.0, config.watts_per_core);
  mc.floor_w = 0.0;
  mc.local_budget_w = 0.0;
  mc.lease_ttl_s = config.lease_ttl_s;
  mc.job_class = coord::JobClass::kOpportunistic;
  mc.slurm_job = config.slurm_job;
  member_ = std::make_unique<coord::SiteMember>(store, mc, now_s_, std::move(log));
  session_.emplace(*member_,
                   coord::MemberSession::Options{config.step_s, /*watch=*/false, 30.0, [this] {
                                                   if (computing_.load()) return;
                                                   ServeGrantW();
                                                   member_->Observe(now_s_(), 0.0, "idle", 0.0);
                                                 }});
}

SitePower::~SitePower() {
  session_->Stop();
  member_->Leave();
}

void SitePower::SetComputing(bool computing) { computing_.store(computing); }

double SitePower::ServeGrantW() {
  const coord::Acting a = member_->Current();
  const double grant_w = a.state == coord::Acting::State::kGranted ? a.job_budget_w : 0.0;
  granted_w_.store(grant_w);
  return grant_w;
}

double SitePower::GrantedDuty(int threads, double duty) {
  const double grant_w = ServeGrantW();
  const double allowed =
      std::min(std::clamp(duty, 0.0, 1.0), DutyForGrant(grant_w, threads, config_.watts_per_core));
  member_->Observe(now_s_(), WorkerPowerW(threads, allowed, config_.watts_per_core), "train", 0.0);
  return allowed;
}

}  // namespace headroom::diloco
