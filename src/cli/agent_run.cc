// `headroom agent`: the flags turned into the daemon's parts (agent/daemon.h), which runs it.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>

#include "agent/daemon.h"
#include "agent/guard_state.h"
#include "agent/job_facts.h"
#include "agent/options.h"
#include "build_info/build_info.h"
#include "cli/agent_args.h"
#include "cli/agent_twin.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/credentials.h"
#include "cli/daemon_log.h"
#include "cli/server_options.h"
#include "cli/stop_signal.h"
#include "cli_main/etcd_options.h"
#include "common/paths.h"
#include "common/process_identity.h"
#include "etcd/lazy_store.h"
#include "telemetry/nvml_source.h"
#include "telemetry/replay_source.h"
#include "trace/meta.h"

namespace headroom::cli {
namespace {

using Log = Logger;

// What the job is like: a scenario's envelope, a policy's, or neither (the agent's defaults).
struct Job {
  std::string scenario_name;  // --scenario, or the twin's default; "" for none
  std::optional<AgentScenario> scenario;
  std::optional<control::Policy> policy;
  std::optional<control::PolicyEnvelope> envelope;
  const control::PolicyEnvelope* get() const { return envelope ? &*envelope : nullptr; }
};

Result<Job> ResolveJob(const AgentArgs& a, const Log& log) {
  Job job;
  job.scenario_name = a.o.scenario;
  if (job.scenario_name.empty() && a.o.source == "twin") job.scenario_name = kDefaultTwinScenario;
  if (!job.scenario_name.empty()) {
    auto s = LoadAgentScenario(job.scenario_name);
    if (!s) return std::move(s).error();
    job.scenario = std::move(*s);
    job.envelope = job.scenario->envelope;
  }
  if (a.o.controller != "ppo") return job;
  auto policy = control::LoadPolicy(a.o.policy);
  if (!policy) return std::move(policy).error();
  job.policy = std::move(*policy);
  // A policy acts in the envelope it was trained in; a scenario it was not trained on lends its
  // own (as eval does), with a warning.
  auto envelope = agent::EnvelopeFor(*job.policy, a.o.policy, job.scenario_name);
  if (!envelope) return std::move(envelope).error();
  if (*envelope != nullptr) {
    job.envelope = **envelope;
  } else {
    log.Warn(fmt::format("{} was trained on {}, not on scenario '{}'", a.o.policy,
                         fmt::join(job.policy->trained_on, ", "), job.envelope->scenario));
  }
  return job;
}

Status CheckEtcd(const AgentArgs& a) {
  const etcd::EtcdTls tls{a.etcd_options.cacert, a.etcd_options.cert, a.etcd_options.key};
  if (auto st = etcd::CheckEtcdAccess(a.o.site_etcd, tls); !st) {
    if (st.error().kind() == ErrorKind::kUsage) {
      return Error::Usage(fmt::format("--site-etcd: {}", st.error().message()));
    }
    return st;
  }
  auto c = etcd::ReadEtcdCredentials(a.etcd_options.user, a.etcd_options.password_file);
  return c ? OkStatus() : Status(std::move(c).error());
}

// Nothing the agent writes may land on what it reads (by path or through links); outputs are
// regular files or new paths, or /dev/null and /dev/stdout written in place (common/paths.h).
Status CheckOutputs(const AgentArgs& a, const std::string& guard_state) {
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"--replay", a.o.replay},
      {"--policy", a.o.policy},
      {"--scenario", a.o.scenario},
      {"--token-file", a.server.token.token_file}};
  if (!a.o.replay.empty())
    inputs.emplace_back("--replay's metadata", trace::MetaPathFor(a.o.replay));
  if (!a.o.trace_out.empty()) {
    if (auto st = RefuseOutputOverInput(a.o.trace_out, "--trace-out", inputs); !st) return st;
    if (auto st = RefuseOutputOverInput(trace::MetaPathFor(a.o.trace_out), "--trace-out's metadata",
                                        inputs);
        !st) {
      return st;
    }
    inputs.emplace_back("--trace-out", a.o.trace_out);
  }
  if (a.o.guard_power_limit) {
    if (auto st = RefuseOutputOverInput(guard_state, "--guard-state", inputs); !st) return st;
    if (auto st = agent::CheckGuardStateWritable(guard_state); !st) return st;
  }
  for (const auto& [flag, path] :
       {std::pair{"--trace-out", a.o.trace_out}, std::pair{"--site-log", a.o.site_log}}) {
    if (path.empty()) continue;
    if (auto kind = CheckOutputPath(path); !kind) {
      return Error::Io(fmt::format("{} {}", flag, kind.error().message()));
    }
  }
  return OkStatus();
}

