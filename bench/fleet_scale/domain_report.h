// headroom_fleet_scale with --domains: what is measured only with two levels, and its part of the
// report (bench/fleet_scale.cc reads top to bottom; this is one part, after measure.h and
// report.h, which measure and report the site level and every agent's round trips):
//   - the invariant at the site: at every write of the site's ledger (on the parent etcd), the
//     sum over its jobs (the domains) of what they hold, and any standby, <= the site budget in
//     force - reserve;
//   - across the levels, independently of either coordinator: at every ledger write seen at
//     either level, the sum over domains of their budget in force (their own ledgers) <= the
//     site's budget in force - reserve (the site's ledger), and each domain's budget in force
//     <= what the site's ledger has it hold;
//   - per change, when the domains' ledgers took their new grant as target, had it in force,
//     and (a cut) when the site's ledger had each domain hold less: the latest domain's;
//   - per domain: its etcd's requests, its coordinator's and etcd's CPU, its ledger's writes,
//     its place under the site at the end (its /v1/status "parent").
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/fleet_scale/ledger_watcher.h"
#include "bench/fleet_scale/measure.h"
#include "bench/fleet_scale/options.h"
#include "bench/fleet_scale/report.h"
#include "bench/fleet_scale/system.h"

namespace headroom::bench {

inline constexpr double kLevelTolW = 1e-3;  // watts, per domain: rounding in the ledgers' JSON

// What the phase recorded at each level: the site's (its coordinator and the parent etcd; the
// changes, the agents' side) and each domain's (its coordinator, etcd, ledger; the same times).
struct TwoLevelPhase {
  SteadyPhase site;
  std::vector<SteadyPhase> domains;
  std::vector<std::string> names;  // the domains' (their job names at the site)
  std::vector<size_t> agents;      // in each domain
  std::vector<double> start_budget_w;
};

struct LevelCheck {
  uint64_t checks = 0, violations = 0;
  double min_slack_w = INFINITY;

  void Check(double allowed_w, double sum_w, double tolerance_w) {
    ++checks;
    min_slack_w = std::min(min_slack_w, allowed_w - sum_w);
    if (sum_w > allowed_w + tolerance_w) ++violations;
  }
};

// Per change: the latest domain's times after the POST (NaN: some domain never did).
struct DomainsChange {
  double target_s = std::nan("");    // its ledger's target moved
  double in_force_s = std::nan("");  // its budget in force is that target
  double acked_s = std::nan("");     // a cut: the site's ledger has it hold less
};

struct TwoLevelMeasured {
  LevelCheck site;          // the site's ledger: sum held <= budget - reserve
  LevelCheck across;        // sum of the domains' budgets <= the site's budget - reserve
  uint64_t above_held = 0;  // a domain's budget in force above what the site has it hold
  std::vector<DomainsChange> changes;
  std::vector<json> domain_status;  // each domain coordinator's /v1/status at the end

