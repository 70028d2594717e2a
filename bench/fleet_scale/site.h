// headroom_fleet_scale's site, set up: an etcd (and the proxy in front of it for the site's
// coordinator), a coordinator's command line, the agents started and registered, a coordinator
// started until it leads, and the steady phase's budget changes and probes (bench/fleet_scale.cc
// reads top to bottom; this is one part, shared by one level and two, domains.h).
#pragma once

#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/fleet_scale/agents.h"
#include "bench/fleet_scale/coordinator_process.h"
#include "bench/fleet_scale/etcd_proxy.h"
#include "bench/fleet_scale/http.h"
#include "bench/fleet_scale/measure.h"
#include "bench/fleet_scale/options.h"
#include "bench/fleet_scale/probe.h"
#include "bench/fleet_scale/report.h"
#include "bench/fleet_scale/system.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "etcd/etcd_store.h"
#include "tests/support/etcd_cluster.h"

namespace headroom::bench {

// ---- The site's agents ----

// Deterministic floors and nameplates (agents.h); fills the site's budgets in `site`. With
// --domains, agent i is in domain i % domains (its config's site).
inline std::vector<SimAgent> MakeAgents(const Options& o, SiteSetUp* site) {
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

// A single-member etcd in a temporary directory, with a proxy in front of it when `proxied`;
// nullopt after saying why.
inline std::optional<SiteEtcd> StartEtcd(bool proxied = true) {
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
  if (!proxied) return etcd;
  etcd.proxy = EtcdProxy::Start(etcd.port, &why);
  if (!etcd.proxy) {
    fmt::print(stderr, "fleet_scale: {}\n", why);
    return std::nullopt;
  }
  return etcd;
}

// ---- A coordinator's command line ----

struct CoordinatorCommand {
  std::string log_dir;  // removed at the end unless the invariant was broken
  std::string log_path;
  std::vector<std::string> args;
};

// `headroom coordinator` of `site` on `etcd_url`, then `extra` (a domain's --parent-*); its log
// in a directory of its own. nullopt after saying why.
inline std::optional<CoordinatorCommand> CoordinatorCommandFor(
    const Options& o, const std::string& etcd_url, const std::string& site, double site_budget_w,
    const std::vector<std::string>& extra = {}) {
  char log_dir[] = "/tmp/headroom-fleet-scale-XXXXXX";
  if (mkdtemp(log_dir) == nullptr) {
    fmt::print(stderr, "fleet_scale: mkdtemp: {}\n", std::strerror(errno));
    return std::nullopt;
  }
  CoordinatorCommand c;
  c.log_dir = log_dir;
  c.log_path = c.log_dir + "/coordinator.log";
  c.args = {o.headroom,        "coordinator",
            "--etcd",          etcd_url,
            "--site",          site,
            "--site-budget-w", fmt::format("{:.0f}", site_budget_w),
            "--period-s",      fmt::format("{}", kPeriodS),
            "--lease-ttl-s",   std::to_string(kLeaseTtlS),
            "--listen",        "127.0.0.1:0"};
  c.args.insert(c.args.end(), extra.begin(), extra.end());
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

// Starts a watch thread per member, as each agent has: its watch stream on its own connection.
inline void StartWatches(Fleet& fleet) {
  for (SimAgent& a : fleet.agents) {
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

// Opens Options::stores connections, split evenly over `etcd_urls` (one level: the site's etcd;
// two levels: each domain's, agent i on etcd_urls[i % size]), puts each agent's member on one
// of its etcd's (in turn), and starts the threads. False after saying why (before any thread
// is started).
inline bool StartAgents(const Options& o, const std::vector<std::string>& etcd_urls, Fleet& fleet) {
  const size_t sites = etcd_urls.size();
  const size_t per_site = std::max<size_t>(1, static_cast<size_t>(o.stores) / sites);
  for (size_t s = 0; s < sites; ++s) {
    for (size_t k = 0; k < per_site; ++k) {
      auto w = std::make_unique<Worker>();
      auto opened = etcd::EtcdStore::Open(etcd_urls[s], o.etcd_timeout_s);
      if (!opened) {
        fmt::print(stderr, "fleet_scale: cannot open etcd: {}\n", opened.error().message());
        return false;
      }
      w->etcd = std::move(*opened);
      w->store = std::make_unique<RecordingStore>(*w->etcd);
      fleet.workers.push_back(std::move(w));
    }
  }
  std::vector<SimAgent>& agents = fleet.agents;
  const auto quiet = [](const std::string&) {};
  for (size_t i = 0; i < agents.size(); ++i) {
    Worker& w = *fleet.workers[(i % sites) * per_site + (i / sites) % per_site];
    w.agents.push_back(i);
    agents[i].member = std::make_unique<coord::SiteMember>(*w.store, agents[i].config, NowS, quiet);
  }
  if (o.watch) StartWatches(fleet);
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
inline std::optional<std::string> WaitRegistered(const Options& o, const Fleet& fleet) {
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

// ---- A coordinator, started ----

// Starts it and waits until it leads; what failed, if anything. `*coordinator` is set once it
// has started (the caller's message then shows its log's end).
inline std::optional<std::string> StartLeader(const Options& o, const CoordinatorCommand& command,
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
  return std::nullopt;
}

// Waits until every agent acts on a grant, while `running()`; what failed, if anything.
inline std::optional<std::string> WaitGranted(const Options& o, const Fleet& fleet,
                                              const std::function<bool()>& running) {
  const double admit_deadline_s = NowS() + o.admit_timeout_s;
  while (fleet.granted() < o.agents) {
    if (NowS() > admit_deadline_s || !running()) {
      return fmt::format("{} of {} agents granted after {} s", fleet.granted(), o.agents,
                         o.admit_timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

// ---- The steady phase ----

// Until the phase's end: a site budget change every Options::change_every_s, alternately lower
// and higher, POSTed to the site's coordinator, and the bench's own read of the site every
// Options::probe_every_s.
inline void ChangeBudgetsAndProbe(const Options& o, const SiteSetUp& site, int api_port,
                                  int etcd_port, RecordingStore& probe_store,
                                  const coord::Keys& keys, SteadyPhase* p) {
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

// What the agents' side and the machine had counted at the phase's beginning.
struct FleetCounters {
  uint64_t follows = 0, grants_watched = 0;
  double self_cpu_s = 0, machine_busy_s = 0, machine_total_s = 0;
};

inline FleetCounters CountFleet(const Fleet& fleet) {
  FleetCounters c;
  c.follows = fleet.follows();
  c.grants_watched = fleet.grants_watched();
  c.self_cpu_s = ProcCpuS(getpid()).value_or(0.0);
  std::tie(c.machine_busy_s, c.machine_total_s) = MachineCpuS();
  return c;
}

// Their growth since `begin`, into `p`.
inline void EndFleet(const Fleet& fleet, const FleetCounters& begin, SteadyPhase* p) {
  const FleetCounters end = CountFleet(fleet);
  p->phase_follows = end.follows - begin.follows;
  p->phase_grants_watched = end.grants_watched - begin.grants_watched;
  p->self_cpu_s = end.self_cpu_s - begin.self_cpu_s;
  p->machine_busy_s = end.machine_busy_s - begin.machine_busy_s;
  p->machine_total_s = end.machine_total_s - begin.machine_total_s;
}

// CPU seconds of one level's coordinator and etcd at the phase's beginning.
struct LevelCpu {
  double coord_s = 0, etcd_s = 0;
};

// One level's etcd metrics and coordinator status at the phase's beginning, into `p`.
inline LevelCpu BeginLevel(int etcd_port, pid_t etcd_pid, const CoordinatorProcess& coordinator,
                           SteadyPhase* p) {
  p->etcd_before = ScrapeEtcd(etcd_port);
  p->status_before_text = HttpGet(coordinator.port(), "/v1/status", 10.0);
  return {ProcCpuS(coordinator.pid()).value_or(0.0), ProcCpuS(etcd_pid).value_or(0.0)};
}

// The same at the end, with the CPU since `begin` and the memory, into `p`.
inline void EndLevel(int etcd_port, pid_t etcd_pid, const CoordinatorProcess& coordinator,
                     const LevelCpu& begin, SteadyPhase* p) {
  p->etcd_after = ScrapeEtcd(etcd_port);
  p->coord_cpu_s = ProcCpuS(coordinator.pid()).value_or(0.0) - begin.coord_s;
  p->etcd_cpu_s = ProcCpuS(etcd_pid).value_or(0.0) - begin.etcd_s;
  std::tie(p->etcd_rss_mib, p->etcd_hwm_mib) = ProcMemoryMiB(etcd_pid);
  std::tie(p->coord_rss_mib, p->coord_hwm_mib) = ProcMemoryMiB(coordinator.pid());
  p->status_text = HttpGet(coordinator.port(), "/v1/status", 10.0);
}

}  // namespace headroom::bench
