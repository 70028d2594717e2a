// headroom_fleet_scale's report: the JSON (--json) and the table on stdout, from what the steady
// phase recorded and what was measured from it (bench/fleet_scale.cc reads top to bottom; this is
// one part).
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
#include "bench/fleet_scale/measure.h"
#include "bench/fleet_scale/options.h"
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

inline constexpr double kMsPerS = 1e3;

// ---- The site as set up ----

struct SiteSetUp {
  double floors_w = 0, demands_w = 0;  // summed over the agents
  double high_w = 0, low_w = 0;        // the site budgets (the first is the start's)
  double registered_after_s = 0;       // every agent registered, after the first step
  double admitted_after_s = 0;         // every agent granted, after the coordinator started
};

// ---- Figures both the JSON and the table show ----

// An etcd metric's growth over the phase (0 where absent).
inline double EtcdDelta(const SteadyPhase& p, const std::string& name) {
  const auto a = p.etcd_after.find(name);
  const auto b = p.etcd_before.find(name);
  return (a == p.etcd_after.end() ? 0.0 : a->second) - (b == p.etcd_before.end() ? 0.0 : b->second);
}

struct Figures {
  double coord_cpu_pct = 0, etcd_cpu_pct = 0, self_cpu_pct = 0;  // % of one core
  double machine_busy_pct = 0;                                   // % of one core
  double machine_cores = 0;
  double etcd_requests = 0;  // gRPC calls in the phase
  double fsyncs = 0;         // etcd's WAL's, in the phase
};

inline Figures FiguresOf(const SteadyPhase& p) {
  const auto delta = [&](const std::string& name) { return EtcdDelta(p, name); };
  Figures f;
  f.coord_cpu_pct = 100.0 * p.coord_cpu_s / p.phase_s;
  f.etcd_cpu_pct = 100.0 * p.etcd_cpu_s / p.phase_s;
  f.self_cpu_pct = 100.0 * p.self_cpu_s / p.phase_s;
  f.machine_busy_pct = 100.0 * p.machine_busy_s / p.phase_s;
  f.machine_cores = p.machine_total_s / p.phase_s;
  f.etcd_requests = delta("grpc:Range") + delta("grpc:Put") + delta("grpc:Txn") +
                    delta("grpc:DeleteRange") + delta("grpc:LeaseGrant") +
                    delta("grpc:LeaseKeepAlive") + delta("grpc:LeaseRevoke") + delta("grpc:Watch");
  f.fsyncs = delta("etcd_disk_wal_fsync_duration_seconds_count");
  return f;
}

// ---- The JSON ----

inline json CoordinatorJson(const SteadyPhase& p, const Measured& m, const Figures& f) {
  const CoordinatorPeriod& period = m.period;
  const json& status = m.status;
  const auto status_num = [&](const char* key) { return m.StatusNum(key); };
  const auto per_s = [&](double n) { return n / p.phase_s; };
  return {{"periods", period.periods},
          {"periods_expected", period.periods_expected},
          {"period_held", period.period_held},
          {"period_p50_s", Num(NearestRank(period.period_gaps_s, 0.5))},
          {"period_p99_s", Num(NearestRank(period.period_gaps_s, 0.99))},
          {"period_max_s", Num(period.longest_gap_s)},
          {"site_reads", period.read_s.size()},
          {"site_read_p50_s", Num(NearestRank(period.read_s, 0.5))},
          {"site_read_p99_s", Num(NearestRank(period.read_s, 0.99))},
          {"site_read_max_s", Num(NearestRank(period.read_s, 1.0))},
          {"txns", period.txn_s.size()},
          {"txn_p50_s", Num(NearestRank(period.txn_s, 0.5))},
          {"txn_max_s", Num(NearestRank(period.txn_s, 1.0))},
          {"ledger_writes", period.write_times_s.size()},
          {"ledger_writes_per_s", per_s(static_cast<double>(period.write_times_s.size()))},
          {"chain_gaps_s", period.chain_gaps_s},
          {"chain_gap_p50_s", Num(NearestRank(period.chain_gaps_s, 0.5))},
          {"chain_gap_max_s", Num(NearestRank(period.chain_gaps_s, 1.0))},
          {"cpu_pct_of_one_core", f.coord_cpu_pct},
          {"rss_mib", p.coord_rss_mib},
          {"hwm_mib", p.coord_hwm_mib},
          {"ran_to_the_end", p.coordinator_ran},
          {"status",
           {{"ledger_writes", Num(status_num("ledger_writes"))},
            {"write_conflicts", Num(status_num("write_conflicts"))},
            {"unknown_outcomes", Num(status_num("unknown_outcomes"))},
            {"invariant_refusals", Num(status_num("invariant_refusals"))},
            {"malformed_values", Num(status_num("malformed_values"))},
            {"txn_latency_p50_s", Num(status_num("txn_latency_p50_s"))},
            {"txn_latency_p99_s", Num(status_num("txn_latency_p99_s"))},
            {"decrease_settle_s", status.is_object() && status.contains("decrease_settle_s")
                                      ? status["decrease_settle_s"]
                                      : json(nullptr)},
            {"last_error", status.is_object() ? status.value("last_error", "") : ""}}}};
}