  bool Broken() const {
    if (site.violations > 0 || across.violations > 0 || above_held > 0) return true;
    for (const json& s : domain_status) {
      if (s.is_object() && s.value("invariant_refusals", 0.0) > 0) return true;
    }
    return false;
  }
};

inline double HeldAt(const coord::Ledger& l, const std::string& job) {
  const auto j = l.jobs.find(job);
  return j == l.jobs.end() ? 0.0 : j->second.held_w;
}

inline void CheckSiteLedger(const SteadyPhase& site, TwoLevelMeasured* m) {
  for (const LedgerSeen& l : site.ledgers) {
    if (!site.InPhase(l.t_s)) continue;
    m->site.Check(l.ledger.site_budget_w - l.ledger.reserve_w, l.ledger.HeldW(),
                  kLevelTolW * static_cast<double>(l.ledger.jobs.size() + 1));
  }
}

// Across the levels, at every ledger write seen (watched) at either. A domain whose budget went
// up acts on a grant, so the site's ledger holding that grant was written (the site's
// coordinator writes a grant only with or after its ledger): the site's ledger is taken to be
// at least that one, even when its watch delivers it after the domain's (CheckInvariant's
// argument one level up).
inline void CheckAcrossLevels(const TwoLevelPhase& t, TwoLevelMeasured* m) {
  struct Event {
    double t_s;
    int domain;  // -1: the site's ledger
    size_t index;
  };
  std::vector<Event> events;
  const std::vector<LedgerSeen>& site = t.site.ledgers;
  for (size_t k = 0; k < site.size(); ++k) events.push_back({site[k].t_s, -1, k});
  for (size_t d = 0; d < t.domains.size(); ++d) {
    for (size_t k = 0; k < t.domains[d].ledgers.size(); ++k) {
      events.push_back({t.domains[d].ledgers[k].t_s, static_cast<int>(d), k});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.t_s < b.t_s || (a.t_s == b.t_s && a.domain < b.domain);
  });
  std::vector<double> budget_w(t.domains.size(), std::nan(""));
  size_t at = 0;  // the site's ledgers taken so far
  const double tolerance_w = kLevelTolW * static_cast<double>(t.domains.size() + 1);
  for (size_t e = 0; e < events.size(); ++e) {
    const Event& ev = events[e];
    if (ev.domain < 0) {
      at = std::max(at, ev.index + 1);
    } else {
      const auto d = static_cast<size_t>(ev.domain);
      budget_w[d] = t.domains[d].ledgers[ev.index].ledger.site_budget_w;
      for (size_t k = at == 0 ? 0 : at - 1; k < site.size(); ++k) {
        if (HeldAt(site[k].ledger, t.names[d]) >= budget_w[d] - kLevelTolW) {
          at = std::max(at, k + 1);
          break;
        }
      }
    }
    if (at == 0 || !t.site.InPhase(ev.t_s)) continue;
    if (e + 1 < events.size() && events[e + 1].t_s == ev.t_s) continue;  // the same instant
    const coord::Ledger& l = site[at - 1].ledger;
    double sum_w = 0;
    bool all_seen = true;
    for (size_t d = 0; d < budget_w.size(); ++d) {
      all_seen = all_seen && !std::isnan(budget_w[d]);
      sum_w += std::isnan(budget_w[d]) ? 0.0 : budget_w[d];
      if (budget_w[d] > HeldAt(l, t.names[d]) + kLevelTolW) ++m->above_held;
    }
    if (all_seen) m->across.Check(l.site_budget_w - l.reserve_w, sum_w, tolerance_w);
  }
}

// One domain's part of one change into `out` (the latest domain's time is kept).
inline void MeasureDomainChange(const TwoLevelPhase& t, size_t d, double t0, double t1, bool cut,
                                DomainsChange* out, bool* all_target, bool* all_in_force,
                                bool* all_acked) {
  const std::vector<LedgerSeen>& ledgers = t.domains[d].ledgers;
  const LedgerSeen* before = nullptr;
  for (const LedgerSeen& l : ledgers) {
    if (l.t_s < t0) before = &l;
  }
  double target_s = std::nan(""), in_force_s = std::nan(""), acked_s = std::nan("");
  for (const LedgerSeen& l : ledgers) {
    if (l.t_s < t0 || l.t_s >= t1 || before == nullptr) continue;
    const double target_w = l.ledger.target_site_budget_w;
    if (std::isnan(target_s) &&
        std::abs(target_w - before->ledger.target_site_budget_w) > kLevelTolW) {
      target_s = l.t_s - t0;
    }
    if (!std::isnan(target_s) && std::isnan(in_force_s) &&
        std::abs(l.ledger.site_budget_w - target_w) <= kLevelTolW) {
      in_force_s = l.t_s - t0;
    }
  }
  const LedgerSeen* site_before = nullptr;
  for (const LedgerSeen& l : t.site.ledgers) {
    if (l.t_s < t0) site_before = &l;
    if (!cut || site_before == nullptr || l.t_s < t0 || l.t_s >= t1) continue;
    if (HeldAt(l.ledger, t.names[d]) < HeldAt(site_before->ledger, t.names[d]) - kLevelTolW) {
      acked_s = l.t_s - t0;
      break;
    }
  }
  const auto latest = [](double v, double* into, bool* all) {
    if (std::isnan(v)) *all = false;
    if (*all) *into = std::isnan(*into) ? v : std::max(*into, v);
  };
  latest(target_s, &out->target_s, all_target);
  latest(in_force_s, &out->in_force_s, all_in_force);
  if (cut) latest(acked_s, &out->acked_s, all_acked);
}

inline TwoLevelMeasured MeasureTwoLevels(const TwoLevelPhase& t) {
  TwoLevelMeasured m;
  CheckSiteLedger(t.site, &m);
  CheckAcrossLevels(t, &m);
  const std::vector<SiteBudgetChange>& changes = t.site.changes;
  for (size_t c = 0; c < changes.size(); ++c) {
    const double t0 = changes[c].t_s;
    const double t1 = c + 1 < changes.size() ? changes[c + 1].t_s : t.site.phase_measured_end_s;
    DomainsChange out;
    bool all_target = true, all_in_force = true, all_acked = true;
    for (size_t d = 0; d < t.domains.size(); ++d) {
      MeasureDomainChange(t, d, t0, t1, changes[c].lower, &out, &all_target, &all_in_force,
                          &all_acked);
    }
    if (!all_target) out.target_s = std::nan("");
    if (!all_in_force) out.in_force_s = std::nan("");
    if (!all_acked) out.acked_s = std::nan("");
    m.changes.push_back(out);
  }
  for (const SteadyPhase& p : t.domains) {
    m.domain_status.push_back(p.status_text ? json::parse(*p.status_text, nullptr, false)
                                            : json(nullptr));
  }
  return m;
}

// ---- The JSON: "two_levels" ----

inline json LevelCheckJson(const LevelCheck& c) {
  return {{"checks", c.checks}, {"violations", c.violations}, {"min_slack_w", Num(c.min_slack_w)}};
}

// Summed over the domains' etcds, with the site's (the parent's): gRPC calls in the phase.
inline double AllEtcdRequests(const TwoLevelPhase& t) {
  double n = FiguresOf(t.site).etcd_requests;
  for (const SteadyPhase& p : t.domains) n += FiguresOf(p).etcd_requests;
  return n;
}

inline json DomainJson(const TwoLevelPhase& t, const Measured& agents_m, const TwoLevelMeasured& m,
                       size_t d) {
  const SteadyPhase& p = t.domains[d];
  const Figures f = FiguresOf(p);
  const json& s = m.domain_status[d];
  const Invariant& inv = agents_m.invariants[d];
  const auto num = [&](const char* key) {
    return s.is_object() && s.contains(key) && s[key].is_number() ? s[key].get<double>()
                                                                  : std::nan("");
  };
  return {{"name", t.names[d]},
          {"agents", t.agents[d]},
          {"start_budget_w", t.start_budget_w[d]},
          {"site_budget_w_at_end", Num(num("site_budget_w"))},
          {"parent", s.is_object() && s.contains("parent") ? s["parent"] : json(nullptr)},
          {"ledger_writes", p.ledgers.size()},
          {"etcd_requests_per_s", f.etcd_requests / p.phase_s},
          {"etcd_cpu_pct_of_one_core", f.etcd_cpu_pct},
          {"coordinator_cpu_pct_of_one_core", f.coord_cpu_pct},
          {"coordinator_rss_mib", p.coord_rss_mib},
          {"coordinator_ran_to_the_end", p.coordinator_ran},
          {"invariant_refusals", Num(num("invariant_refusals"))},
          {"invariant",
           {{"checks", inv.checks},
            {"violations", inv.violations},
            {"min_slack_w", Num(inv.min_slack_w)}}},
          {"watch_errors", p.watch_errors}};
}

inline json TwoLevelJson(const Options& o, const TwoLevelPhase& t, const Measured& agents_m,
                         const TwoLevelMeasured& m) {
  const double phase_s = t.site.phase_s;
  double domains_etcd_cpu_pct = 0, domains_coord_cpu_pct = 0, domain_requests = 0;
  json per_domain = json::array();
  for (size_t d = 0; d < t.domains.size(); ++d) {
    const Figures f = FiguresOf(t.domains[d]);
    domains_etcd_cpu_pct += f.etcd_cpu_pct;
    domains_coord_cpu_pct += f.coord_cpu_pct;
    domain_requests += f.etcd_requests;
    per_domain.push_back(DomainJson(t, agents_m, m, d));
  }
  json changes = json::array();
  for (size_t c = 0; c < m.changes.size(); ++c) {
    changes.push_back({{"t_s", t.site.changes[c].t_s - t.site.phase_begin_s},
                       {"lower", t.site.changes[c].lower},
                       {"domains_target_s", Num(m.changes[c].target_s)},
                       {"domains_in_force_s", Num(m.changes[c].in_force_s)},
                       {"domains_acked_s", Num(m.changes[c].acked_s)}});
  }
  const Figures site_f = FiguresOf(t.site);
  const double all_requests = AllEtcdRequests(t);
  return {{"domains", o.domains},
          {"etcd",
           {{"requests_per_s", all_requests / phase_s},
            {"requests_per_agent_per_s", all_requests / phase_s / o.agents},
            {"site_requests_per_s", site_f.etcd_requests / phase_s},
            {"domains_requests_per_s", domain_requests / phase_s},
            {"cpu_pct_of_one_core", site_f.etcd_cpu_pct + domains_etcd_cpu_pct}}},
          {"coordinators_cpu_pct_of_one_core",
           {{"site", site_f.coord_cpu_pct}, {"domains", domains_coord_cpu_pct}}},
          {"invariant",
           {{"domains", LevelCheckJson({agents_m.invariant.checks, agents_m.invariant.violations,
                                        agents_m.invariant.min_slack_w})},
            {"site", LevelCheckJson(m.site)},
            {"across", LevelCheckJson(m.across)},
            {"above_held", m.above_held}}},
          {"changes", changes},
          {"per_domain", per_domain}};
}

// ---- The table: the domains' rows, after the site's ----

inline void PrintTwoLevelRows(const Options& o, const TwoLevelPhase& t, const Measured& agents_m,
                              const TwoLevelMeasured& m) {
  const double phase_s = t.site.phase_s;
  const auto row = TableRow;
  fmt::print(
      "\n| {} domains under the site, {} agents, each domain on an etcd of its own | |\n"
      "|---|---|\n",
      o.domains, o.agents);
  for (size_t c = 0; c < m.changes.size(); ++c) {
    const SiteBudgetChange& change = t.site.changes[c];
    row(fmt::format("  change {} ({} to {:.0f} W): domains' target / in force{}", c + 1,
                    change.lower ? "down" : "up", change.site_budget_w,
                    change.lower ? " / held less at the site" : ""),
        fmt::format("{:.2f} / {:.2f}{} s (the latest domain's)", m.changes[c].target_s,
                    m.changes[c].in_force_s,
                    change.lower ? fmt::format(" / {:.2f}", m.changes[c].acked_s) : ""));
  }
  double domain_requests = 0, etcd_cpu = FiguresOf(t.site).etcd_cpu_pct, coord_cpu = 0;
  for (const SteadyPhase& p : t.domains) {
    const Figures f = FiguresOf(p);
    domain_requests += f.etcd_requests;
    etcd_cpu += f.etcd_cpu_pct;
    coord_cpu += f.coord_cpu_pct;
  }
  const double all_requests = AllEtcdRequests(t);
  row("etcd requests/s, every etcd: the site's + the domains'; per agent",
      fmt::format("{:.0f}: {:.0f} + {:.0f}; {:.2f}", all_requests / phase_s,
                  FiguresOf(t.site).etcd_requests / phase_s, domain_requests / phase_s,
                  all_requests / phase_s / o.agents));
  row("CPU, % of one core: site coordinator / domain coordinators / every etcd",
      fmt::format("{:.1f} / {:.1f} / {:.1f}", FiguresOf(t.site).coord_cpu_pct, coord_cpu,
                  etcd_cpu));
  row("invariant, each domain: Σ its agents acting ≤ its budget in force − reserve",
      fmt::format("{} violations in {} checks (least slack {:.1f} W)",
                  agents_m.invariant.violations, agents_m.invariant.checks,
                  agents_m.invariant.min_slack_w));
  row("invariant, the site's ledger: Σ domains held ≤ site budget − reserve",
      fmt::format("{} violations in {} checks (least slack {:.1f} W)", m.site.violations,
                  m.site.checks, m.site.min_slack_w));
  row("invariant across: Σ domains' budgets in force ≤ site's − reserve; each ≤ its held",
      fmt::format("{} violations in {} checks (least slack {:.1f} W); {} above held",
                  m.across.violations, m.across.checks, m.across.min_slack_w, m.above_held));
  for (size_t d = 0; d < t.domains.size(); ++d) {
    const SteadyPhase& p = t.domains[d];
    const Figures f = FiguresOf(p);
    const json& s = m.domain_status[d];
    const json parent = s.is_object() && s.contains("parent") ? s["parent"] : json(nullptr);
    row(fmt::format("  {} ({} agents)", t.names[d], t.agents[d]),
        fmt::format("budget at the end {:.0f} W, {} at the site (acks {}, fences {}); {} ledger "
                    "writes; etcd {:.0f} requests/s; CPU coordinator {:.1f} / etcd {:.1f} %",
                    s.is_object() && s["site_budget_w"].is_number()
                        ? s["site_budget_w"].get<double>()
                        : NAN,
                    parent.is_object() ? parent.value("state", "?") : "?",
                    parent.is_object() ? parent.value("acks", 0) : 0,
                    parent.is_object() ? parent.value("fences", 0) : 0, p.ledgers.size(),
                    f.etcd_requests / phase_s, f.coord_cpu_pct, f.etcd_cpu_pct));
  }
}

}  // namespace headroom::bench
