// headroom_fleet_scale: one site at scale (docs/PERFORMANCE.md, "A site at scale"). One real
// `headroom coordinator` process and N light simulated agents on one etcd of its own:
//
//   headroom_fleet_scale --headroom build/bin/headroom --agents 1000 --duration-s 60 [--json F]
//
// Reads top to bottom: options -> the site's agents (deterministic floors and nameplates) ->
// etcd (tests/support/etcd_cluster.h: a single member in a temporary directory, killed at the end
// pass or fail) and a pass-through proxy in front of it for the coordinator -> the agents
// (coord::SiteMember over 32 etcd::EtcdStore connections, one thread each, every member doing
// what an agent does every 0.25 s: Step, Current, Observe; and, as each agent has, a thread per
// member watching its grant on a stream of its own, unless --poll), all registered -> the
// coordinator (a child process on the proxy, killed by PID at the end) -> a steady phase with a
// site budget change, alternately lower and higher, every 10 s -> what it measured:
//   (a) whether the coordinator holds its period: its reads of the whole site (one a period) as
//       the proxy saw them, how far apart and how long each took; the ledger's writes (watched)
//       and the time between consecutive ones;
//   (b) grant round trip: from each POST /v1/site-budget to each member's first Current() on a
//       grant with a new sequence (at its watch's event, or its next step with --poll), and to
//       the full reallocation (every member acting on the ledger's latest sequence for it);
//   (c) etcd's requests and transactions per second, from its /metrics;
//   (d) the coordinator's, etcd's and this process's CPU, the coordinator's and etcd's memory;
//   and the invariant, checked independently of the coordinator: the sum over members of what
//   Current() returned <= the site budget in force - reserve, at every change of any member.
// The measuring is in bench/fleet_scale/measure.h, the report (the table; --json) in report.h.
// Exit status: 0, 1 when the invariant was broken, 2 when the site could not be set up.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/thread_annotations.h"
#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord/store.h"
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"
#include "tests/support/etcd_cluster.h"

#include "bench/fleet_scale/agents.h"
#include "bench/fleet_scale/coordinator_process.h"
#include "bench/fleet_scale/etcd_proxy.h"
#include "bench/fleet_scale/http.h"
#include "bench/fleet_scale/ledger_watcher.h"
#include "bench/fleet_scale/measure.h"
#include "bench/fleet_scale/options.h"
#include "bench/fleet_scale/probe.h"
#include "bench/fleet_scale/report.h"
#include "bench/fleet_scale/system.h"