inline json GrantRoundTripJson(const SteadyPhase& p, const Measured& m) {
  const GrantRoundTrips& trips = m.round_trips;
  json changes_json = json::array();
  for (size_t c = 0; c < p.changes.size(); ++c) {
    const SiteBudgetChange& change = p.changes[c];
    const ChangeResult& r = trips.results[c];
    changes_json.push_back({{"t_s", change.t_s - p.phase_begin_s},
                            {"site_budget_w", change.site_budget_w},
                            {"lower", change.lower},
                            {"http_status", change.status},
                            {"members_with_new_grant", r.first_s.size()},
                            {"members_without", r.no_new_grant},
                            {"first_p50_s", Num(NearestRank(r.first_s, 0.5))},
                            {"first_p99_s", Num(NearestRank(r.first_s, 0.99))},
                            {"first_max_s", Num(NearestRank(r.first_s, 1.0))},
                            {"members_with_lower_grant", r.lower_s.size()},
                            {"members_without_lower", r.no_lower_grant},
                            {"lower_p50_s", Num(NearestRank(r.lower_s, 0.5))},
                            {"lower_p99_s", Num(NearestRank(r.lower_s, 0.99))},
                            {"lower_max_s", Num(NearestRank(r.lower_s, 1.0))},
                            {"asked_s", Num(r.asked_s)},
                            {"first_ledger_write_s", Num(r.first_write_s)},
                            {"ledger_writes", r.ledger_writes},
                            {"ledger_settled_s", Num(r.ledger_settled_s)},
                            {"in_force_s", Num(r.in_force_s)},
                            {"full_reallocation_s", Num(r.full_s)},
                            {"members_unsettled", r.unsettled}});
  }
  json lines_json = json::array();
  for (const auto& l : p.budget_lines) {
    if (p.InPhase(l.t_s)) {
      lines_json.push_back({{"t_s", l.t_s - p.phase_begin_s}, {"line", l.text}});
    }
  }
  return {{"pairs", trips.all_first_s.size()},
          {"p50_s", Num(NearestRank(trips.all_first_s, 0.5))},
          {"p99_s", Num(NearestRank(trips.all_first_s, 0.99))},
          {"max_s", Num(NearestRank(trips.all_first_s, 1.0))},
          {"down_p50_s", Num(NearestRank(trips.down_first_s, 0.5))},
          {"down_p99_s", Num(NearestRank(trips.down_first_s, 0.99))},
          {"up_p50_s", Num(NearestRank(trips.up_first_s, 0.5))},
          {"up_p99_s", Num(NearestRank(trips.up_first_s, 0.99))},
          {"cut_lower_pairs", trips.cut_lower_s.size()},
          {"cut_lower_p50_s", Num(NearestRank(trips.cut_lower_s, 0.5))},
          {"cut_lower_p99_s", Num(NearestRank(trips.cut_lower_s, 0.99))},
          {"cut_lower_max_s", Num(NearestRank(trips.cut_lower_s, 1.0))},
          {"changes", changes_json},
          {"coordinator_budget_lines", lines_json}};
}

