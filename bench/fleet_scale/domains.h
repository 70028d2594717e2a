// headroom_fleet_scale --domains N: two levels (issue 55, item 3; bench/fleet_scale.cc reads top
// to bottom, this is its two-level run). N domains, each an etcd of its own and a `headroom
// coordinator --site dom-<d> --parent-etcd P --parent-site scale` on it, with the agents split
// evenly (agent i in dom-<i % N>, its member on its domain's etcd); the site's coordinator on the
// parent etcd P (behind the proxy, as one level's), whose members are the domains. In order:
// every etcd; the ledgers' watches (the site's, each domain's); the agents, all registered; the
// domain coordinators, each leading with its agents granted within its start budget (its
// agents' floors + kDomainStartFraction of their demand above); every domain registered at the
// parent; then the site's coordinator (so its first period admits every domain: see
// WaitRegistered); every domain granted, its budget in force its grant, every agent granted;
// the steady phase, its budget changes POSTed to the site's coordinator; everything stopped
// (every coordinator, then every etcd); what it measured (measure.h over every agent, grouped by
// domain; domain_report.h).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/fleet_scale/coordinator_process.h"
#include "bench/fleet_scale/domain_report.h"
#include "bench/fleet_scale/http.h"
#include "bench/fleet_scale/ledger_watcher.h"
#include "bench/fleet_scale/measure.h"
#include "bench/fleet_scale/options.h"
#include "bench/fleet_scale/report.h"
#include "bench/fleet_scale/site.h"
#include "coord/layout.h"
#include "etcd/etcd_store.h"

namespace headroom::bench {

// One domain: its etcd (no proxy), its ledger watched, its coordinator. Destroyed, the
// coordinator is stopped, then the watch, then etcd killed.
struct Domain {
  std::string name;
  std::vector<size_t> agents;
  double floors_w = 0, demands_w = 0, start_budget_w = 0;
  std::optional<SiteEtcd> etcd;
  std::unique_ptr<LedgerWatcher> watcher;
  std::optional<CoordinatorCommand> command;
  std::unique_ptr<CoordinatorProcess> coordinator;
};

// Both levels. Destroyed, the site's coordinator is stopped first, the parent etcd killed last.
struct TwoLevels {
  std::optional<SiteEtcd> parent;  // the site's etcd, with the proxy for its coordinator
  std::vector<Domain> domains;
  std::unique_ptr<LedgerWatcher> site_watcher;
  std::optional<CoordinatorCommand> site_command;
  std::unique_ptr<CoordinatorProcess> site_coordinator;

