// `headroom agent`: its flags; RunAgent (agent_run.cc) runs what they say.
#include "cli/agent_args.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli_main/renamed_options.h"

namespace headroom::cli {

namespace {

// What the agent asks of the trainer and takes from it: the twin following it, the group size's
// rules, how long a decision, a trainer's silence and a hold may last.
void AddTrainerOptions(CLI::App& app, AgentArgs* a) {
  app.add_flag("--twin-follows-trainer", a->o.twin_follows_trainer,
               "With --source twin: rehearse a real trainer without GPUs. The twin's phases and "
               "steps follow the trainer's POST /v1/report; its power is simulated for them at "
               "the decided concurrency and power limit (docs/TRAINERS.md)");
  app.add_option("--group-size-choices", a->o.group_size_choices,
                 "The group sizes the agent may choose, e.g. 4,8,16 (default: any in the range); "
                 "one fixes it: then only concurrency and the power limit move");
  app.add_option("--group-size-min-steps", a->o.group_size_min_steps,
                 "Change group size at most once every K trainer steps, and only at a step "
                 "boundary (docs/TRAINERS.md); 0: at any decision, as eval does")
      ->check(Integer(0, 100000));
  app.add_option("--valid-for-s", a->o.valid_for_s, "How long a client may trust a decision")
      ->check(Real(0.1, 3600.0));
  app.add_option("--report-timeout-s", a->o.report_timeout_s,
                 "A trainer that has reported and then says nothing this long is taken as gone: "
                 "the safe actuation (with --guard-power-limit, the budget as the GPUs' limit). "
                 "The client's heartbeat reports every 5 s")
      ->check(Real(1.0, 86400.0));
  app.add_option("--max-hold-s", a->o.max_hold_s,
                 "The longest hold before a step passed on to the trainer (a site's staggering); "
                 "the client refuses to start when its collective timeout is not above it")
      ->check(Real(1.0, 86400.0));
}

// Joining a site (docs/SITE.md): its etcd and how to reach it, the job's name and what it
// declares to the coordinator, what to do when not admitted, the site log.
void AddSiteOptions(CLI::App& app, AgentArgs* a) {
  app.add_option("--site-etcd", a->o.site_etcd,
                 "Join a site: its etcd, etcd://HOST:PORT[,HOST:PORT...] (etcds:// with TLS; "
                 "docs/SITE.md)");
  AddRenamedOption(app, "--fleet", "--site-etcd", &a->o.site_etcd);
  AddEtcdOptions(app, &a->etcd_options);
  app.add_option("--site", a->o.site, "The site's name (with --site-etcd)");
  app.add_option("--job", a->o.job, "This job's name at the site, unique there (with --site-etcd)");
  app.add_option("--lease-ttl-s", a->o.lease_ttl_s, "The membership lease's TTL (with --site-etcd)")
      ->check(Integer(2, 60));
  app.add_option("--node-overhead-w", a->o.node_overhead_w,
                 "The node's other power counted in the job's demand (default: the CPU "
                 "packages' power from powercap where readable, else 0)")
      ->check(Real(0.0, 1e6));
  app.add_option("--nameplate-w", a->o.nameplate_w,
                 "Nameplate per GPU (default: the scenario's), with --site-etcd")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option(
         "--standby-w", a->o.standby_w,
         "Per GPU, the job's GPUs idle with the model loaded: what it draws while the "
         "site holds it (default: the scenario's, else measured at start), with --site-etcd")
      ->check(Real(0.0, kMaxGpuPowerW));
  app.add_option("--update-w", a->o.update_w,
                 "Per GPU, what the job's update (log-probs, training) draws unconstrained: the "
                 "watts a coordinator with --stagger reserve reserves before it starts (default: "
                 "the scenario's, else what the step timeline measured), with --site-etcd")
      ->check(Real(0.0, kMaxGpuPowerW));
  AddRenamedFlag(app, "--fleet-fail-open", "--site-fail-open", &a->o.site_fail_open);
  app.add_flag("--site-fail-open", a->o.site_fail_open,
               "Not admitted, or etcd unreachable at start: run on the local budget instead of "
               "holding at standby (UNSAFE: such a job draws outside the site budget)");
  app.add_option("--site-log", a->o.site_log,
                 "Append every change of the budget acted on, one JSON object per line (an "
                 "auditor's input)");
  AddRenamedOption(app, "--fleet-log", "--site-log", &a->o.site_log);
}

}  // namespace

Command SetupAgent(CLI::App& app) {
  auto a = std::make_shared<AgentArgs>();
  auto config = std::make_shared<std::string>();
  app.add_option("--config", *config, "TOML file of these options (keys: the option names)");
  app.add_option("--source", a->o.source, "Telemetry: nvml, replay or twin (required)");
  app.add_option("--log-format", a->log_format,
                 "Log lines: text (RFC 3339 time, level, message) or json (one object a line)");
  app.add_option("--scenario", a->o.scenario,
                 "Scenario: ranges, defaults and budget, and what the twin runs (with --source "
                 "twin, default a100-7b-tp1); with --controller ppo, which of the policy's "
                 "envelopes to act in, when it has several");
  app.add_option("--seed", a->o.seed, "Twin seed")->check(Integer(0, kMaxSeed));
  app.add_option("--replay", a->o.replay, "Trace to replay (--source replay)");
  app.add_option("--nvml-library", a->nvml_library, "NVML library to load");
  app.add_option("--gpus", a->o.gpus, "The job's GPUs, NVML indices (default: every GPU)")
      ->delimiter(',')
      ->check(Integer(0, 1023));
  app.add_option("--speed", a->o.speed, "Agent seconds per wall second (0: as fast as possible)")
      ->check(Real(0.0, 1e6));
  app.add_option("--interval-s", a->o.interval_s, "Control interval")->check(Real(0.01, 60.0));
  app.add_option("--budget-w", a->o.budget_w,
                 "Budget per GPU (default: the scenario's, or the policy's)")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option("--floor-w", a->o.floor_w,
                 "The job's power per GPU at its lowest actuation, when known: a budget below "
                 "it is taken and the decision's reason says it cannot be met")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option("--controller", a->o.controller, "uncontrolled, pid or ppo");
  app.add_option("--policy", a->o.policy, "Policy JSON for ppo");
  app.add_option("--concurrency-range", a->o.concurrency_range, "LOW HIGH")
      ->expected(2)
      ->check(Integer(1, kMaxConcurrency));
  app.add_option("--group-size-range", a->o.group_size_range, "LOW HIGH")
      ->expected(2)
      ->check(Integer(1, kMaxGroupSize));
  app.add_option("--safe-concurrency", a->o.safe_concurrency, "Safe concurrency (default: lowest)")
      ->check(Integer(1, kMaxConcurrency));
  app.add_option("--safe-group-size", a->o.safe_group_size,
                 "Safe group size (default: the scenario's)")
      ->check(Integer(1, kMaxGroupSize));
  app.add_option("--initial-concurrency", a->o.initial_concurrency,
                 "Concurrency announced before the first decision (default: the safe one)")
      ->check(Integer(1, kMaxConcurrency));
  app.add_option("--initial-group-size", a->o.initial_group_size,
                 "Group size announced before the first decision (default: the safe one)")
      ->check(Integer(1, kMaxGroupSize));
  AddTrainerOptions(app, a.get());
  AddServerOptions(app, &a->server, "agent");
  app.add_flag("--token-on-reads", a->token_on_reads,
               "Require the token on reads too (the dashboard takes it as #token=T)");
  app.add_option("--trace-out", a->o.trace_out, "The agent's own trace (long CSV)");
  app.add_flag("--guard-power-limit", a->o.guard_power_limit,
               "Set the NVML power limit to the budget when power stays over it; restored on exit");
  app.add_option("--guard-state", a->guard_state,
                 "The guard's state file: the original limits, kept while any is changed "
                 "(default: $STATE_DIRECTORY or /var/lib/headroom, guard-state.json)");
  app.add_flag("--restore-limits", a->restore_limits,
               "Only restore the power limits a killed agent left in --guard-state, and exit "
               "(systemd's ExecStopPost)");
  AddSiteOptions(app, a.get());
  app.add_option("--duration-s", a->o.duration_s, "Stop after this much agent time")
      ->check(Real(0.0, 1e9));
  return [a, config, &app]() -> Status {
    std::vector<std::string> renamed_in_config;
    if (!config->empty()) {
      auto applied = ApplyConfigFile(app, *config, "agent");
      if (!applied) return std::move(applied).error();
      renamed_in_config = std::move(*applied);
    }
    a->deprecations = DeprecationNotes(app, renamed_in_config);
    return RunAgent(*a);
  };
}

}  // namespace headroom::cli