inline json EtcdJson(const Options& o, const SteadyPhase& p, const Figures& f) {
  const std::map<std::string, double>& etcd_after = p.etcd_after;
  const auto delta = [&](const std::string& name) { return EtcdDelta(p, name); };
  const auto per_s = [&](double n) { return n / p.phase_s; };
  return {
      {"requests_per_s", per_s(f.etcd_requests)},
      {"requests_per_agent_per_s", per_s(f.etcd_requests) / o.agents},
      {"range_per_s", per_s(delta("grpc:Range"))},
      {"put_per_s", per_s(delta("grpc:Put"))},
      {"txn_per_s", per_s(delta("grpc:Txn"))},
      {"lease_keepalive_per_s", per_s(delta("grpc:LeaseKeepAlive"))},
      // Renewals, one a message: with a stream of keep-alives, more than its calls.
      {"lease_keepalive_messages_per_s", per_s(delta("grpc_msg:LeaseKeepAlive"))},
      // Writes: every revision (a put, a transaction that writes, a delete, a lease's keys
      // going with it), per agent.
      {"writes_per_agent_per_s", per_s(delta("etcd_debugging_mvcc_current_revision")) / o.agents},
      {"lease_grant_per_s", per_s(delta("grpc:LeaseGrant"))},
      {"watch_per_s", per_s(delta("grpc:Watch"))},
      {"mvcc_txn_per_s", per_s(delta("etcd_mvcc_txn_total"))},
      {"mvcc_put_per_s", per_s(delta("etcd_mvcc_put_total"))},
      {"mvcc_range_per_s", per_s(delta("etcd_mvcc_range_total"))},
      {"mvcc_delete_per_s", per_s(delta("etcd_mvcc_delete_total"))},
      {"proposals_committed_per_s", per_s(delta("etcd_server_proposals_committed_total"))},
      {"wal_fsyncs_per_s", per_s(f.fsyncs)},
      {"wal_fsync_mean_ms",
       Num(f.fsyncs > 0 ? kMsPerS * delta("etcd_disk_wal_fsync_duration_seconds_sum") / f.fsyncs
                        : NAN)},
      {"keys", Num(etcd_after.contains("etcd_debugging_mvcc_keys_total")
                       ? etcd_after.at("etcd_debugging_mvcc_keys_total")
                       : NAN)},
      {"revisions_per_s", per_s(delta("etcd_debugging_mvcc_current_revision"))},
      {"db_mib", Num(etcd_after.contains("etcd_mvcc_db_total_size_in_bytes")
                         ? etcd_after.at("etcd_mvcc_db_total_size_in_bytes") / 1048576.0
                         : NAN)},
      {"db_growth_mib_per_min",
       60.0 * per_s(delta("etcd_mvcc_db_total_size_in_bytes")) / 1048576.0},
      {"cpu_pct_of_one_core", f.etcd_cpu_pct},
      {"rss_mib", p.etcd_rss_mib},
      {"hwm_mib", p.etcd_hwm_mib}};
}

inline json AgentsSideJson(const Options& o, const SteadyPhase& p, const Measured& m,
                           const Figures& f) {
  const AgentCalls& calls = m.agents;
  const double phase_s = p.phase_s;
  const auto per_s = [&](double n) { return n / phase_s; };
  return {{"member_steps_per_s", per_s(static_cast<double>(calls.member_steps))},
          {"steps_per_member_per_s", per_s(static_cast<double>(calls.member_steps)) / o.agents},
          {"requests_per_s", per_s(static_cast<double>(calls.all_latency_s.size()))},
          {"get_per_s", per_s(static_cast<double>(calls.calls(CallRecord::kGet)))},
          {"put_per_s", per_s(static_cast<double>(calls.calls(CallRecord::kPut)))},
          {"keepalive_per_s", per_s(static_cast<double>(calls.calls(CallRecord::kKeepAlive)))},
          {"watch_streams_per_s", per_s(static_cast<double>(p.phase_follows))},
          {"grants_watched", p.phase_grants_watched},
          {"txn", calls.calls(CallRecord::kTxn)},
          {"lease_grants", calls.calls(CallRecord::kLeaseGrant)},
          {"errors", calls.bench_errors},
          {"get_latency_p50_ms", Num(kMsPerS * NearestRank(calls.get_latency_s, 0.5))},
          {"get_latency_p99_ms", Num(kMsPerS * NearestRank(calls.get_latency_s, 0.99))},
          {"request_latency_p99_ms", Num(kMsPerS * NearestRank(calls.all_latency_s, 0.99))},
          {"round_p50_s", Num(NearestRank(calls.round_s, 0.5))},
          {"round_p99_s", Num(NearestRank(calls.round_s, 0.99))},
          {"skipped_ticks", calls.skipped_ticks},
          {"fenced_fraction", m.invariant.fenced_total_s / (phase_s * o.agents)},
          {"local_fraction", m.invariant.local_total_s / (phase_s * o.agents)},
          {"bench_cpu_pct_of_one_core", f.self_cpu_pct}};
}

