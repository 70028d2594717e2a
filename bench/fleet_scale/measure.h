// headroom_fleet_scale's measurements: what the steady phase recorded, and what is measured from it
// once the site has stopped: the agents' calls and rounds, (a) the coordinator's period, (b) each
// change's grant round trip and full reallocation, the invariant, the bench's own reads of the
// site (bench/fleet_scale.cc reads top to bottom; this is one part).
#pragma once

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
#include <type_traits>
#include <vector>
#include "bench/fleet_scale/agents.h"
#include "bench/fleet_scale/coordinator_process.h"
#include "bench/fleet_scale/etcd_proxy.h"
#include "bench/fleet_scale/ledger_watcher.h"
#include "bench/fleet_scale/probe.h"
#include "bench/fleet_scale/system.h"
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

namespace headroom::bench {

using coord::Acting;
using json = nlohmann::ordered_json;

// ---- What the steady phase recorded ----

struct SiteBudgetChange {
  double t_s = 0;  // just before the POST
  double site_budget_w = 0;
  bool lower = false;
  int status = 0;  // the HTTP answer
};

// Filled by bench/fleet_scale.cc's RunSteadyPhase, then, once everything has stopped, with what
// the coordinator, the ledger's watch and the proxy kept (StopSite).
struct SteadyPhase {
  double phase_begin_s = 0;
  double phase_end_s = 0;           // as planned: the begin + Options::duration_s
  double phase_s = 0;               // as it ran: from the begin to the snapshot at its end
  double phase_measured_end_s = 0;  // once that snapshot is taken
  // etcd's /metrics at the begin and the end (ScrapeEtcd).
  std::map<std::string, double> etcd_before, etcd_after;
  uint64_t phase_follows = 0;         // the members' watch streams made in the phase
  uint64_t phase_grants_watched = 0;  // the grants their watches brought in the phase
  // CPU seconds in the phase: the coordinator's, etcd's, this process's, and the machine's busy
  // and total (every core).
  double coord_cpu_s = 0, etcd_cpu_s = 0, self_cpu_s = 0;
  double machine_busy_s = 0, machine_total_s = 0;
  // VmRSS and VmHWM at the end, MiB.
  double etcd_rss_mib = 0, etcd_hwm_mib = 0;
  double coord_rss_mib = 0, coord_hwm_mib = 0;
  std::optional<std::string> status_text;         // the coordinator's /v1/status at the end
  std::optional<std::string> status_before_text;  // and at the phase's beginning
  std::vector<SiteBudgetChange> changes;
  std::vector<Probe> probes;
  uint64_t probe_failures = 0;
  // Once everything has stopped.
  bool coordinator_ran = false;  // still running at the end of the phase
  std::vector<CoordinatorProcess::Line> budget_lines;
  std::vector<LedgerSeen> ledgers;
  std::vector<EtcdProxy::Request> proxy_requests;
  uint64_t watch_errors = 0;  // the ledger's watch's

  bool InPhase(double t_s) const { return t_s >= phase_begin_s && t_s < phase_end_s; }
};

// ---- The agents' side ----

// The bench's own requests in the phase (as counted here), and the agents' rounds.
struct AgentCalls {
  std::map<CallRecord::Kind, uint64_t> bench_calls;
  uint64_t bench_errors = 0;
  std::vector<double> get_latency_s, all_latency_s, round_s;
  uint64_t member_steps = 0, skipped_ticks = 0;

