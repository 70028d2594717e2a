// `headroom agent`: live control beside a training job (docs/AGENT.md). Thin: options, the
// telemetry source, the controller, the clock and signals; the loop is agent/runner.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/api_server.h"
#include "agent/fleet_budget.h"
#include "agent/guard.h"
#include "agent/guard_state.h"
#include "agent/recorder.h"
#include "agent/runner.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/daemon_log.h"
#include "cli/etcd_options.h"
#include "cli/server_options.h"
#include "cli/stop_signal.h"
#include "common/build_info.h"
#include "common/paths.h"
#include "common/process_identity.h"
#include "common/read_file.h"
#include "control/baselines.h"
#include "control/factory.h"
#include "control/policy.h"
#include "coord/etcd_store.h"
#include "coord/member.h"
#include "sim/episode.h"
#include "sim/twin_link.h"
#include "telemetry/nvml_source.h"
#include "telemetry/powercap.h"
#include "telemetry/replay_source.h"
#include "trace/meta.h"
#include "twin/scenario.h"

namespace headroom::cli {
namespace {

// Without a scenario (--source nvml or replay with pid or uncontrolled): the agent's own
// defaults, documented in docs/AGENT.md.
inline constexpr const char* kDefaultTwinScenario = "a100-7b-tp1";
inline constexpr std::pair<int, int> kDefaultConcurrencyRange = {1, 256};
inline constexpr std::pair<int, int> kDefaultGroupSizeRange = {1, 64};
// In a site: the grant's watch stream is made again after this long with nothing on it, and
// the fleet thread still reads the grant every kGrantReadWithWatchS (a stream stalled on an
// etcd member that stopped answering, without failing).
inline constexpr double kGrantQuietS = 30.0;
inline constexpr double kGrantReadWithWatchS = 1.0;

struct AgentArgs {
  std::string log_format = "text";  // --log-format
  std::string source;    // no default: a forgotten --source must not steer a real job by the twin
  std::string scenario;  // none: the twin runs kDefaultTwinScenario
  uint64_t seed = 1;
  std::string replay;
  std::string nvml_library = telemetry::kNvmlLibrary;
  std::vector<int> gpus;
  double speed = 1.0;
  double interval_s = 0.5;
  std::optional<double> budget_w;
  std::optional<double> floor_w;
  std::string controller = "pid";
  std::string policy;
  std::vector<int> concurrency_range;
  std::vector<int> group_size_range;
  std::optional<int> safe_concurrency;
  std::optional<int> safe_group_size;
  std::optional<int> initial_concurrency;
  std::optional<int> initial_group_size;
  std::string group_size_choices;
  int group_size_min_steps = 10;
  double valid_for_s = 5.0;
  ServerArgs server = ListeningOn("127.0.0.1:10470");  // --listen, the token, --allow-host, caps
  bool token_on_reads = false;
  std::string trace_out;
  std::optional<double> duration_s;
  bool guard_power_limit = false;
  bool twin_follows_trainer = false;
  std::string guard_state;
  bool restore_limits = false;
  // A member of a site (docs/FLEET.md).
  std::string fleet;
  EtcdOptions etcd_options;  // --etcd-cacert, --etcd-cert, --etcd-key, --etcd-user, ...
  std::string site;
  std::string job;
  int64_t lease_ttl_s = 3;
  std::optional<double> node_overhead_w;
  std::optional<double> nameplate_w;
  std::optional<double> standby_w;  // per GPU
  bool fleet_fail_open = false;
  std::string fleet_log;
};

using Log = Logger;

// --fleet-log: one JSON object per line, appended and flushed at once (for an auditor). A write
// that fails (a full disk) is said once and counted (headroom_trace_write_errors_total, through
// the runner's thread); the agent goes on without it.
class FleetLog {
 public:
  FleetLog(std::FILE* f, std::string path, Log log)
      : f_(f), path_(std::move(path)), log_(std::move(log)) {}
  FleetLog(const FleetLog&) = delete;
  FleetLog& operator=(const FleetLog&) = delete;
  ~FleetLog() { std::fclose(f_); }

  // From the runner's thread (the budget's callback and the observer).
  void Line(const std::string& text) {
    if (std::fwrite(text.data(), 1, text.size(), f_) == text.size() && std::fflush(f_) == 0) {
      return;
    }
    const int error = errno != 0 ? errno : EIO;
    std::clearerr(f_);
    if (errors_.fetch_add(1) == 0) {
      log_.Error(
          fmt::format("--fleet-log {}: cannot write: {} (the agent goes on; "
                      "headroom_trace_write_errors_total counts the failed writes)",
                      path_, std::strerror(error)));
    }
  }
  uint64_t errors() const { return errors_.load(); }

