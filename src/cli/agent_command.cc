// `headroom agent`: live control beside a training job (docs/AGENT.md). Thin: options, the
// telemetry source, the controller, the clock and signals; the loop is agent/runner.h.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/guard.h"
#include "agent/recorder.h"
#include "agent/runner.h"
#include "agent/server.h"
#include "cli/commands.h"
#include "control/baselines.h"
#include "control/policy.h"
#include "sim/episode.h"
#include "telemetry/nvml_source.h"
#include "telemetry/replay_source.h"
#include "telemetry/twin_source.h"
#include "twin/scenario.h"

#include <toml++/toml.h>

namespace headroom::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void OnSignal(int) { g_stop.store(true); }

struct AgentArgs {
  std::string source = "twin";
  std::string scenario = "a100-7b-tp1";
  uint64_t seed = 1;
  std::string replay;
  std::string nvml_library = telemetry::kNvmlLibrary;
  std::vector<int> gpus;
  double speed = 1.0;
  double interval_s = 0.5;
  std::optional<double> budget_w;
  std::string controller = "pid";
  std::string policy;
  std::vector<int> concurrency_range;
  std::vector<int> group_size_range;
  std::optional<int> safe_concurrency;
  std::optional<int> safe_group_size;
  std::optional<int> initial_concurrency;
  std::optional<int> initial_group_size;
  double valid_for_s = 5.0;
  std::string listen = "127.0.0.1:9400";
  std::string token;
  std::string trace_out;
  std::optional<double> duration_s;
  bool guard_power_limit = false;
};

Result<control::Policy> ReadPolicy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Io(fmt::format("{}: cannot open", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return control::PolicyFromJson(ss.str(), path);
}

Status RunAgent(const AgentArgs& args) {
  // The scenario gives ranges, defaults and the budget for every source (the twin runs it).
  auto scenario = twin::LoadScenario(args.scenario);
  if (!scenario) return std::move(scenario).error();
  if (!scenario->has_rollout) {
    return Error::Usage(fmt::format("--scenario '{}' has no rollout to steer", scenario->name));
  }
  agent::AgentConfig config;
  config.interval_s = args.interval_s;
  config.budget_w = args.budget_w.value_or(scenario->budget_w);
  config.limits = sim::LimitsOf(*scenario);
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
  config.safe_group_size =
      config.limits.group_size.Clamp(args.safe_group_size.value_or(scenario->group_size));
  if (args.initial_concurrency) {
    config.initial_concurrency = config.limits.concurrency.Clamp(*args.initial_concurrency);
  }
  if (args.initial_group_size) {
    config.initial_group_size = config.limits.group_size.Clamp(*args.initial_group_size);
  }
  config.valid_for_s = args.valid_for_s;
  config.stale_after_s = 3.0 * args.interval_s;
  auto listen = agent::ParseListen(args.listen);
  if (!listen) return std::move(listen).error();

  // The controller.
  std::unique_ptr<control::Controller> inner;
  std::unique_ptr<control::Controller> controller;
  std::optional<control::Policy> policy;
  if (args.controller == "ppo") {
    if (args.policy.empty()) return Error::Usage("--controller ppo needs --policy FILE");
    auto p = ReadPolicy(args.policy);
    if (!p) return std::move(p).error();
    policy = std::move(*p);
    inner = std::make_unique<control::PolicyController>(*policy, config.limits);
    controller = std::make_unique<control::Shield>(
        *inner, control::ShieldFor(policy->cost_window_s, args.interval_s),
        config.limits.concurrency);
  } else if (args.controller == "pid") {
    controller = std::make_unique<control::Pid>(control::PidGains{}, config.limits.concurrency,
                                                config.safe_concurrency, scenario->group_size);
  } else if (args.controller == "uncontrolled") {
    controller =
        std::make_unique<control::Uncontrolled>(scenario->concurrency, scenario->group_size);
  } else {
    return Error::Usage(
        fmt::format("--controller: unknown '{}' (uncontrolled, pid, ppo)", args.controller));
  }

  // The telemetry source.
  std::unique_ptr<telemetry::Source> source;
  telemetry::TwinSource* twin = nullptr;
  telemetry::NvmlSource* nvml = nullptr;
  if (args.source == "twin") {
    auto t = std::make_unique<telemetry::TwinSource>(*scenario, args.seed);
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
  } else {
    return Error::Usage(fmt::format("--source: unknown '{}' (nvml, replay, twin)", args.source));
  }
  if (!args.gpus.empty() && nvml == nullptr) return Error::Usage("--gpus needs --source nvml");

  std::optional<agent::Recorder> recorder;
  if (!args.trace_out.empty()) {
    trace::TraceMeta meta;
    meta.sample_interval_s = args.interval_s;
    meta.job = fmt::format("headroom agent: {} source, {} controller, scenario {}, budget {} W",
                           source->name(), controller->name(), scenario->name, config.budget_w);
    if (twin != nullptr) {
      meta.gpu_model = scenario->gpu_model;
      meta.nameplate_w = scenario->nameplate_w;
    }
    auto r = agent::Recorder::Open(args.trace_out, meta);
    if (!r) return std::move(r).error();
    recorder.emplace(std::move(*r));
  }

  if (args.guard_power_limit && nvml == nullptr) {
    return Error::Usage("--guard-power-limit needs --source nvml");
  }
  const auto log = [](const std::string& line) {
    fmt::print(stderr, "headroom agent: {}\n", line);
  };
  std::optional<agent::PowerLimitGuard> guard;
  if (args.guard_power_limit) {
    guard.emplace([nvml](int gpu, double w) { return nvml->SetPowerLimitW(gpu, w); },
                  config.budget_w);
  }

  agent::Agent core(config, *controller);
  agent::Shared shared;
  shared.agent = &core;
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
    std::this_thread::sleep_until(start +
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(t_s / speed)));
  };
  agent::Server server(shared, args.token);
  if (auto st = server.Start(listen->first, listen->second); !st) return st;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  fmt::print(stderr,
             "headroom agent: {} source, {} controller, budget {:.1f} W per GPU, "
             "listening on {}:{} (dashboard: http://{}:{}/)\n",
             source->name(), controller->name(), config.budget_w, listen->first, server.port(),
             listen->first, server.port());
  agent::RunnerOptions options;
  options.interval_s = args.interval_s;
  options.duration_s = args.duration_s;
  options.monotonic_s = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  if (guard) options.observe = [&](const telemetry::Sample& s) { guard->Observe(s, log); };
  const agent::RunSummary summary = agent::Run(
      *source, twin, shared, recorder ? &*recorder : nullptr, options, clock, g_stop, log);
  server.Stop();
  Status restored = OkStatus();
  if (guard) restored = guard->Restore(log);
  fmt::print(stderr, "headroom agent: stopped after {:.1f} s, {} intervals, {} telemetry errors\n",
             summary.duration_s, summary.intervals, summary.telemetry_errors);
  if (!args.trace_out.empty()) fmt::print("trace      {}\n", args.trace_out);
  return restored;
}