// The telemetry source, into `parts`; with --source nvml and no budget, the GPUs' lowest
// enforced power limit becomes it.
Result<telemetry::NvmlSource*> OpenSource(const AgentArgs& a, const Job& job,
                                          agent::DaemonParts* parts, const Log& log) {
  if (a.o.source == "twin") {
    auto t = MakeAgentTwin(job.scenario_name, a.o.seed, a.o.twin_follows_trainer, a.o.in_site());
    if (!t) return std::move(t).error();
    parts->source = std::move(t->source);
    parts->link = t->link;
    parts->hardware_limit = std::move(t->set_limit);
    parts->energy_j = std::move(t->energy_j);
    return nullptr;
  }
  if (a.o.source == "replay") {
    auto r = telemetry::ReplaySource::Open(a.o.replay);
    if (!r) return std::move(r).error();
    parts->source = std::move(*r);
    return nullptr;
  }
  auto n = telemetry::NvmlSource::Open(a.nvml_library, a.o.gpus);
  if (!n) return std::move(n).error();
  telemetry::NvmlSource* nvml = n->get();
  parts->source = std::move(*n);
  if (parts->config.budget_w > 0.0) return nvml;
  const std::optional<double> lowest_w = agent::LowestEnforcedLimitW(*nvml);
  if (!lowest_w) {
    return Error::Usage(
        "--budget-w: not given, and the GPUs' enforced power limits cannot be read");
  }
  parts->config.budget_w = *lowest_w;
  parts->config.budget_from = "the GPUs' enforced power limit";
  log(
      fmt::format("budget {:.1f} W per GPU: the GPUs' lowest enforced power limit (--budget-w "
                  "sets one)",
                  *lowest_w));
  return nvml;
}

// A member of a site: the node's overhead, the member's config, the store (opened lazily).
Result<std::unique_ptr<etcd::LazyStore>> JoinSite(const AgentArgs& a, const Job& job,
                                                  telemetry::NvmlSource* nvml,
                                                  agent::DaemonParts* parts, const Log& log) {
  auto overhead = std::make_shared<telemetry::NodeOverhead>(
      agent::OpenNodeOverhead(a.o.node_overhead_w, SteadyNowS(), log));
  agent::MemberFacts f;
  f.gpus = parts->source->gpus();
  f.overhead_w = overhead->CurrentW(SteadyNowS());
  if (job.policy) f.budget_range_w = job.envelope->budget_range_w;
  // With the guard, the GPUs' lowest limit is the floor (the hardware holds the job there); the
  // highest is the nameplate.
  if (nvml != nullptr) f.limit_range_w = agent::MeanLimitRangeW(*nvml, log);
  // Fenced means held, and with the guard the GPUs at their lowest limit at once.
  if (a.o.guard_power_limit && f.limit_range_w) {
    parts->config.fenced_power_limit_w = f.limit_range_w->first;
  }
  if (job.envelope) f.nameplate_w = job.envelope->limits.nameplate_w;
  if (parts->link != nullptr) {  // the twin
    f.floor_w = job.scenario->floor_w;
    f.standby_w = job.scenario->idle_loaded_w;
    f.update_w = job.scenario->update_w;
  } else {
    f.measured_w = agent::MeanPowerW(*parts->source);
  }
  f.holder = ThisProcessIdentity();
  auto member = agent::DeriveMember(a.o, f, log);
  if (!member) return std::move(member).error();
  auto store = std::make_unique<etcd::LazyStore>(
      a.o.site_etcd, *etcd::ReadEtcdCredentials(a.etcd_options.user, a.etcd_options.password_file),
      etcd::EtcdTls{a.etcd_options.cacert, a.etcd_options.cert, a.etcd_options.key},
      a.etcd_options.KeepAlive());
  agent::SiteParts site;
  site.store = store.get();
  site.member = std::move(*member);
  site.budget_range_w = f.budget_range_w;
  site.overhead_w = [overhead](double t_s) { return overhead->CurrentW(t_s); };
  parts->site = std::move(site);
  if (!a.o.site_log.empty()) {
    auto fl = agent::SiteLog::Open(a.o.site_log, getpid(), a.o.job, log);
    if (!fl) return std::move(fl).error();
    parts->site_log = std::move(*fl);
  }
  return store;
}