// The whole JSON; the coordinator's log is named only when the invariant was broken (the log is
// kept only then).
inline json ReportJson(const Options& o, const SiteSetUp& site, const SteadyPhase& p,
                       const Measured& m, const std::string& log_path) {
  const Figures f = FiguresOf(p);
  const ProbeSummary& probe = m.probe;
  json out;
  out["agents"] = o.agents;
  out["stores"] = o.stores;
  out["grant"] = o.watch ? "watched" : "polled";
  out["step_s"] = o.step_s;
  out["period_s"] = kPeriodS;
  out["phase_s"] = p.phase_s;
  out["site_budget_w"] = {{"high", site.high_w},
                          {"low", site.low_w},
                          {"floors", site.floors_w},
                          {"demand", site.demands_w}};
  out["registered_after_s"] = site.registered_after_s;
  out["admitted_after_s"] = site.admitted_after_s;
  out["coordinator"] = CoordinatorJson(p, m, f);
  out["grant_round_trip"] = GrantRoundTripJson(p, m);
  out["etcd"] = EtcdJson(o, p, f);
  out["agents_side"] = AgentsSideJson(o, p, m, f);
  out["probe"] = {{"count", p.probes.size()},
                  {"failures", p.probe_failures},
                  {"keys", probe.keys},
                  {"answer_bytes", probe.bytes},
                  {"range_p50_ms", Num(kMsPerS * NearestRank(probe.raw, 0.5))},
                  {"store_get_p50_ms", Num(kMsPerS * NearestRank(probe.get, 0.5))},
                  {"values_p50_ms", Num(kMsPerS * NearestRank(probe.values, 0.5))},
                  {"plan_p50_ms", Num(kMsPerS * NearestRank(probe.plan, 0.5))},
                  {"store_get_cpu_p50_ms", Num(kMsPerS * NearestRank(probe.get_cpu, 0.5))},
                  {"values_cpu_p50_ms", Num(kMsPerS * NearestRank(probe.values_cpu, 0.5))},
                  {"plan_cpu_p50_ms", Num(kMsPerS * NearestRank(probe.plan_cpu, 0.5))}};
  out["machine"] = {{"cores", f.machine_cores},
                    {"busy_pct_of_one_core", f.machine_busy_pct},
                    {"other_pct_of_one_core",
                     f.machine_busy_pct - f.coord_cpu_pct - f.etcd_cpu_pct - f.self_cpu_pct}};
  out["invariant"] = {{"checks", m.invariant.checks},
                      {"violations", m.invariant.violations},
                      {"min_slack_w", Num(m.invariant.min_slack_w)},
                      {"watch_errors", p.watch_errors}};
  out["coordinator_log"] = m.InvariantBroken() ? json(log_path) : json(nullptr);  // kept only then
  return out;
}

// ---- The table ----

inline void TableRow(std::string_view what, const std::string& value) {
  fmt::print("| {} | {} |\n", what, value);
}