  uint64_t calls(CallRecord::Kind kind) const {
    const auto it = bench_calls.find(kind);
    return it == bench_calls.end() ? 0 : it->second;
  }
};

inline AgentCalls MeasureAgentCalls(const SteadyPhase& p,
                                    const std::vector<std::unique_ptr<Worker>>& workers) {
  AgentCalls m;
  for (const auto& w : workers) {
    for (const CallRecord& c : w->store->calls()) {
      if (!p.InPhase(c.t_s)) continue;
      ++m.bench_calls[c.kind];
      if (!c.ok) ++m.bench_errors;
      m.all_latency_s.push_back(c.latency_s);
      if (c.kind == CallRecord::kGet) m.get_latency_s.push_back(c.latency_s);
    }
    for (const Worker::Round& r : w->rounds) {
      if (!p.InPhase(r.t_s)) continue;
      m.round_s.push_back(r.took_s);
      m.member_steps += static_cast<uint64_t>(r.members);
      m.skipped_ticks += static_cast<uint64_t>(r.skipped);
    }
  }
  return m;
}

// ---- (a) The coordinator's period ----

struct CoordinatorPeriod {
  std::vector<double> read_s, txn_s;  // how long each took to be answered
  std::vector<double> period_gaps_s;  // between consecutive reads' starts
  double periods = 0;
  double periods_expected = 0;
  double longest_gap_s = 0;
  bool period_held = false;
  std::vector<double> write_times_s;  // the ledger's writes in the phase (watched)
  std::vector<double> chain_gaps_s;   // between consecutive ones closer than kChainGapMaxS
};

// A leader period's count from the coordinator's /v1/status: its lists of the site and the
// periods planned on its watch (a coordinator before issue 55 has neither: nullopt).
inline std::optional<double> LeaderPeriods(const std::optional<std::string>& status_text) {
  if (!status_text) return std::nullopt;
  const json s = json::parse(*status_text, nullptr, false);
  if (!s.is_object() || !s.contains("view_updates") || !s.contains("site_lists")) {
    return std::nullopt;
  }
  return s["view_updates"].get<double>() + s["site_lists"].get<double>();
}

// The coordinator's periods: with a leader that lists its site once and plans on its watch
// (issue 55), from its /v1/status (how many; the whole-site reads, if any, timed as before);
// before it, one read of the site's keys per period (coordinator.cc Lead), as the proxy saw
// them: how many, how far apart, how long each took to be answered.
inline CoordinatorPeriod MeasurePeriod(const SteadyPhase& p) {
  CoordinatorPeriod m;
  std::vector<double> read_starts_s;
  for (const EtcdProxy::Request& r : p.proxy_requests) {
    if (!p.InPhase(r.sent_s)) continue;
    if (r.path == "/v3/kv/range" && r.range_of_keys) {
      read_starts_s.push_back(r.sent_s);
      m.read_s.push_back(r.last_byte_s - r.sent_s);
    } else if (r.path == "/v3/kv/txn") {
      m.txn_s.push_back(r.last_byte_s - r.sent_s);
    }
  }
  for (size_t i = 1; i < read_starts_s.size(); ++i) {
    m.period_gaps_s.push_back(read_starts_s[i] - read_starts_s[i - 1]);
  }
  m.periods = static_cast<double>(read_starts_s.size());
  const std::optional<double> before = LeaderPeriods(p.status_before_text);
  const std::optional<double> after = LeaderPeriods(p.status_text);
  if (before && after) m.periods = *after - *before;
  m.periods_expected = std::floor(p.phase_s / kPeriodS);
  m.longest_gap_s = NearestRank(m.period_gaps_s, 1.0);
  m.period_held = m.periods >= m.periods_expected - 1 &&
                  (m.period_gaps_s.empty() || m.longest_gap_s < 1.5 * kPeriodS);
  for (const LedgerSeen& l : p.ledgers) {
    if (p.InPhase(l.t_s)) m.write_times_s.push_back(l.t_s);
  }
  for (size_t i = 1; i < m.write_times_s.size(); ++i) {
    const double gap = m.write_times_s[i] - m.write_times_s[i - 1];
    if (gap < kChainGapMaxS) m.chain_gaps_s.push_back(gap);
  }
  return m;
}

// ---- (b) Grant round trip and full reallocation, per change ----

// The agents in one ledger: the site's (one level), or one domain's (two levels).
struct AgentGroup {
  const std::vector<LedgerSeen>* ledgers = nullptr;  // that site's ledger, as watched
  std::vector<size_t> agents;                        // indices into the agents
};

struct ChangeResult {
  std::vector<double> first_s;  // per member: POST -> first decision on a new grant
  size_t no_new_grant = 0;
  // A cut's only, per member: POST -> its first Current() on a new grant lower than the one it
  // acted on at the POST (bench/fleet_scale.cc's header).
  std::vector<double> lower_s;
  size_t no_lower_grant = 0;
  double first_write_s = std::nan("");  // POST -> the first ledger write after it
  double ledger_settled_s = std::nan("");
  double full_s = std::nan("");  // POST -> every member on the ledger's latest seq for it
  size_t unsettled = 0;
  size_t ledger_writes = 0;
  double in_force_s = std::nan("");  // POST -> the ledger's budget in force is the new one
  double asked_s = std::nan("");     // POST -> the coordinator's "target written" line
};

struct GrantRoundTrips {
  std::vector<ChangeResult> results;  // one per SteadyPhase::changes
  std::vector<double> all_first_s, down_first_s, up_first_s;
  std::vector<double> cut_lower_s;  // every cut's lower_s
};

// The last ledger seen in [t0, t1); nullptr: none.
inline const LedgerSeen* LastLedgerIn(const std::vector<LedgerSeen>& ledgers, double t0,
                                      double t1) {
  const LedgerSeen* last = nullptr;
  for (const LedgerSeen& l : ledgers) {
    if (l.t_s >= t0 && l.t_s < t1) last = &l;
  }
  return last;
}

// The site's ledger in [t0, t1) and the coordinator's "target written" line, into `r`.
inline void MeasureSiteLedger(const SteadyPhase& p, const SiteBudgetChange& change, double t1,
                              ChangeResult* r) {
  const double t0 = change.t_s;
  const LedgerSeen* last = nullptr;
  for (const LedgerSeen& l : p.ledgers) {
    if (l.t_s < t0 || l.t_s >= t1) continue;
    if (r->ledger_writes++ == 0) r->first_write_s = l.t_s - t0;
    if (std::isnan(r->in_force_s) &&
        std::abs(l.ledger.site_budget_w - change.site_budget_w) < 1e-6) {
      r->in_force_s = l.t_s - t0;
    }
    last = &l;
  }
  if (last != nullptr) r->ledger_settled_s = last->t_s - t0;
  for (const CoordinatorProcess::Line& l : p.budget_lines) {
    if (l.t_s >= t0 && l.t_s < t1 && l.text.find("target written") != std::string::npos) {
      r->asked_s = l.t_s - t0;
      break;
    }
  }
}

// One member's part of one change into `r`: its first new grant (and, at a cut, its first
// lower one) in [t0, t1); whether it reached the ledger `last`'s latest seq for it (its time
// raises *full_t). `last`: its site's last ledger in [t0, t1), if any.
inline void MeasureMemberChange(const SimAgent& a, double t0, double t1, bool cut,
                                const LedgerSeen* last, ChangeResult* r, double* full_t) {
  const auto& acts = a.acts;
  const auto after = std::lower_bound(acts.begin(), acts.end(), t0,
                                      [](const ActRecord& x, double t) { return x.t_s < t; });
  const int64_t seq0 = after == acts.begin() ? 0 : std::prev(after)->seq;
  const double budget0_w = after == acts.begin() ? INFINITY : std::prev(after)->budget_w;
  bool found = false, lower = false;
  for (auto it = after; it != acts.end() && it->t_s < t1 && !(found && (lower || !cut)); ++it) {
    if (it->state != Acting::State::kGranted || it->seq <= seq0) continue;
    if (!found) r->first_s.push_back(it->t_s - t0);
    found = true;
    if (cut && !lower && it->budget_w < budget0_w - kCutLowerTolW) {
      r->lower_s.push_back(it->t_s - t0);
      lower = true;
    }
  }
  if (!found) ++r->no_new_grant;
  if (cut && !lower) ++r->no_lower_grant;
  if (last == nullptr) return;
  const auto job = last->ledger.jobs.find(a.config.job);
  if (job == last->ledger.jobs.end() || job->second.lease == 0) return;
  for (auto it = after; it != acts.end() && it->t_s < t1; ++it) {
    if (it->state == Acting::State::kGranted && it->seq >= job->second.seq) {
      *full_t = std::max(*full_t, it->t_s);
      return;
    }
  }
  ++r->unsettled;
}

// Per change: the site's ledger, and every member's round trip (its grants in its group's
// ledger: the site's, or its domain's).
inline GrantRoundTrips MeasureRoundTrips(const SteadyPhase& p, const std::vector<SimAgent>& agents,
                                         const std::vector<AgentGroup>& groups) {
  const std::vector<SiteBudgetChange>& changes = p.changes;
  GrantRoundTrips m;
  m.results.resize(changes.size());
  for (size_t c = 0; c < changes.size(); ++c) {
    const double t0 = changes[c].t_s;
    const double t1 = c + 1 < changes.size() ? changes[c + 1].t_s : p.phase_measured_end_s;
    ChangeResult& r = m.results[c];
    MeasureSiteLedger(p, changes[c], t1, &r);
    double full_t = t0;
    bool any_last = false;
    for (const AgentGroup& g : groups) {
      const LedgerSeen* last = LastLedgerIn(*g.ledgers, t0, t1);
      any_last = any_last || last != nullptr;
      for (const size_t i : g.agents) {
        MeasureMemberChange(agents[i], t0, t1, changes[c].lower, last, &r, &full_t);
      }
    }
    if (any_last && r.unsettled == 0) r.full_s = full_t - t0;
    for (const double v : r.first_s) {
      m.all_first_s.push_back(v);
      (changes[c].lower ? m.down_first_s : m.up_first_s).push_back(v);
    }
    m.cut_lower_s.insert(m.cut_lower_s.end(), r.lower_s.begin(), r.lower_s.end());
  }
  return m;
}

// ---- The invariant, and the time the members spent fenced or local ----

struct Invariant {
  uint64_t violations = 0, checks = 0;
  double min_slack_w = INFINITY;
  double fenced_total_s = 0, local_total_s = 0;  // summed over the members, in the phase
};

// At every change of any member's acting budget in the phase, the sum over a group's members
// (granted or fenced: the jobs in the ledger; one level: every member, two levels: a domain's)
// <= the budget in force - reserve, as the group's ledger last delivered by its watch had it.
// A member acting on a grant shows that the ledger holding it was written (the coordinator
// writes a grant only with or after the ledger that holds it): the budget in force is then
// at least that ledger's, even when this bench's watch of the ledger (one stream, parsing
// the whole ledger) delivers it after a member's own watch delivered the grant.
inline Invariant CheckInvariant(const SteadyPhase& p, const std::vector<SimAgent>& all,
                                const AgentGroup& group) {
  const std::vector<LedgerSeen>& ledgers = *group.ledgers;
  std::vector<const SimAgent*> agents;
  for (const size_t i : group.agents) agents.push_back(&all[i]);
  struct Event {
    double t_s;
    size_t agent;
    double counted_w;
    size_t implied_ledger;  // the first ledger holding the grant acted on + 1; 0: none
  };
  const auto implied_ledger = [&](size_t agent, const ActRecord& x) -> size_t {
    if (x.state != Acting::State::kGranted) return 0;
    for (size_t k = 0; k < ledgers.size(); ++k) {
      const auto job = ledgers[k].ledger.jobs.find(agents[agent]->config.job);
      if (job != ledgers[k].ledger.jobs.end() && job->second.seq >= x.seq) return k + 1;
    }
    return 0;
  };
  std::vector<Event> events;
  std::vector<double> fenced_s(agents.size(), 0.0), local_s(agents.size(), 0.0);
  for (size_t i = 0; i < agents.size(); ++i) {
    const auto& acts = agents[i]->acts;
    for (size_t k = 0; k < acts.size(); ++k) {
      const ActRecord& x = acts[k];
      events.push_back({x.t_s, i, x.state == Acting::State::kLocal ? 0.0 : x.budget_w,
                        p.InPhase(x.t_s) ? implied_ledger(i, x) : 0});
      const double from = std::max(x.t_s, p.phase_begin_s);
      const double to =
          std::min(k + 1 < acts.size() ? acts[k + 1].t_s : p.phase_end_s, p.phase_end_s);
      if (to > from) {
        if (x.state == Acting::State::kFenced) fenced_s[i] += to - from;
        if (x.state == Acting::State::kLocal) local_s[i] += to - from;
      }
    }
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.t_s < b.t_s; });
  Invariant m;
  std::vector<double> acting_w(agents.size(), 0.0);
  double sum_w = 0;
  size_t ledger_at = 0;
  double allowed_w = std::nan("");
  const double tolerance_w = kInvariantTolW * static_cast<double>(agents.size() + 1);
  for (size_t e = 0; e < events.size(); ++e) {
    const Event& ev = events[e];
    sum_w += ev.counted_w - acting_w[ev.agent];
    acting_w[ev.agent] = ev.counted_w;
    while (ledger_at < ledgers.size() &&
           (ledgers[ledger_at].t_s <= ev.t_s || ledger_at < ev.implied_ledger)) {
      allowed_w = ledgers[ledger_at].ledger.site_budget_w - ledgers[ledger_at].ledger.reserve_w;
      ++ledger_at;
    }
    if (!p.InPhase(ev.t_s) || std::isnan(allowed_w)) continue;
    if (e + 1 < events.size() && events[e + 1].t_s == ev.t_s) continue;  // the same instant
    ++m.checks;
    m.min_slack_w = std::min(m.min_slack_w, allowed_w - sum_w);
    if (sum_w > allowed_w + tolerance_w) ++m.violations;
  }
  for (size_t i = 0; i < agents.size(); ++i) {
    m.fenced_total_s += fenced_s[i];
    m.local_total_s += local_s[i];
  }
  return m;
}