// Bound: only now may the trace be touched. An earlier one is kept under a new name.
Status StartTrace(const AgentArgs& a, const Job& job, agent::AgentDaemon& daemon,
                  std::string_view controller, double budget_w, const Log& log) {
  if (a.o.trace_out.empty()) return OkStatus();
  auto kept = agent::RotateTrace(a.o.trace_out);
  if (!kept) return std::move(kept).error();
  if (!kept->empty()) log(fmt::format("the earlier trace {} is now {}", a.o.trace_out, *kept));
  trace::TraceMeta meta;
  meta.sample_interval_s = a.o.interval_s;
  meta.job = fmt::format(
      "headroom agent: {} source, {} controller, {}, budget {} W", daemon.source().name(),
      controller,
      job.scenario ? "scenario " + job.scenario->envelope.scenario : std::string("no scenario"),
      budget_w);
  if (a.o.source == "twin") {
    meta.gpu_model = job.scenario->gpu_model;
    meta.nameplate_w = job.scenario->envelope.limits.nameplate_w;
  }
  auto r = agent::Recorder::Open(a.o.trace_out, meta);
  if (!r) return std::move(r).error();
  daemon.Record(std::move(*r));
  return OkStatus();
}

// Everything the daemon is made of, from the options; nothing bound or written yet but the
// guard's restore of a state file left by a killed agent.
struct Assembled {
  Job job;
  std::optional<control::BuiltController> controller;
  agent::DaemonParts parts;
  std::unique_ptr<etcd::LazyStore> store;  // a site's; outlives the daemon
};

Result<std::unique_ptr<Assembled>> Assemble(const AgentArgs& a, const std::string& guard_state,
                                            const Log& log) {
  auto out = std::make_unique<Assembled>();
  auto job = ResolveJob(a, log);
  if (!job) return std::move(job).error();
  out->job = std::move(*job);
  const control::PolicyEnvelope* envelope = out->job.get();
  auto config = agent::DeriveConfig(a.o, envelope);
  if (!config) return std::move(config).error();
  const control::Policy* policy = out->job.policy ? &*out->job.policy : nullptr;
  auto spec = agent::DeriveController(a.o, *config, envelope, policy);
  if (!spec) return std::move(spec).error();
  auto controller = control::MakeController(*spec);
  if (!controller) return std::move(controller).error();
  out->controller.emplace(std::move(*controller));
  if (auto st = CheckOutputs(a, guard_state); !st) return std::move(st).error();
  agent::DaemonParts& parts = out->parts;
  parts.config = std::move(*config);
  parts.controller = &out->controller->get();
  if (policy) {
    parts.budget_range_w = envelope->budget_range_w;
    // What the trainer's reported admission is checked against (the mismatch, docs/AGENT.md).
    parts.config.policy_admission = std::string(control::AdmissionName(envelope->admission));
  }
  parts.speed = a.o.speed;
  parts.duration_s = a.o.duration_s;
  auto nvml = OpenSource(a, out->job, &parts, log);
  if (!nvml) return std::move(nvml).error();
  if (a.o.guard_power_limit) {
    // A state file left by an agent that was killed holds the true originals: put them back
    // before reading any limit as "original".
    if (auto st = agent::RestoreGuardState(guard_state, a.nvml_library,
                                           [&](const LogEvent& e) {
                                             if (!e.msg.starts_with("guard: no state file")) log(e);
                                           });
        !st) {
      return Error::Io(fmt::format("{}; run headroom agent --restore-limits before starting again",
                                   st.error().message()));
    }
    parts.guard = agent::MakeNvmlGuard(*nvml, parts.config.budget_w, guard_state, a.nvml_library,
                                       getpid(), log);
  }
  if (a.o.in_site()) {
    auto store = JoinSite(a, out->job, *nvml, &parts, log);
    if (!store) return std::move(store).error();
    out->store = std::move(*store);
  }
  return out;
}

}  // namespace