namespace headroom::bench {
namespace {

using coord::Acting;
using json = nlohmann::ordered_json;

// ---- The site's agents ----

// Deterministic floors and nameplates (agents.h); fills the site's budgets in `site`.
std::vector<SimAgent> MakeAgents(const Options& o, SiteSetUp* site) {
  std::vector<SimAgent> agents(static_cast<size_t>(o.agents));
  double floors_w = 0, demands_w = 0;
  for (int i = 0; i < o.agents; ++i) {
    SimAgent& a = agents[static_cast<size_t>(i)];
    a.config = AgentConfig(o, i);
    a.phase_rad = 6.283185307179586 * Uniform(o.seed, static_cast<uint64_t>(i), 2);
    floors_w += a.config.floor_w;
    demands_w += a.config.nameplate_w;
  }
  site->floors_w = floors_w;
  site->demands_w = demands_w;
  site->high_w = std::round(floors_w + o.high_fraction * (demands_w - floors_w));
  site->low_w = std::round(floors_w + o.low_fraction * (demands_w - floors_w));
  fmt::print(stderr,
             "fleet_scale: {} agents on {} connections, floors {:.0f} W, demand {:.0f} W, site "
             "budget {:.0f} W / {:.0f} W every {} s, phase {} s\n",
             o.agents, o.stores, floors_w, demands_w, site->high_w, site->low_w, o.change_every_s,
             o.duration_s);
  return agents;
}

// ---- etcd, and the proxy in front of it for the coordinator ----

// Destroyed, it stops the proxy, then kills etcd and removes its directory.
struct SiteEtcd {
  std::optional<etcd_test::EtcdCluster> cluster;
  std::string url;
  int port = 0;
  pid_t pid = 0;  // etcd's process
  std::unique_ptr<EtcdProxy> proxy;
};

// nullopt after saying why.
std::optional<SiteEtcd> StartEtcd() {
  std::string why;
  SiteEtcd etcd;
  etcd.cluster = etcd_test::EtcdCluster::Start(1, &why);
  if (!etcd.cluster) {
    fmt::print(stderr, "fleet_scale: cannot start etcd: {}\n", why);
    return std::nullopt;
  }
  etcd.url = etcd.cluster->endpoint(0);
  etcd.port = PortOf(etcd.url);
  etcd.pid = etcd.cluster->pid(0);
  signal(SIGPIPE, SIG_IGN);  // httplib 0.11 writes without MSG_NOSIGNAL (etcd is started)
  etcd.proxy = EtcdProxy::Start(etcd.port, &why);
  if (!etcd.proxy) {
    fmt::print(stderr, "fleet_scale: {}\n", why);
    return std::nullopt;
  }
  return etcd;
}

// ---- The coordinator's command line (started once every agent is registered) ----

struct CoordinatorCommand {
  std::string log_dir;  // removed at the end unless the invariant was broken
  std::string log_path;
  std::vector<std::string> args;
};

// nullopt after saying why.
std::optional<CoordinatorCommand> CoordinatorCommandFor(const Options& o, int proxy_port,
                                                        double site_budget_w) {
  char log_dir[] = "/tmp/headroom-fleet-scale-XXXXXX";
  if (mkdtemp(log_dir) == nullptr) {
    fmt::print(stderr, "fleet_scale: mkdtemp: {}\n", std::strerror(errno));
    return std::nullopt;
  }
  CoordinatorCommand c;
  c.log_dir = log_dir;
  c.log_path = c.log_dir + "/coordinator.log";
  c.args = {o.headroom,        "coordinator",
            "--etcd",          fmt::format("http://127.0.0.1:{}", proxy_port),
            "--site",          kSite,
            "--site-budget-w", fmt::format("{:.0f}", site_budget_w),
            "--period-s",      fmt::format("{}", kPeriodS),
            "--lease-ttl-s",   std::to_string(kLeaseTtlS),
            "--listen",        "127.0.0.1:0"};
  return c;
}

// ---- The agents, started and registered ----

// The agents' side, running: a worker thread per etcd connection stepping its share of the
// members and, with Options::watch, a watch thread per member. Not movable (the threads hold
// it); Stop() ends every thread.
struct Fleet {
  explicit Fleet(std::vector<SimAgent>& all) : agents(all) {}

  std::vector<SimAgent>& agents;
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<Worker>> workers;
  double first_tick_s = 0;  // the first connection's first step

  int registered() const {
    int n = 0;
    for (const auto& w : workers) n += w->registered.load();
    return n;
  }
  int granted() const {
    int n = 0;
    for (const auto& w : workers) n += w->granted.load();
    return n;
  }
  uint64_t follows() const {
    uint64_t n = 0;
    for (const auto& w : workers) n += w->store->follows();
    return n;
  }
  uint64_t grants_watched() const {
    uint64_t n = 0;
    for (const SimAgent& a : agents) n += a.member->status().grants_watched;
    return n;
  }
  void Stop() {
    stop.store(true);
    for (auto& w : workers) {
      if (w->thread.joinable()) w->thread.join();
      if (w->store) w->store->CancelFollows();
    }
    for (SimAgent& a : agents) {
      if (a.watch.joinable()) a.watch.join();
    }
  }
};

// Opens Options::stores connections, puts each agent's member on one (in turn), and starts the
// threads. False after saying why (before any thread is started).
bool StartAgents(const Options& o, const std::string& etcd_url, Fleet& fleet) {
  for (int k = 0; k < o.stores; ++k) {
    auto w = std::make_unique<Worker>();
    auto s = etcd::EtcdStore::Open(etcd_url, o.etcd_timeout_s);
    if (!s) {
      fmt::print(stderr, "fleet_scale: cannot open etcd: {}\n", s.error().message());
      return false;
    }
    w->etcd = std::move(*s);
    w->store = std::make_unique<RecordingStore>(*w->etcd);
    fleet.workers.push_back(std::move(w));
  }
  std::vector<SimAgent>& agents = fleet.agents;
  const auto quiet = [](const std::string&) {};
  for (size_t i = 0; i < agents.size(); ++i) {
    Worker& w = *fleet.workers[i % fleet.workers.size()];
    w.agents.push_back(i);
    agents[i].member = std::make_unique<coord::SiteMember>(*w.store, agents[i].config, NowS, quiet);
  }
  if (o.watch) {
    // A thread per member, as each agent has: its watch stream on its own connection.
    for (SimAgent& a : agents) {
      a.watch = std::thread([&a, &stop = fleet.stop] {
        while (!stop.load(std::memory_order_relaxed)) {
          const Status followed =
              a.member->WatchGrant(kGrantQuietS, [&a] { RecordAct(a, a.member->Current()); });
          if (!followed && !stop.load(std::memory_order_relaxed)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));  // as the agent
          }
        }
      });
    }
  }
  fleet.first_tick_s = NowS();
  for (size_t k = 0; k < fleet.workers.size(); ++k) {
    // Staggered: the connections' rounds spread over the step.
    const double tick_s = fleet.first_tick_s + o.step_s * static_cast<double>(k) /
                                                   static_cast<double>(fleet.workers.size());
    Worker* w = fleet.workers[k].get();
    w->thread = std::thread([w, &agents = fleet.agents, tick_s, step_s = o.step_s,
                             &stop = fleet.stop] { RunWorker(*w, agents, tick_s, step_s, stop); });
  }
  return true;
}

