#include "agent/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "agent/group_size_gate.h"
#include "common/process_identity.h"
#include "coord/layout.h"

namespace headroom::agent {

Status CheckAgentOptions(const AgentOptions& o) {
  if (o.source.empty()) {
    return Error::Usage(
        "--source is required: nvml (this node's GPUs), replay (a recorded trace) or twin (the "
        "simulator)");
  }
  if (o.source != "nvml" && o.source != "replay" && o.source != "twin") {
    return Error::Usage(fmt::format("--source: unknown '{}' (nvml, replay, twin)", o.source));
  }
  const bool site = o.in_site();
  if (site || !o.site.empty() || !o.job.empty()) {
    if (!site || o.site.empty() || o.job.empty()) {
      return Error::Usage("--site-etcd, --site and --job: give all three to join a site");
    }
    if (o.site_etcd.rfind("etcd://", 0) != 0 && o.site_etcd.rfind("etcds://", 0) != 0) {
      return Error::Usage(fmt::format(
          "--site-etcd '{}': expected etcd://HOST:PORT[,HOST:PORT...] (etcds:// with TLS)",
          o.site_etcd));
    }
    if (auto st = coord::CheckName(o.site, "--site"); !st) return st;
    if (auto st = coord::CheckName(o.job, "--job"); !st) return st;
  } else if (!o.site_log.empty() || o.node_overhead_w || o.nameplate_w || o.standby_w ||
             o.update_w || o.site_fail_open) {
    return Error::Usage(
        "--site-log, --node-overhead-w, --nameplate-w, --standby-w, --update-w and "
        "--site-fail-open need --site-etcd");
  }
  if (o.controller != "ppo" && o.controller != "pid" && o.controller != "uncontrolled") {
    return Error::Usage(
        fmt::format("--controller: unknown '{}' (uncontrolled, pid, ppo)", o.controller));
  }
  if (o.controller == "ppo" && o.policy.empty()) {
    return Error::Usage("--controller ppo needs --policy FILE");
  }
  if (o.guard_power_limit && o.source != "nvml") {
    return Error::Usage("--guard-power-limit needs --source nvml");
  }
  if (!o.gpus.empty() && o.source != "nvml") return Error::Usage("--gpus needs --source nvml");
  if (o.twin_follows_trainer && o.source != "twin") {
    return Error::Usage("--twin-follows-trainer: only with --source twin");
  }
  if (o.twin_follows_trainer && o.speed != 1.0) {
    return Error::Usage(fmt::format(
        "--twin-follows-trainer: the trainer runs in wall time; --speed must be 1, not {}",
        o.speed));
  }
  if (o.source == "replay" && o.replay.empty()) {
    return Error::Usage("--source replay needs --replay TRACE");
  }
  return OkStatus();
}

Result<const control::PolicyEnvelope*> EnvelopeFor(const control::Policy& policy,
                                                   const std::string& policy_path,
                                                   const std::string& scenario) {
  if (!scenario.empty()) return control::FindEnvelope(policy, scenario);
  if (policy.envelopes.size() == 1) return &policy.envelopes.front();
  return Error::Usage(fmt::format(
      "--controller ppo: {} was trained on {}; --scenario names the one this job is like",
      policy_path, fmt::join(policy.trained_on, ", ")));
}

double FenceMarginS(int64_t lease_ttl_s) {
  return std::min(1.0, static_cast<double>(lease_ttl_s) / 3.0);
}

namespace {

// --group-size-choices: parsed into the rule, checked against the range and the sizes given.
Status ApplyGroupSizeChoices(const AgentOptions& o, AgentConfig* config) {
  auto& choices = config->group_size_rule.choices;
  if (auto why = ParseGroupSizeChoices(o.group_size_choices, &choices); !why.empty()) {
    return Error::Usage(why);
  }
  const auto& range = config->limits.group_size;
  for (int c : choices) {
    if (c < range.lo || c > range.hi) {
      return Error::Usage(fmt::format(
          "--group-size-choices: {} is outside the group size range [{}, {}]{}", c, range.lo,
          range.hi, o.group_size_range.empty() ? " (--group-size-range sets it)" : ""));
    }
  }
  const auto among = [&](int v) {
    return std::find(choices.begin(), choices.end(), v) != choices.end();
  };
  if (o.safe_group_size && !among(config->safe_group_size)) {
    return Error::Usage(fmt::format("--safe-group-size: {} is not among --group-size-choices {}",
                                    config->safe_group_size, o.group_size_choices));
  }
  if (config->initial_group_size && !among(*config->initial_group_size)) {
    return Error::Usage(fmt::format("--initial-group-size: {} is not among --group-size-choices {}",
                                    *config->initial_group_size, o.group_size_choices));
  }
  // The trainer's own size (the job's) when it is a choice; else the nearest choice.
  config->safe_group_size = GroupSizeGate(config->group_size_rule).Snap(config->safe_group_size);
  return OkStatus();
}

}  // namespace

Result<AgentConfig> DeriveConfig(const AgentOptions& o, const control::PolicyEnvelope* job) {
  if (!job && !o.budget_w && o.source != "nvml") {
    return Error::Usage(
        "--budget-w: needed without --scenario (with --source nvml the default "
        "is the GPUs' enforced power limit)");
  }
  AgentConfig config;
  config.interval_s = o.interval_s;
  config.budget_w = o.budget_w ? *o.budget_w : job ? job->budget_w : 0.0;
  config.budget_from = o.budget_w ? "--budget-w" : job ? "the scenario" : "";
  config.floor_w = o.floor_w;
  if (job) {
    config.limits = job->limits;
  } else {
    config.limits.concurrency = {kDefaultConcurrencyRange.first, kDefaultConcurrencyRange.second};
    config.limits.group_size = {kDefaultGroupSizeRange.first, kDefaultGroupSizeRange.second};
  }
  if (o.concurrency_range.size() == 2) {
    config.limits.concurrency = {o.concurrency_range[0], o.concurrency_range[1]};
  }
  if (o.group_size_range.size() == 2) {
    config.limits.group_size = {o.group_size_range[0], o.group_size_range[1]};
  }
  for (const auto* r : {&config.limits.concurrency, &config.limits.group_size}) {
    if (r->lo < 1 || r->lo > r->hi) return Error::Usage("ranges: expected 1 <= low <= high");
  }
  config.safe_concurrency =
      config.limits.concurrency.Clamp(o.safe_concurrency.value_or(config.limits.concurrency.lo));
  // The trainer's own group size when the job says what it is; else the lowest.
  config.safe_group_size = config.limits.group_size.Clamp(
      o.safe_group_size.value_or(job ? job->group_size : config.limits.group_size.lo));
  if (o.initial_concurrency) {
    config.initial_concurrency = config.limits.concurrency.Clamp(*o.initial_concurrency);
  }
  if (o.initial_group_size) {
    config.initial_group_size = config.limits.group_size.Clamp(*o.initial_group_size);
  }
  config.group_size_rule.min_steps = o.group_size_min_steps;
  if (!o.group_size_choices.empty()) {
    if (auto st = ApplyGroupSizeChoices(o, &config); !st) return std::move(st).error();
  }
  config.valid_for_s = o.valid_for_s;
  // A member's decisions are trusted no longer than its lease (less the fencing margin): a
  // trainer whose agent stopped falls to its safe values before the site moves the watts.
  if (o.in_site() && o.speed > 0.0) {
    config.valid_for_s =
        std::min(config.valid_for_s,
                 (static_cast<double>(o.lease_ttl_s) - FenceMarginS(o.lease_ttl_s)) * o.speed);
  }
  config.stale_after_s = 3.0 * o.interval_s;
  // The trainer's silence is timed in wall seconds; agent time runs `speed` times as fast.
  config.report_timeout_s = o.report_timeout_s * (o.speed > 0.0 ? o.speed : 1.0);
  config.silent_power_limit = o.guard_power_limit;
  config.max_hold_s = o.max_hold_s;
  return config;
}

Result<control::ControllerSpec> DeriveController(const AgentOptions& o, const AgentConfig& config,
                                                 const control::PolicyEnvelope* job,
                                                 const control::Policy* policy) {
  control::ControllerSpec spec;
  spec.kind = o.controller;
  spec.limits = config.limits;
  spec.interval_s = o.interval_s;
  if (o.controller == "ppo") {
    // A policy acts only where it was trained: its envelope's budget range (as eval and train).
    const auto [lo_w, hi_w] = job->budget_range_w;
    if (!(config.budget_w >= lo_w && config.budget_w <= hi_w)) {
      return Error::Usage(fmt::format(
          "--budget-w: {} W is outside scenario '{}''s budget range [{}, {}] W per GPU, where "
          "the policy was trained (use --controller pid there)",
          config.budget_w, job->scenario, lo_w, hi_w));
    }
    spec.policy = policy;
  } else if (o.controller == "pid") {
    spec.pid = control::PidGains{};
    spec.concurrency = config.safe_concurrency;
    spec.group_size = job ? job->group_size : config.safe_group_size;
  } else {
    // Uncontrolled: the trainer's defaults: the job's, else the initial values, else the top.
    spec.concurrency =
        job ? job->concurrency : config.initial_concurrency.value_or(config.limits.concurrency.hi);
    spec.group_size =
        job ? job->group_size : config.initial_group_size.value_or(config.safe_group_size);
  }
  return spec;
}

Result<coord::MemberConfig> DeriveMember(const AgentOptions& o, const MemberFacts& f,
                                         const Logger& log) {
  double floor_per_gpu_w = 0.0;
  if (o.floor_w) {
    floor_per_gpu_w = *o.floor_w;
  } else if (f.floor_w) {
    floor_per_gpu_w = *f.floor_w;
  } else if (o.guard_power_limit && f.limit_range_w) {
    floor_per_gpu_w = f.limit_range_w->first;
  } else {
    return Error::Usage(
        "--site-etcd needs --floor-w (the job's power per GPU at its lowest actuation; with "
        "--guard-power-limit, the GPUs' lowest power limit is taken)");
  }
  // A policy acts on its trained budgets only: its floor is at least their low end.
  floor_per_gpu_w = std::max(floor_per_gpu_w, f.budget_range_w.first);
  double nameplate_per_gpu_w = 0.0;
  if (o.nameplate_w) {
    nameplate_per_gpu_w = *o.nameplate_w;
  } else if (f.nameplate_w) {
    nameplate_per_gpu_w = *f.nameplate_w;
  } else if (f.limit_range_w) {
    nameplate_per_gpu_w = f.limit_range_w->second;
  } else {
    return Error::Usage("--site-etcd needs --nameplate-w (per GPU) without --scenario");
  }
  if (nameplate_per_gpu_w < floor_per_gpu_w) {
    return Error::Usage(fmt::format("--nameplate-w {} W per GPU is below the floor {} W",
                                    nameplate_per_gpu_w, floor_per_gpu_w));
  }
  // In a site the job acts on its floor until the site grants more: a local budget above it
  // would draw watts no ledger holds (after a restart, or while etcd is unreachable).
  if (o.budget_w && *o.budget_w > floor_per_gpu_w + 1e-9) {
    return Error::Usage(fmt::format(
        "--budget-w {} W per GPU is above the job's floor {} W per GPU: with --site-etcd the site "
        "grants the budget and the job acts on its floor until then (drop --budget-w, or set "
        "it at most the floor)",
        *o.budget_w, floor_per_gpu_w));
  }
  // Standby: the GPUs idle with the model loaded, what the job draws while the site holds it.
  if (o.standby_w && *o.standby_w > nameplate_per_gpu_w + 1e-9) {
    return Error::Usage(fmt::format(
        "--standby-w {} W per GPU is above the nameplate {} W per GPU (standby is the GPUs "
        "idle with the model loaded)",
        *o.standby_w, nameplate_per_gpu_w));
  }
  double standby_per_gpu_w = floor_per_gpu_w;
  if (o.standby_w) {
    standby_per_gpu_w = *o.standby_w;
  } else if (f.standby_w) {
    standby_per_gpu_w = *f.standby_w;
  } else if (f.measured_w) {
    // Measured at start: the GPUs' power now. A trainer already running makes this high, which
    // errs on the safe side (capped at the floor).
    standby_per_gpu_w = *f.measured_w;
    log(fmt::format("site: standby {:.1f} W per GPU, measured at start (--standby-w sets one)",
                    std::min(standby_per_gpu_w, floor_per_gpu_w)));
  } else {
    log.Warn("site: standby unknown (telemetry unread at start): counted at the floor");
  }
  standby_per_gpu_w = std::min(standby_per_gpu_w, floor_per_gpu_w);
  coord::MemberConfig mc;
  mc.site = o.site;
  mc.job = o.job;
  mc.gpus = f.gpus;
  mc.standby_w = standby_per_gpu_w * f.gpus + f.overhead_w;
  mc.fail_open = o.site_fail_open;
  if (mc.fail_open) {
    log.Warn(
        "site: --site-fail-open: not admitted or etcd unreachable, the job runs on its local "
        "budget outside the site's count (unsafe for the site budget)");
  }
  mc.node_overhead_w = f.overhead_w;
  // The update's watts for reservations before the update (coord/reservation.h); unknown: 0
  // (the coordinator takes what the member's timeline measured).
  if (const std::optional<double> u = o.update_w ? o.update_w : f.update_w; u && *u > 0.0) {
    mc.update_w = std::min(*u, nameplate_per_gpu_w) * f.gpus + f.overhead_w;
  }
  mc.nameplate_w = nameplate_per_gpu_w * f.gpus + f.overhead_w;
  mc.floor_w = floor_per_gpu_w * f.gpus + f.overhead_w;
  // With no grant: the floor, or --budget-w when lower.
  mc.local_budget_w = o.budget_w ? *o.budget_w * f.gpus + f.overhead_w : mc.floor_w;
  mc.lease_ttl_s = o.lease_ttl_s;
  mc.fence_margin_s = FenceMarginS(o.lease_ttl_s);
  // The grant's watch carries it; a read every 10 s besides, for a stream gone quiet without
  // failing (docs/SITE.md, "Members watch their grant").
  mc.grant_read_s = 10.0;
  // A restart on this machine takes the place of this job's agent that is gone.
  mc.holder = f.holder;
  mc.holder_gone = [](std::string_view holder) { return IdentityGoneHere(holder); };
  return mc;
}

}  // namespace headroom::agent