// Every key of the TOML file is an option name; the command line wins over the file. Values go
// through the option's own parsing and checks.
Status ApplyConfig(CLI::App& app, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Error::Input(fmt::format("{}:{}:{}: {}", path, e.source().begin.line,
                                    e.source().begin.column, e.description()));
  }
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    const auto line = node.source().begin.line;
    CLI::Option* opt = nullptr;
    try {
      opt = app.get_option("--" + name);
    } catch (const CLI::Error&) {
      opt = nullptr;
    }
    if (opt == nullptr || name == "config") {
      return Error::Usage(
          fmt::format("{}:{}: key '{}': not an option of headroom agent", path, line, name));
    }
    if (opt->count() > 0) continue;  // given on the command line
    std::vector<std::string> values;
    auto text = [](const toml::node& n) -> std::optional<std::string> {
      if (auto v = n.value<std::string>()) return *v;
      if (auto v = n.value<int64_t>()) return std::to_string(*v);
      if (auto v = n.value<double>()) return fmt::format("{}", *v);
      if (auto v = n.value<bool>()) return *v ? "true" : "false";
      return std::nullopt;
    };
    if (const auto* arr = node.as_array()) {
      for (const auto& item : *arr) {
        auto t = text(item);
        if (!t)
          return Error::Usage(
              fmt::format("{}:{}: key '{}': expected plain values", path, line, name));
        values.push_back(*t);
      }
    } else if (auto t = text(node)) {
      values.push_back(*t);
    } else {
      return Error::Usage(fmt::format("{}:{}: key '{}': expected a value", path, line, name));
    }
    try {
      for (const auto& v : values) opt->add_result(v);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return Error::Usage(fmt::format("{}:{}: key '{}': {}", path, line, name, e.what()));
    }
  }
  return OkStatus();
}

}  // namespace

Command SetupAgent(CLI::App& app) {
  auto a = std::make_shared<AgentArgs>();
  auto config = std::make_shared<std::string>();
  app.add_option("--config", *config, "TOML file of these options (keys: the option names)");
  app.add_option("--source", a->source, "Telemetry: nvml, replay or twin");
  app.add_option("--scenario", a->scenario,
                 "Scenario: ranges, defaults and budget (and what the twin runs)");
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
  app.add_option("--valid-for-s", a->valid_for_s, "How long a client may trust a decision")
      ->check(Real(0.1, 3600.0));
  app.add_option("--listen", a->listen, "HOST:PORT of the API (port 0: any free port)");
  app.add_option("--token", a->token, "Bearer token required on POST");
  app.add_option("--trace-out", a->trace_out, "The agent's own trace (long CSV)");
  app.add_flag("--guard-power-limit", a->guard_power_limit,
               "Set the NVML power limit to the budget when power stays over it; restored on exit");
  app.add_option("--duration-s", a->duration_s, "Stop after this much agent time")
      ->check(Real(0.0, 1e9));
  return [a, config, &app]() -> Status {
    if (!config->empty()) {
      if (auto st = ApplyConfig(app, *config); !st) return st;
    }
    return RunAgent(*a);
  };
}

}  // namespace headroom::cli