// The coordinator's periods and writes, and the grants' round trips.
inline void PrintCoordinatorRows(const SteadyPhase& p, const Measured& m) {
  const CoordinatorPeriod& period = m.period;
  const GrantRoundTrips& trips = m.round_trips;
  const double phase_s = p.phase_s;
  const auto per_s = [&](double n) { return n / phase_s; };
  const auto row = TableRow;
  row("coordinator periods (its status; before issue 55 its reads of the site)",
      fmt::format("{:.0f} in {:.1f} s, reads of the site apart p50 {:.3f} / p99 {:.3f} / max "
                  "{:.3f} s: {}",
                  period.periods, phase_s, NearestRank(period.period_gaps_s, 0.5),
                  NearestRank(period.period_gaps_s, 0.99), period.longest_gap_s,
                  period.period_held ? "1 s period held" : "1 s period NOT held"));
  row("coordinator's reads of the whole site: how many; answered in p50 / p99 / max",
      fmt::format("{}; {:.1f} / {:.1f} / {:.1f} ms", period.read_s.size(),
                  kMsPerS * NearestRank(period.read_s, 0.5),
                  kMsPerS * NearestRank(period.read_s, 0.99),
                  kMsPerS * NearestRank(period.read_s, 1.0)));
  row("ledger writes",
      fmt::format("{} ({:.2f}/s); between writes of one change p50 {:.2f} s, max "
                  "{:.2f} s",
                  period.write_times_s.size(),
                  per_s(static_cast<double>(period.write_times_s.size())),
                  NearestRank(period.chain_gaps_s, 0.5), NearestRank(period.chain_gaps_s, 1.0)));
  row("grant round trip p50 / p99 / max",
      fmt::format("{:.2f} / {:.2f} / {:.2f} s ({} member-changes)",
                  NearestRank(trips.all_first_s, 0.5), NearestRank(trips.all_first_s, 0.99),
                  NearestRank(trips.all_first_s, 1.0), trips.all_first_s.size()));
  row("  down / up p50", fmt::format("{:.2f} / {:.2f} s", NearestRank(trips.down_first_s, 0.5),
                                     NearestRank(trips.up_first_s, 0.5)));
  size_t without_lower = 0;
  for (const ChangeResult& r : trips.results) without_lower += r.no_lower_grant;
  row("cut round trip: POST → acting on a lower grant, p50 / p99 / max",
      fmt::format("{:.2f} / {:.2f} / {:.2f} s ({} member-cuts; {} without a lower grant)",
                  NearestRank(trips.cut_lower_s, 0.5), NearestRank(trips.cut_lower_s, 0.99),
                  NearestRank(trips.cut_lower_s, 1.0), trips.cut_lower_s.size(), without_lower));
  for (size_t c = 0; c < p.changes.size(); ++c) {
    const ChangeResult& r = trips.results[c];
    row(fmt::format("  change {} ({} to {:.0f} W)", c + 1, p.changes[c].lower ? "down" : "up",
                    p.changes[c].site_budget_w),
        fmt::format("target written {:.2f} s, first ledger write {:.2f} s, {} writes, in force "
                    "{:.2f} s, full reallocation {:.2f} s{}{}",
                    r.asked_s, r.first_write_s, r.ledger_writes, r.in_force_s, r.full_s,
                    p.changes[c].lower
                        ? fmt::format(", acting lower p50 / max {:.2f} / {:.2f} s",
                                      NearestRank(r.lower_s, 0.5), NearestRank(r.lower_s, 1.0))
                        : std::string(),
                    r.unsettled > 0 || r.no_new_grant > 0
                        ? fmt::format(" ({} unsettled, {} without a new grant)", r.unsettled,
                                      r.no_new_grant)
                        : std::string()));
  }
}