Status RunAgent(const AgentArgs& given) {
  LogFormat log_format = LogFormat::kText;
  if (!ParseLogFormat(given.log_format, &log_format)) {
    return Error::Usage(fmt::format("--log-format: unknown '{}' (text, json)", given.log_format));
  }
  const Log log = StreamLogger(log_format, "agent");  // each line with its time and level
  for (const std::string& note : given.deprecations) log.Warn(note);
  // Secrets the unit passes as systemd credentials, where no file is named (cli/credentials.h).
  AgentArgs a = given;
  for (const std::string& line : TakeCredentials(&a.server.token, &a.etcd_options)) log(line);
  const std::string guard_state =
      a.guard_state.empty() ? agent::DefaultGuardStatePath() : a.guard_state;
  if (a.restore_limits) return agent::RestoreGuardState(guard_state, a.nvml_library, log);
  // Options first: nothing is opened, bound or written before they are all good.
  if (auto st = agent::CheckAgentOptions(a.o); !st) return st;
  auto serving = ResolveServerOptions(a.server, log, "steer this job and read its power");
  if (!serving) return std::move(serving).error();
  if (a.token_on_reads && serving->access.token.empty()) {
    return Error::Usage("--token-on-reads needs a token (--token-file or HEADROOM_TOKEN)");
  }
  if (auto st = a.o.in_site() ? CheckEtcd(a) : OkStatus(); !st) return st;
  if (a.o.in_site()) {
    for (const std::string& w : EtcdSecretWarnings(a.etcd_options)) log.Warn(w);
  }
  auto assembled = Assemble(a, guard_state, log);
  if (!assembled) return std::move(assembled).error();
  const Job& job = (*assembled)->job;
  const double budget_w = (*assembled)->parts.config.budget_w;
  const std::string controller((*assembled)->controller->get().name());

  // From here on, signals stop the loop; the daemon's threads inherit their mask.
  StopSignal signals(log, "power limits first");
  const agent::DaemonClock clock{SteadyNowS, UnixNowS,
                                 [&signals](double t_s) { signals.SleepUntil(SteadyTime(t_s)); }};
  agent::AgentDaemon daemon(std::move((*assembled)->parts), clock, log);
  agent::ApiConfig api{serving->access};
  api.access.token_on_reads = a.token_on_reads;
  const net::ServerLimits limits{serving->max_connections, serving->max_connections_per_address};
  const net::ListenAddress& at = serving->listen;
  if (auto st = daemon.Listen(at.host, at.port, api, limits); !st) return st;
  if (auto st = StartTrace(a, job, daemon, controller, budget_w, log); !st) return st;
  const std::string source(daemon.source().name());
  const std::string listen = fmt::format("{}:{}", at.host, daemon.port());
  log.Info(fmt::format("version {} (commit {}), {} source, {} controller, budget {:.1f} W per GPU, "
                       "listening on {} (dashboard: http://{}/)",
                       Version(), Commit(), source, controller, budget_w, listen, listen),
           {{"version", Version()},
            {"commit", Commit()},
            {"source", source},
            {"controller", controller},
            {"budget_per_gpu_w", budget_w},
            {"listen", listen}});
  const agent::AgentDaemon::Stopped stopped = daemon.Run(signals.stop());
  const agent::RunSummary& summary = stopped.summary;
  log.Info(fmt::format("stopped after {:.1f} s, {} intervals, {} telemetry errors",
                       summary.duration_s, summary.intervals, summary.telemetry_errors),
           {{"duration_s", summary.duration_s},
            {"intervals", summary.intervals},
            {"telemetry_errors", summary.telemetry_errors}});
  if (!stopped.restored) return stopped.restored;
  if (summary.trace_write_errors > 0) {
    // The run went on; its trace did not: say so in the exit status.
    return Error::Io(
        fmt::format("--trace-out {}: {} write(s) failed, the first: {}; the trace is incomplete",
                    a.o.trace_out, summary.trace_write_errors, daemon.recorder()->first_error()));
  }
  if (!a.o.trace_out.empty()) fmt::print("trace      {}\n", a.o.trace_out);
  return OkStatus();
}

}  // namespace headroom::cli