// Every agent registered before the coordinator starts: its first period then admits them all.
// (Started the other way round, agents that register after a period has granted the whole site
// wait for watts no plan ever frees: coord::Plan lowers no grant to make room for a waiting
// newcomer. Reported with the measurements, docs/PERFORMANCE.md.)
// What failed, if anything.
std::optional<std::string> WaitRegistered(const Options& o, const Fleet& fleet) {
  const double register_deadline_s = NowS() + o.admit_timeout_s;
  while (fleet.registered() < o.agents) {
    if (NowS() > register_deadline_s) {
      return fmt::format("{} of {} agents registered after {} s", fleet.registered(), o.agents,
                         o.admit_timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

// ---- The coordinator ----

// Starts it, waits until it leads and every agent is granted; what failed, if anything.
// `*coordinator` is set once it has started (Run's message then shows its log's end).
std::optional<std::string> StartCoordinator(const Options& o, const Fleet& fleet,
                                            const CoordinatorCommand& command,
                                            std::unique_ptr<CoordinatorProcess>* coordinator) {
  std::string why;
  *coordinator = CoordinatorProcess::Start(command.args, command.log_path, &why);
  CoordinatorProcess* c = coordinator->get();
  if (c == nullptr) return fmt::format("cannot start {}: {}", o.headroom, why);
  const double start_deadline_s = NowS() + kStartWaitS;
  while (c->port() == 0 && c->running() && NowS() < start_deadline_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (c->port() == 0) return "no 'listening on' line from the coordinator";
  const int api_port = c->port();
  for (;;) {
    const std::optional<std::string> s = HttpGet(api_port, "/v1/status");
    if (s && json::parse(*s, nullptr, false).value("role", "") == "leader") break;
    if (NowS() > start_deadline_s || !c->running()) return "the coordinator did not lead";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double admit_deadline_s = NowS() + o.admit_timeout_s;
  while (fleet.granted() < o.agents) {
    if (NowS() > admit_deadline_s || !c->running()) {
      return fmt::format("{} of {} agents granted after {} s", fleet.granted(), o.agents,
                         o.admit_timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

// ---- The steady phase ----

// Until the phase's end: a site budget change every Options::change_every_s, alternately lower
// and higher, and the bench's own read of the site every Options::probe_every_s.
void ChangeBudgetsAndProbe(const Options& o, const SiteSetUp& site, int api_port, int etcd_port,
                           RecordingStore& probe_store, const coord::Keys& keys, SteadyPhase* p) {
  // Each change at a different point of the coordinator's period (deterministic jitter).
  int change = 0;
  const auto change_at = [&](int k) {
    return p->phase_begin_s + o.change_every_s / 2 + k * o.change_every_s +
           kPeriodS * Uniform(o.seed, 1000003, static_cast<uint64_t>(k));
  };
  double next_change_s = change_at(change);
  double next_probe_s = p->phase_begin_s + o.probe_every_s / 4;
  bool lower = true;
  auto api = Client(api_port, 5.0);
  while (true) {
    const double next_s = std::min(next_change_s, next_probe_s);
    if (next_s >= p->phase_end_s - 0.5) break;
    SleepUntilS(next_s);
    if (next_change_s <= next_probe_s) {
      SiteBudgetChange c;
      c.lower = lower;
      c.site_budget_w = lower ? site.low_w : site.high_w;
      c.t_s = NowS();
      auto r =
          api->Post("/v1/site-budget", fmt::format(R"({{"site_budget_w": {}}})", c.site_budget_w),
                    "application/json");
      c.status = r ? r->status : 0;
      if (c.status != 202) {  // 202: the target is in the store
        fmt::print(stderr, "fleet_scale: POST /v1/site-budget {}: {}\n", c.site_budget_w,
                   r ? r->body : std::string("no answer"));
      }
      p->changes.push_back(c);
      lower = !lower;
      next_change_s = change_at(++change);
    } else {
      if (auto probe = ProbeSite(etcd_port, probe_store, keys)) {
        p->probes.push_back(*probe);
      } else {
        ++p->probe_failures;
      }
      next_probe_s += o.probe_every_s;
    }
  }
}

// The phase, between snapshots of etcd's metrics, the members' watches, CPU and memory.
SteadyPhase RunSteadyPhase(const Options& o, const SiteSetUp& site, const Fleet& fleet,
                           const SiteEtcd& etcd, const CoordinatorProcess& coordinator,
                           RecordingStore& probe_store, const coord::Keys& keys) {
  SteadyPhase p;
  const int api_port = coordinator.port();
  const uint64_t follows_before = fleet.follows();
  const uint64_t grants_watched_before = fleet.grants_watched();
  p.etcd_before = ScrapeEtcd(etcd.port);
  p.status_before_text = HttpGet(api_port, "/v1/status", 10.0);
  p.phase_begin_s = NowS();
  const double coord_cpu_before_s = ProcCpuS(coordinator.pid()).value_or(0.0);
  const double etcd_cpu_before_s = ProcCpuS(etcd.pid).value_or(0.0);
  const double self_cpu_before_s = ProcCpuS(getpid()).value_or(0.0);
  const auto [machine_busy_before_s, machine_total_before_s] = MachineCpuS();
  p.phase_end_s = p.phase_begin_s + o.duration_s;
  ChangeBudgetsAndProbe(o, site, api_port, etcd.port, probe_store, keys, &p);
  SleepUntilS(p.phase_end_s);
  p.phase_s = NowS() - p.phase_begin_s;
  p.etcd_after = ScrapeEtcd(etcd.port);
  p.phase_follows = fleet.follows() - follows_before;
  p.phase_grants_watched = fleet.grants_watched() - grants_watched_before;
  p.coord_cpu_s = ProcCpuS(coordinator.pid()).value_or(0.0) - coord_cpu_before_s;
  p.etcd_cpu_s = ProcCpuS(etcd.pid).value_or(0.0) - etcd_cpu_before_s;
  std::tie(p.etcd_rss_mib, p.etcd_hwm_mib) = ProcMemoryMiB(etcd.pid);
  p.self_cpu_s = ProcCpuS(getpid()).value_or(0.0) - self_cpu_before_s;
  const auto [machine_busy_after_s, machine_total_after_s] = MachineCpuS();
  p.machine_busy_s = machine_busy_after_s - machine_busy_before_s;
  p.machine_total_s = machine_total_after_s - machine_total_before_s;
  std::tie(p.coord_rss_mib, p.coord_hwm_mib) = ProcMemoryMiB(coordinator.pid());
  p.status_text = HttpGet(api_port, "/v1/status", 10.0);
  p.phase_measured_end_s = NowS();
  return p;
}

// Everything stopped (etcd killed, its directory removed), and what the coordinator, the
// ledger's watch and the proxy kept taken into `p`.
void StopSite(Fleet& fleet, LedgerWatcher& watcher, CoordinatorProcess& coordinator, SiteEtcd& etcd,
              SteadyPhase* p) {
  fleet.Stop();
  watcher.Stop();
  p->coordinator_ran = coordinator.running();
  coordinator.Stop();
  p->budget_lines = coordinator.budget_lines();
  p->ledgers = watcher.seen();
  p->proxy_requests = etcd.proxy->requests();
  p->watch_errors = watcher.errors();
  etcd.cluster.reset();  // killed, its directory removed
}

// ---- The run ----

int Run(const Options& o) {
  SiteSetUp site;
  std::vector<SimAgent> agents = MakeAgents(o, &site);
  std::optional<SiteEtcd> etcd = StartEtcd();
  if (!etcd) return 2;
  const std::optional<CoordinatorCommand> command =
      CoordinatorCommandFor(o, etcd->proxy->port(), site.high_w);
  if (!command) return 2;

  // Set-up failures from here on stop the agents' threads and say where the coordinator's log
  // is.
  Fleet fleet(agents);
  std::unique_ptr<CoordinatorProcess> coordinator;
  const auto fail = [&](const std::string& what) {
    fleet.Stop();
    fmt::print(
        stderr, "fleet_scale: {}{}\n{}", what,
        coordinator ? fmt::format("; the coordinator's log ({}) ends:", command->log_path) : "",
        coordinator ? coordinator->tail() : "");
    return 2;
  };

  // The ledger's writes, watched; the bench's own reads of the site; the agents.
  const coord::Keys keys(kSite);
  auto watch_store = etcd::EtcdStore::Open(etcd->url, o.etcd_timeout_s);
  auto probe_etcd = etcd::EtcdStore::Open(etcd->url, 10.0);
  if (!watch_store || !probe_etcd) {
    fmt::print(stderr, "fleet_scale: cannot open etcd for the watch or the probe\n");
    return 2;
  }
  LedgerWatcher watcher(std::move(*watch_store), keys.ledger());
  RecordingStore probe_store(**probe_etcd);
  if (!StartAgents(o, etcd->url, fleet)) return 2;
  if (auto failed = WaitRegistered(o, fleet)) return fail(*failed);
  site.registered_after_s = NowS() - fleet.first_tick_s;

  // The coordinator.
  const double coordinator_start_s = NowS();
  if (auto failed = StartCoordinator(o, fleet, *command, &coordinator)) return fail(*failed);
  site.admitted_after_s = NowS() - coordinator_start_s;
  fmt::print(stderr,
             "fleet_scale: every agent registered {:.1f} s after its first step, and granted "
             "{:.1f} s after the coordinator started\n",
             site.registered_after_s, site.admitted_after_s);
  SleepUntilS(NowS() + o.settle_s);

  // The steady phase, everything stopped, and what it measured.
  SteadyPhase phase = RunSteadyPhase(o, site, fleet, *etcd, *coordinator, probe_store, keys);
  StopSite(fleet, watcher, *coordinator, *etcd, &phase);
  const Measured measured = Measure(phase, agents, fleet.workers);

  // The report.
  const json out = ReportJson(o, site, phase, measured, command->log_path);
  PrintTable(o, phase, measured);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      fmt::print(stderr, "fleet_scale: cannot write {}\n", o.json_path);
      return 2;
    }
  }
  if (measured.InvariantBroken()) {
    fmt::print(stderr, "fleet_scale: the invariant was broken; the coordinator's log: {}\n",
               command->log_path);
    return 1;
  }
  std::error_code ignored;
  std::filesystem::remove_all(command->log_dir, ignored);
  return 0;
}

}  // namespace
}  // namespace headroom::bench

int main(int argc, char** argv) {
  headroom::bench::Options o;
  CLI::App app{"One headroom coordinator and N simulated agents on one etcd (docs/PERFORMANCE.md)"};
  app.add_option("--headroom", o.headroom, "The headroom binary");
  app.add_option("--agents", o.agents, "Simulated agents")->check(CLI::Range(1, 100000));
  app.add_option("--stores", o.stores, "etcd connections, one thread each")
      ->check(CLI::Range(1, 256));
  app.add_option("--duration-s", o.duration_s, "The measured phase")
      ->check(CLI::Range(5.0, 3600.0));
  app.add_option("--step-s", o.step_s, "Each member's step")->check(CLI::Range(0.01, 10.0));
  app.add_option("--change-every-s", o.change_every_s, "Site budget changes")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--seed", o.seed, "Floors and nameplates");
  bool poll = false;
  app.add_flag("--poll", poll,
               "Members read their grant at every step, with no watch (the agents before the "
               "grant's watch)");
  app.add_option("--json", o.json_path, "Also write the results here");
  CLI11_PARSE(app, argc, argv);
  o.watch = !poll;
  if (!headroom::etcd_test::EtcdCluster::Available()) {
    fmt::print(stderr, "fleet_scale: {} not found\n", headroom::etcd_test::kEtcdBinary);
    return 2;
  }
  return headroom::bench::Run(o);
}