// What etcd and the machine carried, the site's read as the leader reads it, and the agents.
inline void PrintLoadRows(const Options& o, const SteadyPhase& p, const Measured& m) {
  const Figures f = FiguresOf(p);
  const AgentCalls& calls = m.agents;
  const ProbeSummary& probe = m.probe;
  const Invariant& inv = m.invariant;
  const double phase_s = p.phase_s;
  const auto delta = [&](const std::string& name) { return EtcdDelta(p, name); };
  const auto per_s = [&](double n) { return n / phase_s; };
  const auto row = TableRow;
  row("etcd requests/s (gRPC calls); per agent",
      fmt::format("{:.0f}: range {:.0f}, put {:.0f}, txn {:.1f}, keepalive {:.0f}, watch {:.1f}; "
                  "{:.2f}",
                  per_s(f.etcd_requests), per_s(delta("grpc:Range")), per_s(delta("grpc:Put")),
                  per_s(delta("grpc:Txn")), per_s(delta("grpc:LeaseKeepAlive")),
                  per_s(delta("grpc:Watch")), per_s(f.etcd_requests) / o.agents));
  row("etcd keep-alive messages/s; writes (revisions) per agent per s",
      fmt::format("{:.0f}; {:.3f}", per_s(delta("grpc_msg:LeaseKeepAlive")),
                  per_s(delta("etcd_debugging_mvcc_current_revision")) / o.agents));
  row("agents: watch streams made /s; grants the watch brought",
      fmt::format("{:.1f}; {}", per_s(static_cast<double>(p.phase_follows)),
                  p.phase_grants_watched));
  row("etcd mvcc txn / put / range per s",
      fmt::format("{:.1f} / {:.0f} / {:.0f}", per_s(delta("etcd_mvcc_txn_total")),
                  per_s(delta("etcd_mvcc_put_total")), per_s(delta("etcd_mvcc_range_total"))));
  row("etcd revisions/s; its database (no compaction)",
      fmt::format("{:.0f}; {:.1f} MiB, growing {:.1f} MiB/min",
                  per_s(delta("etcd_debugging_mvcc_current_revision")),
                  p.etcd_after.contains("etcd_mvcc_db_total_size_in_bytes")
                      ? p.etcd_after.at("etcd_mvcc_db_total_size_in_bytes") / 1048576.0
                      : NAN,
                  60.0 * per_s(delta("etcd_mvcc_db_total_size_in_bytes")) / 1048576.0));
  row("etcd WAL fsyncs/s (mean)",
      fmt::format("{:.0f} ({:.2f} ms)", per_s(f.fsyncs),
                  f.fsyncs > 0
                      ? kMsPerS * delta("etcd_disk_wal_fsync_duration_seconds_sum") / f.fsyncs
                      : NAN));
  row("CPU, % of one core: coordinator / etcd / bench; the whole machine",
      fmt::format("{:.1f} / {:.1f} / {:.1f}; {:.0f} of {:.0f}", f.coord_cpu_pct, f.etcd_cpu_pct,
                  f.self_cpu_pct, f.machine_busy_pct, 100.0 * f.machine_cores));
  row("coordinator memory: VmRSS / VmHWM",
      fmt::format("{:.1f} / {:.1f} MiB (etcd's: {:.0f} / {:.0f} MiB)", p.coord_rss_mib,
                  p.coord_hwm_mib, p.etcd_rss_mib, p.etcd_hwm_mib));
  row("coordinator txn latency p50 / p99 (its status)",
      fmt::format("{:.1f} / {:.1f} ms", kMsPerS * m.StatusNum("txn_latency_p50_s"),
                  kMsPerS * m.StatusNum("txn_latency_p99_s")));
  row("the site read as the leader reads it (p50, wall): range / EtcdStore::Get / values / plan",
      fmt::format("{:.1f} / {:.1f} / {:.1f} / {:.2f} ms ({} keys, {:.2f} MB)",
                  kMsPerS * NearestRank(probe.raw, 0.5), kMsPerS * NearestRank(probe.get, 0.5),
                  kMsPerS * NearestRank(probe.values, 0.5), kMsPerS * NearestRank(probe.plan, 0.5),
                  probe.keys, static_cast<double>(probe.bytes) / 1e6));
  row("  the same, CPU of the reading thread: EtcdStore::Get / values / plan",
      fmt::format("{:.1f} / {:.1f} / {:.2f} ms", kMsPerS * NearestRank(probe.get_cpu, 0.5),
                  kMsPerS * NearestRank(probe.values_cpu, 0.5),
                  kMsPerS * NearestRank(probe.plan_cpu, 0.5)));
  row("agents: steps per member per s; round p50 / p99; ticks skipped",
      fmt::format("{:.2f}; {:.3f} / {:.3f} s; {}",
                  per_s(static_cast<double>(calls.member_steps)) / o.agents,
                  NearestRank(calls.round_s, 0.5), NearestRank(calls.round_s, 0.99),
                  calls.skipped_ticks));
  row("agents: grant read p50 / p99; errors; time fenced",
      fmt::format("{:.1f} / {:.1f} ms; {}; {:.2f} %",
                  kMsPerS * NearestRank(calls.get_latency_s, 0.5),
                  kMsPerS * NearestRank(calls.get_latency_s, 0.99), calls.bench_errors,
                  100.0 * inv.fenced_total_s / (phase_s * o.agents)));
  row("invariant: Σ acting ≤ budget in force − reserve",
      fmt::format("{} violations in {} checks (least slack {:.1f} W); coordinator refusals {}",
                  inv.violations, inv.checks, inv.min_slack_w, m.StatusNum("invariant_refusals")));
}

// The steady phase's table (docs/PERFORMANCE.md's).
// With --domains, its coordinator and etcd rows are the site's (the parent's), the round trips
// every agent's; domain_report.h adds the domains' rows.
inline void PrintTable(const Options& o, const SteadyPhase& p, const Measured& m) {
  fmt::print("\n| {} agents, {} connections, grants {}, phase {:.0f} s{} | |\n|---|---|\n",
             o.agents, o.stores, o.watch ? "watched" : "polled at every step", p.phase_s,
             o.domains > 0 ? fmt::format(", {} domains under the site (coordinator and etcd rows: "
                                         "the site's, on the parent etcd)",
                                         o.domains)
                           : std::string());
  PrintCoordinatorRows(p, m);
  PrintLoadRows(o, p, m);
}

}  // namespace headroom::bench
