// What a member's key says of its job and when it is put (member.h; docs/SITE.md, "Members
// write on change"): the value estimates, the step timeline, the demand, and the rule that puts
// the key only when what the coordinator plans on changed. SiteMember's, in a file of their own.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "common/phase.h"
#include "coord/member.h"

namespace headroom::coord {

namespace {

// Watts within this of each other are the same to the plan: a demand from a trace, or a grant
// that an allocation moved by a rounding, is not worth a raft write (a GPU's power limit is set
// in whole watts).
constexpr double kSameW = 0.5;

bool SameW(double a, double b) { return std::abs(a - b) <= kSameW; }

// A site that lends (publish_phase_changes) expects each job's draw from its power now
// (coord::ExpectedDrawW, x 1.05 by default): a power moved by more than this share of the one
// put is put. Half the loans' default margin: fleet-sim's lending site (8 workers, seeds 1-6)
// had 33 of 43,200 half-second windows over its budget against 30 with a put every second, at
// 0.47 puts per job per second; at 5 %, 0.27 puts and 27 windows against 21 (seeds 1-3).
constexpr double kPowerShare = 0.025;

// The timeline's events: its arrival (a rollout and a rest both seen) or end (startup,
// stopped), a step begun (a rollout), the update begun (the rest of the step), a hold begun or
// ended. The moving averages of the parts' lengths and powers change only at those (a part is
// folded in when it ends), so each event's put carries them fresh; between events only
// phase_elapsed_s and held_left_s move, with the clock, and a put each second would restate
// them. The leader's copy of those ages by the time since its put, at most one part.
bool TimelineEventsDiffer(const Member& a, const Member& b) {
  if (a.has_timeline != b.has_timeline) return true;
  if (!a.has_timeline) return false;
  const StepTimeline &s = a.timeline, &t = b.timeline;
  return s.step != t.step || s.in_rollout != t.in_rollout ||
         (s.held_left_s > 0.0) != (t.held_left_s > 0.0);
}

}  // namespace

// Whether the coordinator would plan differently on `now` than on `put`, the member key last
// put (docs/SITE.md, "Members write on change"). What it reads, and for what:
//   - floor, demand, class, standby, update watts, nameplate, GPUs, node overhead, Slurm job,
//     holder, lease: admission, the targets, the standby charge, reservations, a restart on
//     the same machine, --slurm (all but the demand fixed for a registration);
//   - whether the phase holds (IsHeldPhase: what a job not admitted is charged); the phase
//     itself where phase_demand or publish_phase_changes publishes each change (a site that
//     lends sees a job's rise within a period), and there the power too (kPowerShare);
//   - the step timeline's events (TimelineEventsDiffer): staggering, reservations and loans
//     predict each job's power from it;
//   - a value curve first built from the job's history (allocation by value: a curve where
//     there was a line at value_tokens_per_j).
// The rest describes the job and rides along with the next put: its power, value and tokens/s
// (estimates over value_window_s), a history curve's later changes, the grant acted on
// (budget_w: the coordinator reads its acknowledgement, acks/<job>).
bool PlanInputsChanged(const Member& put, const Member& now, const MemberConfig& c) {
  const bool phase_published = c.phase_demand || c.publish_phase_changes;
  if (put.lease != now.lease || put.gpus != now.gpus || put.job_class != now.job_class ||
      put.slurm_job != now.slurm_job || put.holder != now.holder || put.domain != now.domain) {
    return true;
  }
  if (!SameW(put.floor_w, now.floor_w) || !SameW(put.demand_w, now.demand_w) ||
      !SameW(put.standby_w, now.standby_w) || !SameW(put.update_w, now.update_w) ||
      !SameW(put.nameplate_w, now.nameplate_w) ||
      !SameW(put.node_overhead_w, now.node_overhead_w)) {
    return true;
  }
  if (phase_published ? put.phase != now.phase : IsHeldPhase(put.phase) != IsHeldPhase(now.phase)) {
    return true;
  }
  if (put.value_curve.empty() && !now.value_curve.empty()) return true;
  if (c.publish_phase_changes &&
      std::abs(now.power_w - put.power_w) > kPowerShare * put.power_w + kSameW) {
    return true;
  }
  return TimelineEventsDiffer(put, now);
}

double SiteMember::ValueLocked() const {
  // The slope of tokens/s on power over the window when power moved enough to estimate one
  // (least squares), else the average value: mean tokens/s over mean power. Never negative.
  const size_t n = observations_.size();
  if (n == 0) return 0.0;
  double sp = 0.0, st = 0.0, lo = INFINITY, hi = -INFINITY;
  for (const auto& o : observations_) {
    sp += o.power_w;
    st += o.tokens_per_s;
    lo = std::min(lo, o.power_w);
    hi = std::max(hi, o.power_w);
  }
  const double mp = sp / static_cast<double>(n);
  const double mt = st / static_cast<double>(n);
  if (!(mp > 0.0)) return 0.0;
  if (n >= 8 && hi - lo >= 0.05 * mp) {
    double sxy = 0.0, sxx = 0.0;
    for (const auto& o : observations_) {
      sxy += (o.power_w - mp) * (o.tokens_per_s - mt);
      sxx += (o.power_w - mp) * (o.power_w - mp);
    }
    if (sxx > 0.0) return std::max(0.0, sxy / sxx);
  }
  return std::max(0.0, mt / mp);
}

Member SiteMember::DemandLocked(LeaseId lease) const {
  Member m;
  m.job = config_.job;
  m.gpus = config_.gpus;
  m.nameplate_w = config_.nameplate_w;
  m.floor_w = config_.floor_w;
  m.job_class = config_.job_class;
  m.slurm_job = config_.slurm_job;
  // What it draws until granted: its standby, held at its step boundary (never granted, or
  // fenced and registered again: a newcomer); its floor where the standby is unknown or it
  // fails open (no hold).
  m.standby_w = config_.standby_w >= 0.0 && !config_.fail_open
                    ? std::min(config_.standby_w, config_.floor_w)
                    : config_.floor_w;
  m.update_w = config_.update_w;
  // The nameplate (the first version), or by phase: the floor outside rollout.
  m.demand_w = demand_override_w_ >= 0.0                                      ? demand_override_w_
               : config_.phase_demand && phase_ != PhaseName(Phase::kRollout) ? config_.floor_w
                                                                              : config_.nameplate_w;
  m.domain = config_.domain;
  if (declared_) {  // a domain's sums (Declare)
    m.gpus = declared_->gpus;
    m.nameplate_w = declared_->nameplate_w;
    m.floor_w = declared_->floor_w;
    m.standby_w = std::min(declared_->standby_w, declared_->floor_w);
    m.demand_w = std::clamp(declared_->demand_w, m.floor_w, std::max(m.floor_w, m.nameplate_w));
    if (!declared_->value_curve.empty()) m.value_curve = declared_->value_curve;
  }
  m.power_w = power_w_;
  m.node_overhead_w = config_.node_overhead_w;
  m.phase = phase_;
  m.value_tokens_per_j = ValueLocked();
  m.budget_w = served_.job_budget_w;
  m.lease = lease;
  m.holder = config_.holder;
  m.value_curve = config_.value_curve.empty() ? HistoryCurveLocked() : config_.value_curve;
  if (auto t = TimelineLocked()) {
    m.has_timeline = true;
    m.timeline = *t;
    m.tokens_per_s = MeanTokensPerSLocked();
  }
  return m;
}

std::vector<ValuePoint> SiteMember::HistoryCurveLocked() const {
  double lo = INFINITY, hi = -INFINITY, sum = 0.0;
  size_t n = 0;
  for (const auto& o : observations_) {
    if (!o.rollout) continue;
    lo = std::min(lo, o.power_w);
    hi = std::max(hi, o.power_w);
    sum += o.power_w;
    ++n;
  }
  if (n < 8 || !(hi - lo >= 0.05 * sum / static_cast<double>(n))) return {};
  constexpr int kBins = 8;
  std::array<double, kBins> p{}, t{}, c{};
  for (const auto& o : observations_) {
    if (!o.rollout) continue;
    const int b = std::min(kBins - 1, static_cast<int>((o.power_w - lo) / (hi - lo) * kBins));
    p[b] += o.power_w;
    t[b] += o.tokens_per_s;
    c[b] += 1.0;
  }
  std::vector<ValuePoint> out;
  for (int b = 0; b < kBins; ++b) {
    if (c[b] > 0.0) out.push_back({p[b] / c[b], t[b] / c[b]});
  }
  return out;
}

std::optional<StepTimeline> SiteMember::TimelineLocked() const {
  if (!rollout_.seen || !rest_.seen || part_ == Part::kNone) return std::nullopt;
  StepTimeline t;
  t.step = steps_seen_;
  t.in_rollout = part_ == Part::kRollout;
  t.phase_elapsed_s = part_ == Part::kHeld ? rest_.length_s : last_observed_s_ - part_start_s_;
  t.rollout_s = rollout_.length_s;
  t.rest_s = rest_.length_s;
  // Unconstrained: the top of the value curve given (what the rollout draws at its highest
  // setting), else what it drew under its grants -- a lower bound where the grant bound it.
  t.rollout_w = config_.value_curve.empty()
                    ? rollout_.power_w
                    : std::max(rollout_.power_w, config_.value_curve.back().budget_w);
  t.rest_w = rest_.power_w;
  t.held_w = held_.seen ? held_.power_w : std::min(rest_.power_w, config_.floor_w);
  if (part_ == Part::kHeld) {
    t.held_left_s = std::max(1e-3, held_for_s_ - (last_observed_s_ - part_start_s_));
  }
  return t;
}

std::optional<StepTimeline> SiteMember::Timeline() const {
  MutexLock lock(mu_);
  return TimelineLocked();
}

double SiteMember::MeanTokensPerSLocked() const {
  if (observations_.empty()) return 0.0;
  double sum = 0.0;
  for (const auto& o : observations_) sum += o.tokens_per_s;
  return sum / static_cast<double>(observations_.size());
}

std::vector<ValuePoint> SiteMember::HistoryCurve() const {
  MutexLock lock(mu_);
  return HistoryCurveLocked();
}

double SiteMember::ValueTokensPerJ() const {
  MutexLock lock(mu_);
  return ValueLocked();
}

}  // namespace headroom::coord