 private:
  std::FILE* const f_;
  const std::string path_;
  const Log log_;
  std::atomic<uint64_t> errors_{0};
};

Result<control::Policy> ReadPolicy(const std::string& path) {
  auto text = ReadFileCapped(path, kMaxDataFileBytes);
  if (!text) return std::move(text).error();
  return control::PolicyFromJson(*text, path);
}

// Puts back the limits a state file holds, then removes it. Nothing there: nothing to do.
Status RestoreFromStateFile(const std::string& path, const std::string& library, const Log& log) {
  auto state = agent::ReadGuardState(path);
  if (!state) return std::move(state).error();
  if (!*state) {
    log(fmt::format("guard: no state file at {}: no power limit to restore", path));
    return OkStatus();
  }
  const agent::GuardState& s = **state;
  std::vector<int> indices;
  for (const auto& l : s.limits) indices.push_back(l.nvml_index);
  log(fmt::format("guard: restoring the power limits that agent {} left in {}", s.pid, path));
  if (!indices.empty()) {
    auto nvml = telemetry::NvmlSource::Open(library, indices);
    if (!nvml) {
      return Error::Io(
          fmt::format("guard: cannot restore the limits in {}: {}", path, nvml.error().message()));
    }
    Status first = OkStatus();
    for (size_t i = 0; i < s.limits.size(); ++i) {
      const auto& l = s.limits[i];
      if (auto st = (*nvml)->SetPowerLimitW(static_cast<int>(i), l.original_w); !st) {
        log.Error(fmt::format("guard: {}", st.error().message()), {{"gpu", l.nvml_index}});
        if (first) first = std::move(st);
        continue;
      }
      log.Info(fmt::format("guard: GPU {}: power limit restored to {:.0f} W", l.nvml_index,
                           l.original_w),
               {{"gpu", l.nvml_index}, {"limit_w", l.original_w}});
    }
    if (!first) {
      return Error::Io(fmt::format("guard: {} kept: {}", path, first.error().message()));
    }
  }
  return agent::RemoveGuardState(path);
}

// The site's store, opened on first use and again after a failure to open: an agent whose etcd
// is unreachable at start runs on its local budget and keeps trying (docs/FLEET.md).
class LazyStore final : public coord::Store {
 public:
  LazyStore(std::string endpoints, coord::EtcdCredentials credentials, coord::EtcdTls tls)
      : endpoints_(std::move(endpoints)),
        credentials_(std::move(credentials)),
        tls_(std::move(tls)) {}
  Result<coord::RangeResult> Get(const std::string& key, bool prefix) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Get(key, prefix);
  }
  Result<int64_t> Put(const std::string& key, const std::string& value,
                      coord::LeaseId lease) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Put(key, value, lease);
  }
  Result<int64_t> Delete(const std::string& key, bool prefix) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Delete(key, prefix);
  }
  Result<coord::TxnResult> Txn(const coord::TxnRequest& request) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Txn(request);
  }
  Result<coord::LeaseId> LeaseGrant(int64_t ttl_s) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->LeaseGrant(ttl_s);
  }
  Result<int64_t> LeaseKeepAlive(coord::LeaseId lease) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->LeaseKeepAlive(lease);
  }
  Status LeaseRevoke(coord::LeaseId lease) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->LeaseRevoke(lease);
  }
  Result<coord::WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                                   double wait_s) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Watch(key, prefix, after_revision, wait_s);
  }
  Result<int64_t> Follow(const std::string& key, bool prefix, int64_t after_revision,
                         double quiet_s,
                         const std::function<bool(const coord::WatchResult&)>& on_change) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Follow(key, prefix, after_revision, quiet_s, on_change);
  }
  void CancelFollows() override {
    MutexLock lock(mu_);
    canceled_ = true;
    if (store_) store_->CancelFollows();
  }
  Status Compact(int64_t revision) override {
    auto s = Open();
    if (!s) return std::move(s).error();
    return (*s)->Compact(revision);
  }
  std::string Describe() const override { return endpoints_; }

 private:
  // The fleet thread and the grant's watch call the store; once open, it stays.
  Result<coord::Store*> Open() {
    MutexLock lock(mu_);
    if (store_) return store_.get();
    if (canceled_) return Error::Io(fmt::format("etcd at {}: stopping", endpoints_));
    auto opened = coord::EtcdStore::Open(endpoints_, 2.0, credentials_, tls_);
    if (!opened) return std::move(opened).error();
    store_ = std::move(*opened);
    return store_.get();
  }
  const std::string endpoints_;
  const coord::EtcdCredentials credentials_;
  const coord::EtcdTls tls_;
  Mutex mu_;
  std::unique_ptr<coord::EtcdStore> store_ GUARDED_BY(mu_);
  bool canceled_ GUARDED_BY(mu_) = false;
};

