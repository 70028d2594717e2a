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
// The measuring is in bench/fleet_scale/measure.h, the report (the table; --json) in report.h;
// the set-up both levels share in site.h.
//
// Two levels (issue 55, item 3: "4 domains x 250 agents, each domain on its own etcd, under one
// site coordinator: a site POST cut -> every agent acting on its lower grant, p99 <= 3 s"):
//
//   headroom_fleet_scale --headroom build/bin/headroom --agents 1000 --domains 4 [--json F]
//
// runs N domain coordinators (`--site dom-<d> --parent-etcd P --parent-site scale`), each on an
// etcd of its own with its share of the agents (agent i in dom-<i % N>; the connections split
// evenly), under the site's coordinator on the parent etcd P, which alone gets the budget
// changes (domains.h; the order of the set-up is there). The same measurements, with:
//   - the cut round trip, at both levels alike: for each lower site budget POSTed at t0 (just
//     before the POST), each agent's first Current() after t0 on a grant (state granted) with
//     a newer sequence than, and a budget lower than, the grant it acted on at t0; the time is
//     when that Current() returned, less t0. An agent with none before the next change counts
//     as "without a lower grant", not in the quantiles. p50 / p99 / max over every agent and
//     cut. (The grant round trip above counts the first new sequence, lower or not, at every
//     change; at a cut the two differ only for an agent whose first new grant is not lower.)
//   - the invariant at two levels (domain_report.h): per domain, the one above against that
//     domain's ledger; the site's ledger (sum held by the domains <= site budget - reserve); and
//     across the levels, the domains' budgets in force (their ledgers) summed <= the site's
//     budget in force - reserve, each <= what the site's ledger has it hold.
// The table's coordinator, etcd and probe rows are then the site's (the parent etcd's); a
// second table adds the domains'. The JSON (--json) keys, beyond one level's:
//   grant_round_trip.cut_lower_{pairs,p50_s,p99_s,max_s}: the cut round trip (both levels);
//     grant_round_trip.changes[].{members_with_lower_grant,members_without_lower,
//     lower_p50_s,lower_p99_s,lower_max_s}: per change;
//   two_levels (only with --domains): domains; etcd.{requests_per_s, requests_per_agent_per_s,
//     site_requests_per_s, domains_requests_per_s, cpu_pct_of_one_core}: every etcd's;
//     coordinators_cpu_pct_of_one_core.{site,domains}; invariant.{domains,site,across}.{checks,
//     violations,min_slack_w} and invariant.above_held; changes[].{t_s, lower,
//     domains_target_s, domains_in_force_s, domains_acked_s}: the latest domain's target, its
//     budget in force, and (cuts) its lower hold in the site's ledger, after the POST;
//     per_domain[].{name, agents, start_budget_w, site_budget_w_at_end, parent (its /v1/status
//     "parent"), ledger_writes, etcd_requests_per_s, etcd_cpu_pct_of_one_core,
//     coordinator_cpu_pct_of_one_core, coordinator_rss_mib, coordinator_ran_to_the_end,
//     invariant_refusals, invariant.{checks,violations,min_slack_w}, watch_errors}.
// Exit status: 0, 1 when an invariant was broken, 2 when the site could not be set up.
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
#include "bench/fleet_scale/domains.h"
#include "bench/fleet_scale/etcd_proxy.h"
#include "bench/fleet_scale/http.h"
#include "bench/fleet_scale/ledger_watcher.h"
#include "bench/fleet_scale/measure.h"
#include "bench/fleet_scale/options.h"
#include "bench/fleet_scale/probe.h"
#include "bench/fleet_scale/report.h"
#include "bench/fleet_scale/site.h"
#include "bench/fleet_scale/system.h"

namespace headroom::bench {
namespace {

using coord::Acting;
using json = nlohmann::ordered_json;

// ---- The steady phase ----

// The phase, between snapshots of etcd's metrics, the members' watches, CPU and memory.
SteadyPhase RunSteadyPhase(const Options& o, const SiteSetUp& site, const Fleet& fleet,
                           const SiteEtcd& etcd, const CoordinatorProcess& coordinator,
                           RecordingStore& probe_store, const coord::Keys& keys) {
  SteadyPhase p;
  const LevelCpu level_before = BeginLevel(etcd.port, etcd.pid, coordinator, &p);
  const FleetCounters fleet_before = CountFleet(fleet);
  p.phase_begin_s = NowS();
  p.phase_end_s = p.phase_begin_s + o.duration_s;
  ChangeBudgetsAndProbe(o, site, coordinator.port(), etcd.port, probe_store, keys, &p);
  SleepUntilS(p.phase_end_s);
  p.phase_s = NowS() - p.phase_begin_s;
  EndFleet(fleet, fleet_before, &p);
  EndLevel(etcd.port, etcd.pid, coordinator, level_before, &p);
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
  const std::optional<CoordinatorCommand> command = CoordinatorCommandFor(
      o, fmt::format("http://127.0.0.1:{}", etcd->proxy->port()), kSite, site.high_w);
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
  if (!StartAgents(o, {etcd->url}, fleet)) return 2;
  if (auto failed = WaitRegistered(o, fleet)) return fail(*failed);
  site.registered_after_s = NowS() - fleet.first_tick_s;

  // The coordinator.
  const double coordinator_start_s = NowS();
  if (auto failed = StartLeader(o, *command, &coordinator)) return fail(*failed);
  if (auto failed = WaitGranted(o, fleet, [&] { return coordinator->running(); })) {
    return fail(*failed);
  }
  site.admitted_after_s = NowS() - coordinator_start_s;
  fmt::print(stderr,
             "fleet_scale: every agent registered {:.1f} s after its first step, and granted "
             "{:.1f} s after the coordinator started\n",
             site.registered_after_s, site.admitted_after_s);
  SleepUntilS(NowS() + o.settle_s);

  // The steady phase, everything stopped, and what it measured.
  SteadyPhase phase = RunSteadyPhase(o, site, fleet, *etcd, *coordinator, probe_store, keys);
  StopSite(fleet, watcher, *coordinator, *etcd, &phase);
  AgentGroup everyone{&phase.ledgers, {}};
  for (size_t i = 0; i < agents.size(); ++i) everyone.agents.push_back(i);
  const Measured measured = Measure(phase, agents, fleet.workers, {everyone});

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
  app.add_option("--domains", o.domains,
                 "Two levels: this many domains, each a coordinator on an etcd of its own, under "
                 "the site's coordinator on a parent etcd, the agents split evenly (0: one level)")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);
  o.watch = !poll;
  if (!headroom::etcd_test::EtcdCluster::Available()) {
    fmt::print(stderr, "fleet_scale: {} not found\n", headroom::etcd_test::kEtcdBinary);
    return 2;
  }
  if (o.domains > o.agents) {
    fmt::print(stderr, "fleet_scale: --domains {} exceeds --agents {}\n", o.domains, o.agents);
    return 2;
  }
  return o.domains > 0 ? headroom::bench::RunTwoLevels(o) : headroom::bench::Run(o);
}