  // The end of every started coordinator's log (for a set-up failure's message).
  std::string Tails() const {
    std::string out;
    if (site_coordinator) {
      out += fmt::format("the site's coordinator's log ({}) ends:\n{}", site_command->log_path,
                         site_coordinator->tail());
    }
    for (const Domain& d : domains) {
      if (!d.coordinator) continue;
      out += fmt::format("{}'s coordinator's log ({}) ends:\n{}", d.name, d.command->log_path,
                         d.coordinator->tail());
    }
    return out;
  }
};

// The domains' agents, sums and start budgets; false (after saying why) when the site's start
// budget cannot hold every domain's.
inline bool PlanDomains(const Options& o, const std::vector<SimAgent>& agents,
                        const SiteSetUp& site, TwoLevels* levels) {
  levels->domains.resize(static_cast<size_t>(o.domains));
  for (size_t i = 0; i < agents.size(); ++i) {
    Domain& d = levels->domains[i % levels->domains.size()];
    d.agents.push_back(i);
    d.floors_w += agents[i].config.floor_w;
    d.demands_w += agents[i].config.nameplate_w;
  }
  double starts_w = 0;
  for (size_t k = 0; k < levels->domains.size(); ++k) {
    Domain& d = levels->domains[k];
    d.name = DomainName(static_cast<int>(k));
    d.start_budget_w = std::ceil(d.floors_w + kDomainStartFraction * (d.demands_w - d.floors_w));
    starts_w += d.start_budget_w;
  }
  if (starts_w > site.high_w) {
    fmt::print(stderr,
               "fleet_scale: the domains' start budgets ({:.0f} W) exceed the site's ({:.0f} W)\n",
               starts_w, site.high_w);
    return false;
  }
  return true;
}

// Every etcd and every ledger's watch; false after saying why.
inline bool StartLevelsEtcd(const Options& o, TwoLevels* levels) {
  levels->parent = StartEtcd(/*proxied=*/true);
  if (!levels->parent) return false;
  auto site_store = etcd::EtcdStore::Open(levels->parent->url, o.etcd_timeout_s);
  if (!site_store) {
    fmt::print(stderr, "fleet_scale: cannot open the parent etcd for the watch\n");
    return false;
  }
  levels->site_watcher =
      std::make_unique<LedgerWatcher>(std::move(*site_store), coord::Keys(kSite).ledger());
  for (Domain& d : levels->domains) {
    d.etcd = StartEtcd(/*proxied=*/false);
    if (!d.etcd) return false;
    auto store = etcd::EtcdStore::Open(d.etcd->url, o.etcd_timeout_s);
    if (!store) {
      fmt::print(stderr, "fleet_scale: cannot open {}'s etcd for the watch\n", d.name);
      return false;
    }
    d.watcher = std::make_unique<LedgerWatcher>(std::move(*store), coord::Keys(d.name).ledger());
  }
  return true;
}

// A coordinator's /v1/status as JSON (null: no answer).
inline json StatusOf(const CoordinatorProcess& c) {
  const std::optional<std::string> s = HttpGet(c.port(), "/v1/status");
  return s ? json::parse(*s, nullptr, false) : json(nullptr);
}

// Polls `done(domain's status)` for every domain until all hold or the admit timeout; what
// failed, if anything.
template <typename Done>
std::optional<std::string> WaitDomains(const Options& o, TwoLevels& levels, const char* what,
                                       Done done) {
  const double deadline_s = NowS() + o.admit_timeout_s;
  for (;;) {
    int ready = 0;
    for (Domain& d : levels.domains) {
      if (!d.coordinator->running()) return fmt::format("{}'s coordinator stopped", d.name);
      const json s = StatusOf(*d.coordinator);
      if (s.is_object() && s["parent"].is_object() && done(s)) ++ready;
    }
    if (ready == o.domains) return std::nullopt;
    if (NowS() > deadline_s) {
      return fmt::format("{} of {} domains {} after {} s", ready, o.domains, what,
                         o.admit_timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The domain coordinators, then the site's; until every domain and every agent is granted and
// each domain's budget in force is its grant. What failed, if anything.
inline std::optional<std::string> StartLevelsCoordinators(const Options& o, const SiteSetUp& site,
                                                          const Fleet& fleet, TwoLevels& levels) {
  for (Domain& d : levels.domains) {
    d.command =
        CoordinatorCommandFor(o, d.etcd->url, d.name, d.start_budget_w,
                              {"--parent-etcd", levels.parent->url, "--parent-site", kSite});
    if (!d.command) return "no log directory";
    if (auto failed = StartLeader(o, *d.command, &d.coordinator)) {
      return fmt::format("{}: {}", d.name, *failed);
    }
  }
  const auto all_running = [&levels] {
    for (Domain& d : levels.domains) {
      if (!d.coordinator->running()) return false;
    }
    return true;
  };
  if (auto failed = WaitGranted(o, fleet, all_running)) return *failed;
  if (auto failed = WaitDomains(o, levels, "registered at the site",
                                [](const json& s) { return !s["parent"]["lease"].is_null(); })) {
    return *failed;
  }
  levels.site_command = CoordinatorCommandFor(
      o, fmt::format("http://127.0.0.1:{}", levels.parent->proxy->port()), kSite, site.high_w);
  if (!levels.site_command) return "no log directory";
  if (auto failed = StartLeader(o, *levels.site_command, &levels.site_coordinator)) {
    return fmt::format("the site: {}", *failed);
  }
  if (auto failed = WaitDomains(o, levels, "granted, their budget their grant", [](const json& s) {
        const json& p = s["parent"];
        return p.value("state", "") == "granted" && p.value("pending_w", 1.0) == 0.0 &&
               s["site_budget_w"].is_number() &&
               std::abs(s["site_budget_w"].get<double>() - p.value("job_budget_w", 0.0)) < 1e-3;
      })) {
    return *failed;
  }
  return WaitGranted(o, fleet, all_running);
}

// The phase, between snapshots of every level's etcd and coordinator, the agents' side.
inline TwoLevelPhase RunTwoLevelPhase(const Options& o, const SiteSetUp& site, const Fleet& fleet,
                                      TwoLevels& levels, RecordingStore& probe_store) {
  TwoLevelPhase t;
  SteadyPhase& p = t.site;
  t.domains.resize(levels.domains.size());
  const SiteEtcd& parent = *levels.parent;
  const LevelCpu site_before = BeginLevel(parent.port, parent.pid, *levels.site_coordinator, &p);
  std::vector<LevelCpu> domains_before;
  for (size_t d = 0; d < levels.domains.size(); ++d) {
    const Domain& dom = levels.domains[d];
    domains_before.push_back(
        BeginLevel(dom.etcd->port, dom.etcd->pid, *dom.coordinator, &t.domains[d]));
  }
  const FleetCounters fleet_before = CountFleet(fleet);
  p.phase_begin_s = NowS();
  p.phase_end_s = p.phase_begin_s + o.duration_s;
  ChangeBudgetsAndProbe(o, site, levels.site_coordinator->port(), parent.port, probe_store,
                        coord::Keys(kSite), &p);
  SleepUntilS(p.phase_end_s);
  p.phase_s = NowS() - p.phase_begin_s;
  EndFleet(fleet, fleet_before, &p);
  EndLevel(parent.port, parent.pid, *levels.site_coordinator, site_before, &p);
  for (size_t d = 0; d < levels.domains.size(); ++d) {
    const Domain& dom = levels.domains[d];
    EndLevel(dom.etcd->port, dom.etcd->pid, *dom.coordinator, domains_before[d], &t.domains[d]);
  }
  p.phase_measured_end_s = NowS();
  for (size_t d = 0; d < levels.domains.size(); ++d) {
    SteadyPhase& q = t.domains[d];
    q.phase_begin_s = p.phase_begin_s;
    q.phase_end_s = p.phase_end_s;
    q.phase_s = p.phase_s;
    q.phase_measured_end_s = p.phase_measured_end_s;
    t.names.push_back(levels.domains[d].name);
    t.agents.push_back(levels.domains[d].agents.size());
    t.start_budget_w.push_back(levels.domains[d].start_budget_w);
  }
  return t;
}

// Everything stopped (every etcd killed, its directory removed), and what the coordinators, the
// ledgers' watches and the proxy kept taken into `t`.
inline void StopLevels(Fleet& fleet, TwoLevels& levels, TwoLevelPhase* t) {
  fleet.Stop();
  levels.site_watcher->Stop();
  for (Domain& d : levels.domains) d.watcher->Stop();
  t->site.coordinator_ran = levels.site_coordinator->running();
  for (size_t k = 0; k < levels.domains.size(); ++k) {
    t->domains[k].coordinator_ran = levels.domains[k].coordinator->running();
  }
  levels.site_coordinator->Stop();
  for (Domain& d : levels.domains) d.coordinator->Stop();
  t->site.budget_lines = levels.site_coordinator->budget_lines();
  t->site.ledgers = levels.site_watcher->seen();
  t->site.proxy_requests = levels.parent->proxy->requests();
  t->site.watch_errors = levels.site_watcher->errors();
  for (size_t k = 0; k < levels.domains.size(); ++k) {
    Domain& d = levels.domains[k];
    t->domains[k].budget_lines = d.coordinator->budget_lines();
    t->domains[k].ledgers = d.watcher->seen();
    t->domains[k].watch_errors = d.watcher->errors();
    d.etcd->cluster.reset();
  }
  levels.parent->cluster.reset();
}

// The report: the site's table and JSON (every agent's round trips), the domains' part; the
// exit status.
inline int ReportTwoLevels(const Options& o, const SiteSetUp& site, const TwoLevelPhase& t,
                           const Measured& measured, const TwoLevels& levels) {
  const TwoLevelMeasured two = MeasureTwoLevels(t);
  const bool broken = measured.InvariantBroken() || two.Broken();
  json out = ReportJson(o, site, t.site, measured, levels.site_command->log_path);
  out["two_levels"] = TwoLevelJson(o, t, measured, two);
  PrintTable(o, t.site, measured);
  PrintTwoLevelRows(o, t, measured, two);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      fmt::print(stderr, "fleet_scale: cannot write {}\n", o.json_path);
      return 2;
    }
  }
  if (broken) {
    fmt::print(stderr, "fleet_scale: an invariant was broken; the coordinators' logs: {}",
               levels.site_command->log_dir);
    for (const Domain& d : levels.domains) fmt::print(stderr, ", {}", d.command->log_dir);
    fmt::print(stderr, "\n");
    return 1;
  }
  std::error_code ignored;
  std::filesystem::remove_all(levels.site_command->log_dir, ignored);
  for (const Domain& d : levels.domains) std::filesystem::remove_all(d.command->log_dir, ignored);
  return 0;
}

inline int RunTwoLevels(const Options& o) {
  SiteSetUp site;
  std::vector<SimAgent> agents = MakeAgents(o, &site);
  TwoLevels levels;
  if (!PlanDomains(o, agents, site, &levels) || !StartLevelsEtcd(o, &levels)) return 2;
  auto probe_etcd = etcd::EtcdStore::Open(levels.parent->url, 10.0);
  if (!probe_etcd) {
    fmt::print(stderr, "fleet_scale: cannot open the parent etcd for the probe\n");
    return 2;
  }
  RecordingStore probe_store(**probe_etcd);

  // Set-up failures from here on stop the agents' threads and say where the logs are.
  Fleet fleet(agents);
  const auto fail = [&](const std::string& what) {
    fleet.Stop();
    fmt::print(stderr, "fleet_scale: {}\n{}", what, levels.Tails());
    return 2;
  };
  std::vector<std::string> urls;
  for (const Domain& d : levels.domains) urls.push_back(d.etcd->url);
  if (!StartAgents(o, urls, fleet)) return 2;
  if (auto failed = WaitRegistered(o, fleet)) return fail(*failed);
  site.registered_after_s = NowS() - fleet.first_tick_s;
  const double coordinators_start_s = NowS();
  if (auto failed = StartLevelsCoordinators(o, site, fleet, levels)) return fail(*failed);
  site.admitted_after_s = NowS() - coordinators_start_s;
  fmt::print(stderr,
             "fleet_scale: {} domains; every agent registered {:.1f} s after its first step, and "
             "every domain and agent granted {:.1f} s after the domains' coordinators started\n",
             o.domains, site.registered_after_s, site.admitted_after_s);
  SleepUntilS(NowS() + o.settle_s);

  TwoLevelPhase t = RunTwoLevelPhase(o, site, fleet, levels, probe_store);
  StopLevels(fleet, levels, &t);
  std::vector<AgentGroup> groups;
  for (size_t d = 0; d < levels.domains.size(); ++d) {
    groups.push_back({&t.domains[d].ledgers, levels.domains[d].agents});
  }
  const Measured measured = Measure(t.site, agents, fleet.workers, groups);
  return ReportTwoLevels(o, site, t, measured, levels);
}

}  // namespace headroom::bench