Status RunAgent(const AgentArgs& args) {
  LogFormat log_format = LogFormat::kText;
  if (!ParseLogFormat(args.log_format, &log_format)) {
    return Error::Usage(fmt::format("--log-format: unknown '{}' (text, json)", args.log_format));
  }
  // Every line with its time and level (cli/daemon_log.h).
  const Log log = StreamLogger(log_format, "agent");
  const std::string guard_state =
      args.guard_state.empty() ? agent::DefaultGuardStatePath() : args.guard_state;
  if (args.restore_limits) return RestoreFromStateFile(guard_state, args.nvml_library, log);

  // Options first: nothing is opened, bound or written before they are all good.
  if (args.source.empty()) {
    return Error::Usage(
        "--source is required: nvml (this node's GPUs), replay (a recorded trace) or twin (the "
        "simulator)");
  }
  auto serving = ResolveServerOptions(args.server, log, "steer this job and read its power");
  if (!serving) return std::move(serving).error();
  if (args.token_on_reads && serving->access.token.empty()) {
    return Error::Usage("--token-on-reads needs a token (--token-file or HEADROOM_TOKEN)");
  }
  const net::ListenAddress& listen = serving->listen;

  const bool fleet = !args.fleet.empty();
  if (fleet || !args.site.empty() || !args.job.empty()) {
    if (!fleet || args.site.empty() || args.job.empty()) {
      return Error::Usage("--fleet, --site and --job: give all three to join a site");
    }
    if (args.fleet.rfind("etcd://", 0) != 0 && args.fleet.rfind("etcds://", 0) != 0) {
      return Error::Usage(
          fmt::format("--fleet '{}': expected etcd://HOST:PORT[,HOST:PORT...] (etcds:// with TLS)",
                      args.fleet));
    }
    const coord::EtcdTls tls{args.etcd_options.cacert, args.etcd_options.cert,
                             args.etcd_options.key};
    if (auto st = coord::CheckEtcdAccess(args.fleet, tls); !st) {
      const Error& e = st.error();
      if (e.kind() == ErrorKind::kUsage) {
        return Error::Usage(fmt::format("--fleet: {}", e.message()));
      }
      return e;
    }
    if (auto c =
            coord::ReadEtcdCredentials(args.etcd_options.user, args.etcd_options.password_file);
        !c) {
      return std::move(c).error();
    }
    if (auto st = coord::CheckName(args.site, "--site"); !st) return st;
    if (auto st = coord::CheckName(args.job, "--job"); !st) return st;
  } else if (!args.fleet_log.empty() || args.node_overhead_w || args.nameplate_w ||
             args.standby_w || args.fleet_fail_open) {
    return Error::Usage(
        "--fleet-log, --node-overhead-w, --nameplate-w, --standby-w and --fleet-fail-open need "
        "--fleet");
  }
  // A scenario only where something needs one: the twin runs it, and a PPO policy acts within
  // its ranges and trained budgets. Otherwise the agent's own keys and their defaults.
  std::string scenario_name = args.scenario;
  if (scenario_name.empty() && args.source == "twin") scenario_name = kDefaultTwinScenario;
  if (scenario_name.empty() && args.controller == "ppo") {
    return Error::Usage(
        "--controller ppo needs --scenario: the ranges and budgets its policy was trained on");
  }
  std::optional<twin::Scenario> scenario;
  if (!scenario_name.empty()) {
    auto loaded = twin::LoadScenario(scenario_name);
    if (!loaded) return std::move(loaded).error();
    if (!loaded->has_rollout) {
      return Error::Usage(fmt::format("--scenario '{}' has no rollout to steer", loaded->name));
    }
    scenario = std::move(*loaded);
  }
  if (!scenario && !args.budget_w && args.source != "nvml") {
    return Error::Usage(
        "--budget-w: needed without --scenario (with --source nvml the default "
        "is the GPUs' enforced power limit)");
  }
  agent::AgentConfig config;
  config.interval_s = args.interval_s;
  config.budget_w = args.budget_w ? *args.budget_w : scenario ? scenario->budget_w : 0.0;
  config.budget_from = args.budget_w ? "--budget-w" : scenario ? "the scenario" : "";
  config.floor_w = args.floor_w;
  if (scenario) {
    config.limits = sim::LimitsOf(*scenario);
  } else {
    config.limits.concurrency = {kDefaultConcurrencyRange.first, kDefaultConcurrencyRange.second};
    config.limits.group_size = {kDefaultGroupSizeRange.first, kDefaultGroupSizeRange.second};
  }
  if (args.concurrency_range.size() == 2) {
    config.limits.concurrency = {args.concurrency_range[0], args.concurrency_range[1]};
  }
  if (args.group_size_range.size() == 2) {
    config.limits.group_size = {args.group_size_range[0], args.group_size_range[1]};
  }
  for (const auto* r : {&config.limits.concurrency, &config.limits.group_size}) {
    if (r->lo < 1 || r->lo > r->hi) return Error::Usage("ranges: expected 1 <= low <= high");
  }
  config.safe_concurrency =
      config.limits.concurrency.Clamp(args.safe_concurrency.value_or(config.limits.concurrency.lo));
  // The trainer's own group size when a scenario says what it is; else the lowest.
  config.safe_group_size = config.limits.group_size.Clamp(
      args.safe_group_size.value_or(scenario ? scenario->group_size : config.limits.group_size.lo));
  if (args.initial_concurrency) {
    config.initial_concurrency = config.limits.concurrency.Clamp(*args.initial_concurrency);
  }
  if (args.initial_group_size) {
    config.initial_group_size = config.limits.group_size.Clamp(*args.initial_group_size);
  }
  config.group_size_rule.min_steps = args.group_size_min_steps;
  if (!args.group_size_choices.empty()) {
    auto& choices = config.group_size_rule.choices;
    if (auto why = agent::ParseGroupSizeChoices(args.group_size_choices, &choices); !why.empty()) {
      return Error::Usage(why);
    }
    const auto& range = config.limits.group_size;
    for (int c : choices) {
      if (c < range.lo || c > range.hi) {
        return Error::Usage(fmt::format(
            "--group-size-choices: {} is outside the group size range [{}, {}]{}", c, range.lo,
            range.hi, args.group_size_range.empty() ? " (--group-size-range sets it)" : ""));
      }
    }
    const auto among = [&](int v) {
      return std::find(choices.begin(), choices.end(), v) != choices.end();
    };
    if (args.safe_group_size && !among(config.safe_group_size)) {
      return Error::Usage(fmt::format("--safe-group-size: {} is not among --group-size-choices {}",
                                      config.safe_group_size, args.group_size_choices));
    }
    if (config.initial_group_size && !among(*config.initial_group_size)) {
      return Error::Usage(
          fmt::format("--initial-group-size: {} is not among --group-size-choices {}",
                      *config.initial_group_size, args.group_size_choices));
    }
    // The trainer's own size (the scenario's) when it is a choice; else the nearest choice.
    config.safe_group_size =
        agent::GroupSizeGate(config.group_size_rule).Snap(config.safe_group_size);
  }
  config.valid_for_s = args.valid_for_s;
  // A member's decisions are trusted no longer than its lease (less the fencing margin): a
  // trainer whose agent stopped falls to its safe values before the site moves the watts.
  const double fence_margin_s = std::min(1.0, static_cast<double>(args.lease_ttl_s) / 3.0);
  if (fleet && args.speed > 0.0) {
    config.valid_for_s = std::min(
        config.valid_for_s, (static_cast<double>(args.lease_ttl_s) - fence_margin_s) * args.speed);
  }
  config.stale_after_s = 3.0 * args.interval_s;

  // The controller, through the one factory (control/factory.h), as eval and train build it.
  std::optional<control::Policy> policy;
  control::ControllerSpec spec;
  spec.kind = args.controller;
  spec.limits = config.limits;
  spec.interval_s = args.interval_s;
  if (args.controller == "ppo") {
    if (args.policy.empty()) return Error::Usage("--controller ppo needs --policy FILE");
    auto p = ReadPolicy(args.policy);
    if (!p) return std::move(p).error();
    policy = std::move(*p);
    // A policy acts only where it was trained: the scenario's budget range (as eval and train).
    const auto [lo_w, hi_w] = scenario->budget_range_w;
    if (!(config.budget_w >= lo_w && config.budget_w <= hi_w)) {
      return Error::Usage(fmt::format(
          "--budget-w: {} W is outside scenario '{}''s budget range [{}, {}] W per GPU, where "
          "the policy was trained (use --controller pid there)",
          config.budget_w, scenario->name, lo_w, hi_w));
    }
    const auto& on = policy->trained_on;
    if (!on.empty() && std::find(on.begin(), on.end(), scenario->name) == on.end()) {
      log.Warn(fmt::format("{} was trained on {}, not on scenario '{}'", args.policy,
                           fmt::join(on, ", "), scenario->name));
    }
    spec.policy = &*policy;
  } else if (args.controller == "pid") {
    spec.pid = control::PidGains{};
    spec.concurrency = config.safe_concurrency;
    spec.group_size = scenario ? scenario->group_size : config.safe_group_size;
  } else if (args.controller == "uncontrolled") {
    // The trainer's defaults: the scenario's, else the initial values, else the range's top.
    spec.concurrency = scenario ? scenario->concurrency
                                : config.initial_concurrency.value_or(config.limits.concurrency.hi);
    spec.group_size = scenario ? scenario->group_size
                               : config.initial_group_size.value_or(config.safe_group_size);
  } else {
    return Error::Usage(
        fmt::format("--controller: unknown '{}' (uncontrolled, pid, ppo)", args.controller));
  }
  auto built = control::MakeController(spec);
  if (!built) return std::move(built).error();
  control::Controller* controller = &built->get();

  if (args.guard_power_limit && args.source != "nvml") {
    return Error::Usage("--guard-power-limit needs --source nvml");
  }
  if (!args.gpus.empty() && args.source != "nvml")
    return Error::Usage("--gpus needs --source nvml");
  {
    // Nothing the agent writes may land on what it reads (by path or through links).
    std::vector<std::pair<std::string, std::string>> inputs = {
        {"--replay", args.replay},
        {"--policy", args.policy},
        {"--scenario", args.scenario},
        {"--token-file", args.server.token.token_file}};
    if (!args.replay.empty())
      inputs.emplace_back("--replay's metadata", trace::MetaPathFor(args.replay));
    if (!args.trace_out.empty()) {
      if (auto st = RefuseOutputOverInput(args.trace_out, "--trace-out", inputs); !st) return st;
      if (auto st = RefuseOutputOverInput(trace::MetaPathFor(args.trace_out),
                                          "--trace-out's metadata", inputs);
          !st) {
        return st;
      }
      inputs.emplace_back("--trace-out", args.trace_out);
    }
    if (args.guard_power_limit) {
      if (auto st = RefuseOutputOverInput(guard_state, "--guard-state", inputs); !st) return st;
    }
  }
  if (args.guard_power_limit) {
    if (auto st = agent::CheckGuardStateWritable(guard_state); !st) return st;
  }

  // The telemetry source.
  std::unique_ptr<telemetry::Source> source;
  sim::TwinLink* twin = nullptr;
  telemetry::NvmlSource* nvml = nullptr;
  if (args.twin_follows_trainer && args.source != "twin") {
    return Error::Usage("--twin-follows-trainer: only with --source twin");
  }
  if (args.twin_follows_trainer && args.speed != 1.0) {
    return Error::Usage(fmt::format(
        "--twin-follows-trainer: the trainer runs in wall time; --speed must be 1, not {}",
        args.speed));
  }
  if (args.source == "twin") {
    twin::Scenario twin_scenario = *scenario;
    if (fleet) {
      // In a site the twin's trainer asks before its first step, as the client's trainer does
      // (take_hold at the first step boundary): its model loads for a second first, so the
      // site's answer -- held until admitted -- comes before any step begins.
      twin_scenario.startup_s = std::max(twin_scenario.startup_s, 1.0);
    }
    auto t = std::make_unique<sim::TwinLink>(twin_scenario, args.seed, args.twin_follows_trainer);
    twin = t.get();
    source = std::move(t);
  } else if (args.source == "replay") {
    if (args.replay.empty()) return Error::Usage("--source replay needs --replay TRACE");
    auto r = telemetry::ReplaySource::Open(args.replay);
    if (!r) return std::move(r).error();
    source = std::move(*r);
  } else if (args.source == "nvml") {
    auto n = telemetry::NvmlSource::Open(args.nvml_library, args.gpus);
    if (!n) return std::move(n).error();
    nvml = n->get();
    source = std::move(*n);
    if (!args.budget_w && !scenario) {
      // No budget given: the lowest enforced power limit of the job's GPUs, read now.
      auto first = nvml->Read(0.0);
      double lowest_w = 0.0;
      if (first) {
        for (const auto& g : first->gpus) {
          if (g.power_limit_w && (lowest_w == 0.0 || *g.power_limit_w < lowest_w)) {
            lowest_w = *g.power_limit_w;
          }
        }
      }
      if (!(lowest_w > 0.0)) {
        return Error::Usage(
            "--budget-w: not given, and the GPUs' enforced power limits cannot be read");
      }
      config.budget_w = lowest_w;
      config.budget_from = "the GPUs' enforced power limit";
      log(
          fmt::format("budget {:.1f} W per GPU: the GPUs' lowest enforced power limit "
                      "(--budget-w sets one)",
                      lowest_w));
    }
  } else {
    return Error::Usage(fmt::format("--source: unknown '{}' (nvml, replay, twin)", args.source));
  }

  // A state file left by an agent that was killed: its limits are the true originals. Put them
  // back before reading any limit as "original".
  std::optional<agent::PowerLimitGuard> guard;
  if (args.guard_power_limit) {
    if (auto st = RestoreFromStateFile(guard_state, args.nvml_library,
                                       [&](const LogEvent& e) {
                                         if (!e.msg.starts_with("guard: no state file")) log(e);
                                       });
        !st) {
      return Error::Io(fmt::format("{}; run headroom agent --restore-limits before starting again",
                                   st.error().message()));
    }
    const std::vector<int> indices = nvml->indices();
    const std::string library = args.nvml_library;
    guard.emplace(
        [nvml](int gpu, double w) { return nvml->SetPowerLimitW(gpu, w); }, config.budget_w, 4,
        0.02,
        [guard_state, indices, library](const std::vector<std::pair<int, double>>& originals) {
          agent::GuardState state;
          state.pid = static_cast<long long>(getpid());
          state.nvml_library = library;
          for (const auto& [gpu, w] : originals) {
            state.limits.push_back({indices[static_cast<size_t>(gpu)], w});
          }
          return agent::WriteGuardState(guard_state, state);
        },
        [guard_state, log] {
          if (auto st = agent::RemoveGuardState(guard_state); !st) {
            log.Error(st.error().message());
          }
        });
  }

  // A member of a site: its floor, nameplate and node overhead, whole-job watts.
  std::optional<coord::MemberConfig> member_config;
  std::optional<telemetry::NodeOverhead> overhead;
  double fleet_lo_w = kMinGpuPowerW, fleet_hi_w = kMaxGpuPowerW;  // per GPU, the controller's
  if (fleet) {
    const int gpus = source->gpus();
    if (args.node_overhead_w) {
      overhead.emplace(telemetry::NodeOverhead::Constant(*args.node_overhead_w));
    } else if (auto reader = telemetry::PowercapReader::Open(); reader) {
      auto o = telemetry::NodeOverhead::Powercap(std::move(*reader), SteadyNowS());
      if (o) {
        overhead.emplace(std::move(*o));
      } else {
        log.Warn(
            fmt::format("node overhead 0 W: {} (--node-overhead-w sets one)", o.error().message()));
      }
    } else {
      log.Warn(fmt::format("node overhead 0 W: {} (--node-overhead-w sets one)",
                           reader.error().message()));
    }
    if (!overhead) overhead.emplace(telemetry::NodeOverhead::Constant(0.0));
    const double overhead_w = overhead->CurrentW(SteadyNowS());
    if (policy) std::tie(fleet_lo_w, fleet_hi_w) = scenario->budget_range_w;
    // The GPUs' power limit range, where NVML says: with the guard, the lowest limit is the
    // floor (the hardware holds the job there); the highest is the nameplate.
    std::optional<std::pair<double, double>> limit_range_w;
    if (nvml != nullptr) {
      double lo_sum = 0.0, hi_sum = 0.0;
      bool all = true;
      for (int g = 0; g < gpus && all; ++g) {
        auto r = nvml->PowerLimitRangeW(g);
        if (!r) {
          log.Warn(fmt::format("fleet: {}", r.error().message()));
          all = false;
        } else {
          lo_sum += r->first;
          hi_sum += r->second;
        }
      }
      if (all) limit_range_w = std::pair{lo_sum / gpus, hi_sum / gpus};
    }
    double floor_per_gpu_w = 0.0;
    if (args.floor_w) {
      floor_per_gpu_w = *args.floor_w;
    } else if (twin != nullptr) {
      floor_per_gpu_w = sim::FloorPerGpuW(*scenario);
    } else if (args.guard_power_limit && limit_range_w) {
      floor_per_gpu_w = limit_range_w->first;
    } else {
      return Error::Usage(
          "--fleet needs --floor-w (the job's power per GPU at its lowest actuation; with "
          "--guard-power-limit, the GPUs' lowest power limit is taken)");
    }
    // A policy acts on its trained budgets only: its floor is at least their low end.
    floor_per_gpu_w = std::max(floor_per_gpu_w, fleet_lo_w);
    double nameplate_per_gpu_w = 0.0;
    if (args.nameplate_w) {
      nameplate_per_gpu_w = *args.nameplate_w;
    } else if (scenario) {
      nameplate_per_gpu_w = scenario->nameplate_w;
    } else if (limit_range_w) {
      nameplate_per_gpu_w = limit_range_w->second;
    } else {
      return Error::Usage("--fleet needs --nameplate-w (per GPU) without --scenario");
    }
    if (nameplate_per_gpu_w < floor_per_gpu_w) {
      return Error::Usage(fmt::format("--nameplate-w {} W per GPU is below the floor {} W",
                                      nameplate_per_gpu_w, floor_per_gpu_w));
    }
    // In a site the job acts on its floor until the site grants more: a local budget above
    // it would draw watts no ledger holds (after a restart, or while etcd is unreachable).
    if (args.budget_w && *args.budget_w > floor_per_gpu_w + 1e-9) {
      return Error::Usage(fmt::format(
          "--budget-w {} W per GPU is above the job's floor {} W per GPU: with --fleet the site "
          "grants the budget and the job acts on its floor until then (drop --budget-w, or set "
          "it at most the floor)",
          *args.budget_w, floor_per_gpu_w));
    }
    // Standby: the GPUs idle with the model loaded, what the job draws while the site holds it.
    double standby_per_gpu_w = 0.0;
    if (args.standby_w) {
      standby_per_gpu_w = *args.standby_w;
    } else if (twin != nullptr) {
      standby_per_gpu_w = scenario->idle_loaded_w;
    } else if (auto sample = source->Read(0.0); sample && !sample->gpus.empty()) {
      // Measured at start: the GPUs' power now. A trainer already running makes this high,
      // which errs on the safe side (capped at the floor).
      double sum_w = 0.0;
      bool all = true;
      for (const auto& g : sample->gpus) {
        if (!g.power_w || !std::isfinite(*g.power_w)) all = false;
        if (all) sum_w += *g.power_w;
      }
      standby_per_gpu_w = all ? sum_w / static_cast<double>(sample->gpus.size()) : floor_per_gpu_w;
      log(fmt::format("fleet: standby {:.1f} W per GPU, measured at start (--standby-w sets one)",
                      std::min(standby_per_gpu_w, floor_per_gpu_w)));
    } else {
      standby_per_gpu_w = floor_per_gpu_w;
      log.Warn("fleet: standby unknown (telemetry unread at start): counted at the floor");
    }
    standby_per_gpu_w = std::min(standby_per_gpu_w, floor_per_gpu_w);
    coord::MemberConfig mc;
    mc.site = args.site;
    mc.standby_w = standby_per_gpu_w * gpus + overhead_w;
    mc.fail_open = args.fleet_fail_open;
    if (mc.fail_open) {
      log.Warn(
          "fleet: --fleet-fail-open: not admitted or etcd unreachable, the job runs on its local "
          "budget outside the site's count (unsafe for the site budget)");
    }
    mc.job = args.job;
    mc.gpus = gpus;
    mc.node_overhead_w = overhead_w;
    mc.nameplate_w = nameplate_per_gpu_w * gpus + overhead_w;
    mc.floor_w = floor_per_gpu_w * gpus + overhead_w;
    // With no grant: the floor, or --budget-w when lower.
    mc.local_budget_w = args.budget_w ? *args.budget_w * gpus + overhead_w : mc.floor_w;
    mc.lease_ttl_s = args.lease_ttl_s;
    mc.fence_margin_s = fence_margin_s;
    mc.grant_read_s = kGrantReadWithWatchS;  // the grant's watch carries it; a read each second
    // A restart on this machine takes the place of this job's agent that is gone.
    mc.holder = ThisProcessIdentity();
    mc.holder_gone = [](std::string_view holder) { return IdentityGoneHere(holder); };
    member_config = mc;
  }
  // Outputs: regular files or new paths, or /dev/null and /dev/stdout written in place; a
  // directory, device or FIFO is refused before anything starts (common/paths.h).
  for (const auto& [flag, path] :
       {std::pair{"--trace-out", args.trace_out}, std::pair{"--fleet-log", args.fleet_log}}) {
    if (path.empty()) continue;
    if (auto kind = CheckOutputPath(path); !kind) {
      return Error::Io(fmt::format("{} {}", flag, kind.error().message()));
    }
  }
  std::optional<FleetLog> fleet_log_file;
  if (!args.fleet_log.empty()) {
    std::FILE* f = std::fopen(args.fleet_log.c_str(), "a");
    if (f == nullptr) {
      return Error::Io(
          fmt::format("--fleet-log {}: cannot open: {}", args.fleet_log, std::strerror(errno)));
    }
    fleet_log_file.emplace(f, args.fleet_log, log);
  }
  FleetLog* const fleet_log = fleet_log_file ? &*fleet_log_file : nullptr;

  // From here on, signals stop the loop; the server's thread inherits their mask.
  StopSignal signals(log, "power limits first");
  agent::Agent core(config, *controller);
  agent::Shared shared;
  shared.agent = &core;
  // The budget in force: the flag's (or its default) until a client posts one.
  agent::PostedBudget budget(config.budget_w, config.budget_from);
  shared.budget = &budget;
  shared.gpus = source->gpus();
  if (policy) shared.budget_range_w = scenario->budget_range_w;
  std::optional<LazyStore> fleet_store;
  std::optional<coord::FleetMember> member;
  std::optional<agent::FleetBudget> fleet_budget;
  if (member_config) {
    shared.budget = nullptr;  // the site sets the budget: POST /v1/budget answers 409
    shared.site = true;
    fleet_store.emplace(
        args.fleet,
        *coord::ReadEtcdCredentials(args.etcd_options.user, args.etcd_options.password_file),
        coord::EtcdTls{args.etcd_options.cacert, args.etcd_options.cert, args.etcd_options.key});
    member.emplace(*fleet_store, *member_config, SteadyNowS, log);
    shared.fleet = [&member, site = args.site, job = args.job] {
      const coord::MemberStatus st = member->status();
      agent::FleetHealth h;
      h.site = site;
      h.job = job;
      h.state = std::string(coord::StateName(st.acting));
      h.job_budget_w = st.acting_job_budget_w;
      h.lease = static_cast<uint64_t>(st.lease);
      h.term = st.acting_term > 0 ? st.acting_term : st.max_term;
      h.fenced = st.acting == coord::Acting::State::kFenced;
      h.fences = st.fences;
      h.leases_lost = st.leases_lost;
      h.grants_watched = st.grants_watched;
      return h;
    };
    // Every change of what the job acts on, for an auditor: steady-clock times (the machine's
    // CLOCK_MONOTONIC), one JSON object per line, flushed at once.
    const std::string job = args.job;
    fleet_budget.emplace(
        *member, source->gpus(), [&overhead] { return overhead->CurrentW(SteadyNowS()); },
        fleet_lo_w, fleet_hi_w,
        [fleet_log, job](const coord::Acting& a, double per_gpu_w) {
          if (fleet_log == nullptr) return;
          fleet_log->Line(
              fmt::format("{{\"t_mono_s\":{:.6f},\"pid\":{},\"job\":\"{}\",\"state\":\"{}\","
                          "\"job_budget_w\":{:.6f},\"budget_per_gpu_w\":{:.6f},\"term\":{},"
                          "\"seq\":{},\"lease\":{},\"valid_until_mono_s\":{}}}\n",
                          SteadyNowS(), getpid(), job, coord::StateName(a.state), a.job_budget_w,
                          per_gpu_w, a.term, a.seq, a.lease,
                          std::isfinite(a.valid_until_s) ? fmt::format("{:.6f}", a.valid_until_s)
                                                         : std::string("null")));
        });
  }
  const auto start = std::chrono::steady_clock::now();
  const double speed = args.speed;
  // Agent time: wall time x speed; with speed 0 the loop runs as fast as it can and the API
  // sees the agent's own clock.
  std::atomic<double> agent_now{0.0};
  shared.now_s = [&] { return agent_now.load(); };
  agent::Clock clock;
  clock.sleep_until = [&](double t_s) {
    agent_now.store(t_s);
    if (speed <= 0.0) return;
    signals.SleepUntil(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(t_s / speed)));
  };
  agent::ApiConfig api;
  api.access = serving->access;
  api.access.token_on_reads = args.token_on_reads;
  net::ServerLimits limits;
  limits.max_connections = serving->max_connections;
  limits.max_connections_per_address = serving->max_connections_per_address;
  agent::ApiServer server(shared, api, limits);
  if (auto st = server.Start(listen.host, listen.port); !st) return st;

  // Bound: only now may the trace be touched. An earlier one is kept under a new name.
  std::optional<agent::Recorder> recorder;
  if (!args.trace_out.empty()) {
    auto kept = agent::RotateTrace(args.trace_out);
    if (!kept) return std::move(kept).error();
    if (!kept->empty()) log(fmt::format("the earlier trace {} is now {}", args.trace_out, *kept));
    trace::TraceMeta meta;
    meta.sample_interval_s = args.interval_s;
    meta.job = fmt::format("headroom agent: {} source, {} controller, {}, budget {} W",
                           source->name(), controller->name(),
                           scenario ? "scenario " + scenario->name : std::string("no scenario"),
                           config.budget_w);
    if (twin != nullptr) {
      meta.gpu_model = scenario->gpu_model;
      meta.nameplate_w = scenario->nameplate_w;
    }
    auto r = agent::Recorder::Open(args.trace_out, meta);
    if (!r) return std::move(r).error();
    recorder.emplace(std::move(*r));
  }

  log.Info(fmt::format("version {} (commit {}), {} source, {} controller, budget {:.1f} W per GPU, "
                       "listening on {}:{} (dashboard: http://{}:{}/)",
                       Version(), Commit(), source->name(), controller->name(), config.budget_w,
                       listen.host, server.port(), listen.host, server.port()),
           {{"version", Version()},
            {"commit", Commit()},
            {"source", source->name()},
            {"controller", controller->name()},
            {"budget_per_gpu_w", config.budget_w},
            {"listen", fmt::format("{}:{}", listen.host, server.port())}});
  agent::RunnerOptions options;
  options.interval_s = args.interval_s;
  options.duration_s = args.duration_s;
  options.monotonic_s = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  options.unix_s = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  options.budget = &budget;
  if (fleet_budget) options.budget = &*fleet_budget;
  double last_energy_j = 0.0;
  bool limit_unwritten_said = false;
  options.power_limit = [&](double limit_w) {
    if (guard) {
      guard->Follow(limit_w, log);
    } else if (twin != nullptr) {
      twin->SetPowerLimit(limit_w);  // the twin's GPUs, as a hardware limit
    } else if (limit_w > 0.0 && !limit_unwritten_said) {
      log.Warn(
          fmt::format("{} asks for a power limit of {:.0f} W per GPU; not written: "
                      "--guard-power-limit lets the agent write the GPUs' limits",
                      args.controller, limit_w));
      limit_unwritten_said = true;
    }
  };
  uint64_t fleet_log_errors_noted = 0;  // the runner's thread only
  options.observe = [&](const telemetry::Sample& s, double budget_w) {
    if (guard) {
      guard->SetBudget(budget_w, log);
      guard->Observe(s, log);
    }
    if (member) {
      double power_w = overhead->CurrentW(SteadyNowS());
      for (const auto& g : s.gpus) power_w += g.power_w.value_or(0.0);
      std::string phase = "rollout";
      double tokens_per_s = 0.0;
      {
        MutexLock lock(shared.mu);
        if (const auto& report = core.report()) phase = control::PhaseName(report->phase);
        tokens_per_s = core.tokens_per_s();
      }
      member->Observe(s.t_s, power_w, phase, tokens_per_s);
      if (fleet_log != nullptr && twin != nullptr) {
        // The twin's true power over the interval that just ended, for an auditor's site sum.
        const double energy_j = twin->twin().energy_j();
        const double mean_w = (energy_j - last_energy_j) / args.interval_s;
        last_energy_j = energy_j;
        fleet_log->Line(
            fmt::format("{{\"t_mono_s\":{:.6f},\"pid\":{},\"job\":\"{}\",\"power_w\":{:.3f},"
                        "\"phase\":\"{}\"}}\n",
                        SteadyNowS(), getpid(), args.job, mean_w, phase));
      }
    }
    if (fleet_log != nullptr) {
      // Its failed writes, where /metrics reads them.
      const uint64_t errors = fleet_log->errors();
      MutexLock lock(shared.mu);
      for (; fleet_log_errors_noted < errors; ++fleet_log_errors_noted) core.NoteTraceWriteError();
    }
  };
  // The fleet thread: the member's store work, four times a second. The grant's watch: a
  // stream that brings each grant as the coordinator writes it (docs/FLEET.md, "Members watch
  // their grant"), and after a failure another one a quarter of a second later.
  std::thread fleet_thread;
  std::thread watch_thread;
  std::mutex fleet_mu;
  std::condition_variable fleet_cv;
  bool fleet_done = false;  // under fleet_mu
  if (member) {
    fleet_thread = std::thread([&] {
      auto next = std::chrono::steady_clock::now();
      for (;;) {
        member->Step();
        next += std::chrono::milliseconds(250);
        std::unique_lock lock(fleet_mu);
        // A signal wakes the runner, which ends and sets fleet_done.
        if (fleet_cv.wait_until(lock, next, [&] { return fleet_done; })) return;
      }
    });
    watch_thread = std::thread([&] {
      for (;;) {
        const Status followed = member->WatchGrant(kGrantQuietS);
        std::unique_lock lock(fleet_mu);
        if (fleet_done) return;
        if (!followed &&
            fleet_cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return fleet_done; })) {
          return;
        }
      }
    });
  }
  const agent::RunSummary summary = agent::Run(
      *source, twin, shared, recorder ? &*recorder : nullptr, options, clock, signals.stop(), log);
  // Shutdown order: the power limits first (nothing else may delay them), then the server,
  // which closes every connection at once whatever its clients do.
  Status restored = OkStatus();
  if (guard) restored = guard->Restore(log);
  server.Stop();
  if (fleet_thread.joinable()) {
    {
      std::lock_guard lock(fleet_mu);
      fleet_done = true;
    }
    fleet_cv.notify_all();
    member->StopWatching();
    watch_thread.join();
    fleet_thread.join();
    member->Leave();  // the lease at once: the ledger keeps the floor until it forgets the job
  }
  log.Info(fmt::format("stopped after {:.1f} s, {} intervals, {} telemetry errors",
                       summary.duration_s, summary.intervals, summary.telemetry_errors),
           {{"duration_s", summary.duration_s},
            {"intervals", summary.intervals},
            {"telemetry_errors", summary.telemetry_errors}});
  if (!restored) return restored;
  if (summary.trace_write_errors > 0) {
    // The run went on; its trace did not: say so in the exit status.
    return Error::Io(
        fmt::format("--trace-out {}: {} write(s) failed, the first: {}; the trace is "
                    "incomplete",
                    args.trace_out, summary.trace_write_errors, recorder->first_error()));
  }
  if (!args.trace_out.empty()) fmt::print("trace      {}\n", args.trace_out);
  return restored;
}

}  // namespace