// Summed over the groups: checks, violations, least slack, time fenced or local.
inline Invariant AddInvariants(const std::vector<Invariant>& each) {
  Invariant m;
  for (const Invariant& v : each) {
    m.violations += v.violations;
    m.checks += v.checks;
    m.min_slack_w = std::min(m.min_slack_w, v.min_slack_w);
    m.fenced_total_s += v.fenced_total_s;
    m.local_total_s += v.local_total_s;
  }
  return m;
}

// ---- The bench's own reads of the site (probe.h), part by part ----

struct ProbeSummary {
  std::vector<double> raw, get, values, plan, get_cpu, values_cpu, plan_cpu;
  size_t keys = 0, bytes = 0;  // the last read's
};

inline ProbeSummary SummarizeProbes(const std::vector<Probe>& probes) {
  ProbeSummary m;
  for (const Probe& p : probes) {
    m.raw.push_back(p.raw_range_s);
    m.get.push_back(p.store_get_s);
    m.values.push_back(p.values_s);
    m.plan.push_back(p.plan_s);
    m.get_cpu.push_back(p.store_get_cpu_s);
    m.values_cpu.push_back(p.values_cpu_s);
    m.plan_cpu.push_back(p.plan_cpu_s);
    m.keys = p.keys;
    m.bytes = p.bytes;
  }
  return m;
}