Command SetupAgent(CLI::App& app) {
  auto a = std::make_shared<AgentArgs>();
  auto config = std::make_shared<std::string>();
  app.add_option("--config", *config, "TOML file of these options (keys: the option names)");
  app.add_option("--source", a->source, "Telemetry: nvml, replay or twin (required)");
  app.add_option("--log-format", a->log_format,
                 "Log lines: text (RFC 3339 time, level, message) or json (one object a line)");
  app.add_option("--scenario", a->scenario,
                 "Scenario: ranges, defaults and budget, and what the twin runs (needed with "
                 "--source twin, default a100-7b-tp1, and with --controller ppo)");
  app.add_option("--seed", a->seed, "Twin seed")->check(Integer(0, kMaxSeed));
  app.add_option("--replay", a->replay, "Trace to replay (--source replay)");
  app.add_option("--nvml-library", a->nvml_library, "NVML library to load");
  app.add_option("--gpus", a->gpus, "The job's GPUs, NVML indices (default: every GPU)")
      ->delimiter(',')
      ->check(Integer(0, 1023));
  app.add_option("--speed", a->speed, "Agent seconds per wall second (0: as fast as possible)")
      ->check(Real(0.0, 1e6));
  app.add_option("--interval-s", a->interval_s, "Control interval")->check(Real(0.01, 60.0));
  app.add_option("--budget-w", a->budget_w, "Budget per GPU (default: the scenario's)")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option("--floor-w", a->floor_w,
                 "The job's power per GPU at its lowest actuation, when known: a budget below "
                 "it is taken and the decision's reason says it cannot be met")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option("--controller", a->controller, "uncontrolled, pid or ppo");
  app.add_option("--policy", a->policy, "Policy JSON for ppo");
  app.add_option("--concurrency-range", a->concurrency_range, "LOW HIGH")
      ->expected(2)
      ->check(Integer(1, kMaxConcurrency));
  app.add_option("--group-size-range", a->group_size_range, "LOW HIGH")
      ->expected(2)
      ->check(Integer(1, kMaxGroupSize));
  app.add_option("--safe-concurrency", a->safe_concurrency, "Safe concurrency (default: lowest)")
      ->check(Integer(1, kMaxConcurrency));
  app.add_option("--safe-group-size", a->safe_group_size,
                 "Safe group size (default: the scenario's)")
      ->check(Integer(1, kMaxGroupSize));
  app.add_option("--initial-concurrency", a->initial_concurrency,
                 "Concurrency announced before the first decision (default: the safe one)")
      ->check(Integer(1, kMaxConcurrency));
  app.add_option("--initial-group-size", a->initial_group_size,
                 "Group size announced before the first decision (default: the safe one)")
      ->check(Integer(1, kMaxGroupSize));
  app.add_flag("--twin-follows-trainer", a->twin_follows_trainer,
               "With --source twin: rehearse a real trainer without GPUs. The twin's phases and "
               "steps follow the trainer's POST /v1/report; its power is simulated for them at "
               "the decided concurrency and power limit (docs/TRAINERS.md)");
  app.add_option("--group-size-choices", a->group_size_choices,
                 "The group sizes the agent may choose, e.g. 4,8,16 (default: any in the range); "
                 "one fixes it: then only concurrency and the power limit move");
  app.add_option("--group-size-min-steps", a->group_size_min_steps,
                 "Change group size at most once every K trainer steps, and only at a step "
                 "boundary (docs/TRAINERS.md); 0: at any decision, as eval does")
      ->check(Integer(0, 100000));
  app.add_option("--valid-for-s", a->valid_for_s, "How long a client may trust a decision")
      ->check(Real(0.1, 3600.0));
  AddServerOptions(app, &a->server, "agent");
  app.add_flag("--token-on-reads", a->token_on_reads,
               "Require the token on reads too (the dashboard takes it as #token=T)");
  app.add_option("--trace-out", a->trace_out, "The agent's own trace (long CSV)");
  app.add_flag("--guard-power-limit", a->guard_power_limit,
               "Set the NVML power limit to the budget when power stays over it; restored on exit");
  app.add_option("--guard-state", a->guard_state,
                 "The guard's state file: the original limits, kept while any is changed "
                 "(default: $STATE_DIRECTORY or /var/lib/headroom, guard-state.json)");
  app.add_flag("--restore-limits", a->restore_limits,
               "Only restore the power limits a killed agent left in --guard-state, and exit "
               "(systemd's ExecStopPost)");
  app.add_option("--fleet", a->fleet,
                 "Join a site: its etcd, etcd://HOST:PORT[,HOST:PORT...] (etcds:// with TLS; "
                 "docs/FLEET.md)");
  AddEtcdOptions(app, &a->etcd_options);
  app.add_option("--site", a->site, "The site's name (with --fleet)");
  app.add_option("--job", a->job, "This job's name at the site, unique there (with --fleet)");
  app.add_option("--lease-ttl-s", a->lease_ttl_s, "The membership lease's TTL (with --fleet)")
      ->check(Integer(2, 60));
  app.add_option("--node-overhead-w", a->node_overhead_w,
                 "The node's other power counted in the job's demand (default: the CPU "
                 "packages' power from powercap where readable, else 0)")
      ->check(Real(0.0, 1e6));
  app.add_option("--nameplate-w", a->nameplate_w,
                 "Nameplate per GPU (default: the scenario's), with --fleet")
      ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
  app.add_option("--standby-w", a->standby_w,
                 "Per GPU, the job's GPUs idle with the model loaded: what it draws while the "
                 "site holds it (default: the scenario's, else measured at start), with --fleet")
      ->check(Real(0.0, kMaxGpuPowerW));
  app.add_flag("--fleet-fail-open", a->fleet_fail_open,
               "Not admitted, or etcd unreachable at start: run on the local budget instead of "
               "holding at standby (UNSAFE: such a job draws outside the site budget)");
  app.add_option("--fleet-log", a->fleet_log,
                 "Append every change of the budget acted on, one JSON object per line (an "
                 "auditor's input)");
  app.add_option("--duration-s", a->duration_s, "Stop after this much agent time")
      ->check(Real(0.0, 1e9));
  return [a, config, &app]() -> Status {
    if (!config->empty()) {
      if (auto st = ApplyConfigFile(app, *config, "agent"); !st) return st;
    }
    return RunAgent(*a);
  };
}

}  // namespace headroom::cli