// ---- All of it ----

struct Measured {
  AgentCalls agents;
  CoordinatorPeriod period;
  GrantRoundTrips round_trips;
  Invariant invariant;                // over every group
  std::vector<Invariant> invariants;  // per group (per domain, with --domains)
  json status;  // the coordinator's own account (null: no answer, or not JSON)
  ProbeSummary probe;

  // A number from `status`; NaN when absent.
  double StatusNum(const char* key) const {
    return status.is_object() && status.contains(key) && status[key].is_number()
               ? status[key].get<double>()
               : std::nan("");
  }
  bool InvariantBroken() const {
    return invariant.violations > 0 || StatusNum("invariant_refusals") > 0;
  }
};

// `groups`: every agent in one, with its site's ledger (one level: p.ledgers).
inline Measured Measure(const SteadyPhase& p, const std::vector<SimAgent>& agents,
                        const std::vector<std::unique_ptr<Worker>>& workers,
                        const std::vector<AgentGroup>& groups) {
  Measured m;
  m.agents = MeasureAgentCalls(p, workers);
  m.period = MeasurePeriod(p);
  m.round_trips = MeasureRoundTrips(p, agents, groups);
  for (const AgentGroup& g : groups) m.invariants.push_back(CheckInvariant(p, agents, g));
  m.invariant = AddInvariants(m.invariants);
  m.status = p.status_text ? json::parse(*p.status_text, nullptr, false) : json(nullptr);
  m.probe = SummarizeProbes(p.probes);
  return m;
}

}  // namespace headroom::bench
