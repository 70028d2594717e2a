#include "coord_server/coordinator_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <nlohmann/json.hpp>

#include "build_info/build_info.h"
#include "common/stats.h"
#include "coord_server/site_page.h"
#include "net/json_body.h"
#include "net/metrics_text.h"
#include "net/query.h"

namespace headroom::coord_server {

using nlohmann::json;

// ---- CoordinatorHost ----

CoordinatorHost::CoordinatorHost(coord::Store& store, coord::CoordinatorConfig config,
                                 std::function<double()> now_s, Logger log, coord::SiteFeed* feed)
    : config_(config),
      coordinator_(store, std::move(config), std::move(now_s), std::move(log), feed) {}

void CoordinatorHost::Step() {
  MutexLock lock(mu_);
  coordinator_.Step();
  MutexLock snapshot(snapshot_mu_);
  snapshot_ = coordinator_.status();
  snapshot_.parent = parent_;
  if (!unix_s_) return;
  const SiteHistoryPoint point = PointOf(snapshot_, unix_s_());
  MutexLock history(history_mu_);
  history_->Add(point);
}

void CoordinatorHost::KeepHistory(std::function<double()> unix_s, double keep_s) {
  MutexLock snapshot(snapshot_mu_);
  unix_s_ = std::move(unix_s);
  MutexLock history(history_mu_);
  history_.emplace(keep_s, config_.period_s);
}

std::string CoordinatorHost::HistoryPage(const SiteHistoryQuery& query) const {
  std::vector<std::shared_ptr<const StoredSitePoint>> points;
  {
    MutexLock history(history_mu_);
    if (history_) points = history_->After(query.after_unix_s, query.limit + 1);
  }
  return SiteHistoryPageJson(points, query, config_.period_s);
}

void CoordinatorHost::SetParent(const coord::ParentStatus& parent) {
  MutexLock snapshot(snapshot_mu_);
  parent_ = parent;
  snapshot_.parent = parent;
}

coord::CoordinatorStatus CoordinatorHost::Snapshot() const {
  MutexLock snapshot(snapshot_mu_);
  return snapshot_;
}

SiteBudgetAnswer CoordinatorHost::RequestTarget(std::optional<double> site_budget_w,
                                                std::optional<double> reserve_w) {
  SiteBudgetAnswer answer;
  {
    MutexLock lock(mu_);
    answer = RequestTargetLocked(site_budget_w, reserve_w);
  }
  if (answer.outcome == SiteBudgetAnswer::Outcome::kAccepted && on_target_) on_target_();
  return answer;
}

SiteBudgetAnswer CoordinatorHost::RequestTargetLocked(std::optional<double> site_budget_w,
                                                      std::optional<double> reserve_w) {
  SiteBudgetAnswer answer;
  if (!coordinator_.leading()) {
    answer.outcome = SiteBudgetAnswer::Outcome::kNotLeader;
    const LeaderInfo leader = ParseLeader(coordinator_.status(), config_);
    if (leader.id.empty() || leader.id == config_.id) {
      answer.message = "this replica is not the leader, and no leader is known yet: try again";
    } else if (leader.listen.empty()) {
      answer.message = fmt::format("this replica is not the leader; {} leads", leader.id);
    } else {
      answer.message = fmt::format("this replica is not the leader; {} leads, at http://{}/",
                                   leader.id, leader.listen);
    }
    return answer;
  }
  auto written = coordinator_.RequestTarget(site_budget_w, reserve_w);
  if (!written) {
    answer.outcome = written.error().kind() == ErrorKind::kUsage
                         ? SiteBudgetAnswer::Outcome::kRefused
                         : SiteBudgetAnswer::Outcome::kUnavailable;
    answer.message = written.error().message();
    return answer;
  }
  answer.outcome = SiteBudgetAnswer::Outcome::kAccepted;
  answer.written = *written;
  return answer;
}

void CoordinatorHost::Resign() {
  MutexLock lock(mu_);
  coordinator_.Resign();
  MutexLock snapshot(snapshot_mu_);
  snapshot_ = coordinator_.status();
  snapshot_.parent = parent_;
}

// ---- Bodies ----

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json OrNull(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// The transactions' latency quantile (nearest rank, common/stats.h); nullopt with none yet.
std::optional<double> TxnLatencyQuantile(const coord::CoordinatorStatus& s, double q) {
  if (s.txn_latency_s.empty()) return std::nullopt;
  std::vector<double> v = s.txn_latency_s;
  return QuantileNearestRank(v, q);
}

std::string LeaseHex(coord::LeaseId lease) {
  return fmt::format("{:x}", static_cast<uint64_t>(lease));
}

bool Leading(const coord::CoordinatorStatus& s) {
  return s.role == "leader" && s.ledger.has_value();
}

double SumGrantsW(const coord::Ledger& l) {
  double sum = 0.0;
  for (const auto& [job, j] : l.jobs) sum += j.grant_w;
  return sum;
}

}  // namespace

LeaderInfo ParseLeader(const coord::CoordinatorStatus& s, const coord::CoordinatorConfig& self) {
  LeaderInfo info;
  if (s.leader.empty()) return info;
  if (s.leader == self.id) return {self.id, self.listen};
  // Another replica's: the leader key's value, {"id": ..., "listen": ...}.
  const json j = json::parse(s.leader, nullptr, false);
  if (j.is_object() && j.contains("id") && j["id"].is_string()) {
    info.id = j["id"].get<std::string>();
    if (j.contains("listen") && j["listen"].is_string())
      info.listen = j["listen"].get<std::string>();
    if (info.id == self.id) info.listen = self.listen;
    return info;
  }
  info.id = s.leader;
  return info;
}

namespace {

// /v1/status `jobs` while leading: the ledger's jobs, then those in its standby, then members
// it has not counted yet.
json JobsJson(const coord::CoordinatorStatus& s, const coord::Ledger& l) {
  json jobs = json::array();
  std::vector<std::string> names;
  for (const auto& [job, lj] : l.jobs) names.push_back(job);
  for (const auto& [job, sb] : l.standby) names.push_back(job);
  for (const auto& [job, m] : s.members) {
    if (!l.jobs.contains(job) && !l.standby.contains(job)) names.push_back(job);
  }
  for (const std::string& name : names) {
    const auto lj = l.jobs.find(name);
    const auto sb = l.standby.find(name);
    const auto m = s.members.find(name);
    const bool admitted = lj != l.jobs.end();
    const bool standby = sb != l.standby.end();
    const bool member = m != s.members.end();
    if (!admitted && !member) {  // a duplicate, or a job in standby whose key is gone
      json o;
      o["job"] = name;
      o["admitted"] = false;
      o["state"] = sb->second.duplicate ? "duplicate" : "standby";
      o["class"] = coord::JobClassName(coord::JobClass::kGuaranteed);
      o["floor_w"] = sb->second.floor_w;
      o["standby_w"] = sb->second.standby_w;
      for (const char* key : {"demand_w", "grant_w", "held_w", "power_w", "phase",
                              "value_tokens_per_j", "budget_w"}) {
        o[key] = nullptr;
      }
      o["lease"] = sb->second.lease != 0 ? json(LeaseHex(sb->second.lease)) : json(nullptr);
      jobs.push_back(std::move(o));
      continue;
    }
    json o;
    o["job"] = name;
    o["admitted"] = admitted;
    o["state"] = admitted ? "admitted" : "standby";
    o["class"] = coord::JobClassName(admitted ? lj->second.job_class : m->second.job_class);
    o["floor_w"] = admitted ? lj->second.floor_w : m->second.floor_w;
    o["standby_w"] = standby ? json(sb->second.standby_w) : json(nullptr);
    o["demand_w"] = member ? m->second.demand_w : lj->second.demand_w;
    o["grant_w"] = admitted ? json(lj->second.grant_w) : json(nullptr);
    o["held_w"] = admitted ? json(lj->second.held_w) : json(nullptr);
    o["power_w"] = member ? json(m->second.power_w) : json(nullptr);
    o["phase"] = member ? json(m->second.phase) : json(nullptr);
    o["value_tokens_per_j"] = member ? json(m->second.value_tokens_per_j) : json(nullptr);
    o["budget_w"] = member ? json(m->second.budget_w) : json(nullptr);
    const coord::LeaseId lease = member ? m->second.lease : lj->second.lease;
    o["lease"] = lease != 0 ? json(LeaseHex(lease)) : json(nullptr);
    o["domain"] = admitted ? lj->second.domain : m->second.domain;
    jobs.push_back(std::move(o));
  }
  return jobs;
}

// A domain's place under its parent site (coord/domain.h).
json ParentJson(const coord::ParentStatus& p) {
  json o;
  o["etcd"] = p.etcd;
  o["site"] = p.site;
  o["state"] = p.state;
  o["job_budget_w"] = p.job_budget_w;
  o["pending_w"] = p.pending_w;
  o["floor_w"] = p.floor_w;
  o["demand_w"] = p.demand_w;
  o["lease"] = p.lease != 0 ? json(LeaseHex(p.lease)) : json(nullptr);
  o["term"] = p.term;
  o["seq"] = p.seq;
  o["acks"] = p.acks;
  o["fences"] = p.fences;
  o["puts"] = p.puts;
  o["reason"] = p.reason;
  return o;
}

}  // namespace

std::string CoordinatorStatusJson(const coord::CoordinatorStatus& s,
                                  const coord::CoordinatorConfig& config,
                                  const std::optional<net::ConnectionCounters>& connections) {
  const bool leading = Leading(s);
  const LeaderInfo leader = ParseLeader(s, config);
  json j;
  j["version"] = Version();
  j["commit"] = Commit();
  j["role"] = s.role;
  j["term"] = s.term;
  j["id"] = config.id;
  j["listen"] = config.listen;
  j["leader"] = leader.id.empty() ? json(nullptr) : json(leader.id);
  j["leader_listen"] = leader.listen.empty() ? json(nullptr) : json(leader.listen);
  j["site"] = config.site;
  j["level"] = s.parent ? "domain" : "site";
  j["parent"] = s.parent ? ParentJson(*s.parent) : json(nullptr);
  j["jobs"] = json::array();
  if (leading) {
    const coord::Ledger& l = *s.ledger;
    j["site_budget_w"] = l.site_budget_w;
    j["target_site_budget_w"] = l.target_site_budget_w;
    j["reserve_w"] = l.reserve_w;
    j["sum_grants_w"] = SumGrantsW(l);
    j["sum_held_w"] = l.HeldW();
    j["sum_floors_w"] = l.FloorsW();
    j["sum_standby_w"] = l.StandbyW();
    j["overcommitted_w"] = l.OvercommittedW();
    j["largest_arrival_standby_w"] = s.largest_arrival_standby_w;
    j["reserve_short_w"] = ReserveShortW(s);
    j["reassignments"] = l.reassignments;
    j["jobs"] = JobsJson(s, l);
    j["refused"] = s.refused;
    j["conflict"] = s.conflict;
  } else {
    for (const char* key : {"site_budget_w", "target_site_budget_w", "reserve_w", "sum_grants_w",
                            "sum_held_w", "sum_floors_w", "sum_standby_w", "overcommitted_w",
                            "largest_arrival_standby_w", "reserve_short_w", "reassignments"}) {
      j[key] = nullptr;
    }
    j["refused"] = json::array();
    j["conflict"] = "";
  }
  j["ledger_writes"] = s.ledger_writes;
  j["write_conflicts"] = s.write_conflicts;
  j["unknown_outcomes"] = s.unknown_outcomes;
  j["invariant_refusals"] = s.invariant_refusals;
  j["elections_won"] = s.elections_won;
  j["leadership_lost"] = s.leadership_lost;
  j["malformed_values"] = s.malformed_values;
  j["unreadable_members"] = s.unreadable;
  j["store_resets"] = s.store_resets;
  j["site_lists"] = s.site_lists;
  j["view_updates"] = s.view_updates;
  j["view_revision"] = s.view_revision;
  j["targets_written"] = s.targets_written;
  j["txn_latency_p50_s"] = OrNull(TxnLatencyQuantile(s, 0.5));
  j["txn_latency_p99_s"] = OrNull(TxnLatencyQuantile(s, 0.99));
  j["decrease_settle_s"] = s.decrease_settle_s;
  // With --stagger reserve (coord/reservation.h): the last plan's reserved updates in force and
  // the updates within its horizon no hold could fit.
  j["reserved_updates"] = s.reserved_jobs;
  j["unreserved_updates"] = s.unreserved_updates;
  j["last_error"] = s.last_error;
  if (connections) j["connections"] = *connections;
  return Dump(j) + "\n";
}

namespace {

// The leader's families: the site's ledger and its jobs.
void LedgerMetrics(const coord::CoordinatorStatus& s, const coord::Ledger& l, net::MetricsText& w) {
  w.Family("headroom_site_budget_watts", "gauge",
           "The site budget in force (the ledger's: what the invariant holds against).");
  w.Sample("headroom_site_budget_watts", l.site_budget_w);
  w.Family("headroom_site_target_budget_watts", "gauge",
           "The site budget asked for (below the one in force while a decrease settles).");
  w.Sample("headroom_site_target_budget_watts", l.target_site_budget_w);
  w.Family("headroom_site_reserve_watts", "gauge", "Watts of the site budget never granted.");
  w.Sample("headroom_site_reserve_watts", l.reserve_w);
  w.Family("headroom_site_grants_watts", "gauge", "Sum of the latest grants.");
  w.Sample("headroom_site_grants_watts", SumGrantsW(l));
  w.Family("headroom_site_held_watts", "gauge",
           "Sum of held watts: the ledger's bound on the sum of the budgets jobs act on.");
  w.Sample("headroom_site_held_watts", l.HeldW());
  double acting_w = 0.0;
  for (const auto& [job, m] : s.members) acting_w += m.budget_w;
  w.Family("headroom_site_acting_budget_watts", "gauge",
           "Sum of the job budgets the members report acting on.");
  w.Sample("headroom_site_acting_budget_watts", acting_w);
  w.Family("headroom_job_grant_watts", "gauge", "The job's latest grant.");
  for (const auto& [job, j] : l.jobs) w.Sample("headroom_job_grant_watts", "job", job, j.grant_w);
  w.Family("headroom_job_floor_watts", "gauge",
           "The job's power at its lowest actuation, with the node overhead.");
  for (const auto& [job, j] : l.jobs) w.Sample("headroom_job_floor_watts", "job", job, j.floor_w);
  w.Family("headroom_job_power_watts", "gauge", "The job's power as its member reports it.");
  for (const auto& [job, m] : s.members)
    w.Sample("headroom_job_power_watts", "job", job, m.power_w);
  w.Family("headroom_site_standby_watts", "gauge",
           "Sum of what the registered jobs not admitted may draw (their standby, or their "
           "floor while a step may run): inside the held watts.");
  w.Sample("headroom_site_standby_watts", l.StandbyW());
  w.Family("headroom_job_standby_watts", "gauge",
           "What a registered job not admitted may draw (a duplicate by its key's name).");
  for (const auto& [job, sb] : l.standby)
    w.Sample("headroom_job_standby_watts", "job", job, sb.standby_w);
  w.Family("headroom_site_overcommitted_watts", "gauge",
           "Watts by which the admitted floors and every standby exceed the site budget less "
           "the reserve (asked for): above 0, jobs were started that the site cannot hold.");
  w.Sample("headroom_site_overcommitted_watts", l.OvercommittedW());
  w.Family("headroom_site_reserve_short_watts", "gauge",
           "Watts by which the reserve in force falls short of the most a job drew on arrival, "
           "before admission and without asking (docs/METRICS.md).");
  w.Sample("headroom_site_reserve_short_watts", ReserveShortW(s));
  w.Family("headroom_site_reassignments_total", "counter",
           "Grants raised with watts another job gave up (the ledger's count).");
  w.Sample("headroom_site_reassignments_total", static_cast<double>(l.reassignments));
}

}  // namespace

namespace {

// A domain's families: its place under its parent site (coord/domain.h).
void ParentMetrics(const coord::ParentStatus& p, net::MetricsText& w) {
  w.Family("headroom_domain_parent_state", "gauge",
           "1 for this domain's state under its parent site (granted, fenced, standby, "
           "follower), 0 for the others.");
  for (const char* state : {"granted", "fenced", "standby", "follower"}) {
    w.Sample("headroom_domain_parent_state", "state", state, p.state == state ? 1.0 : 0.0);
  }
  w.Family("headroom_domain_parent_budget_watts", "gauge",
           "The grant from the parent site this domain acts on: its site budget's ceiling.");
  w.Sample("headroom_domain_parent_budget_watts", p.job_budget_w);
  w.Family("headroom_domain_parent_pending_watts", "gauge",
           "A lower grant from the parent not acknowledged yet (the domain's jobs still hold "
           "more); 0: none.");
  w.Sample("headroom_domain_parent_pending_watts", p.pending_w);
  w.Family("headroom_domain_parent_floor_watts", "gauge",
           "The floor this domain declares to its parent: its jobs' floors, standby and reserve.");
  w.Sample("headroom_domain_parent_floor_watts", p.floor_w);
  w.Family("headroom_domain_parent_fences_total", "counter",
           "Times this domain fenced itself (its parent lease not renewed in time).");
  w.Sample("headroom_domain_parent_fences_total", static_cast<double>(p.fences));
}

}  // namespace

std::string CoordinatorMetricsText(const coord::CoordinatorStatus& s) {
  net::MetricsText w(BuildInfoMetric());

  w.Family("headroom_coordinator_leader", "gauge", "1 while this replica leads its site, else 0.");
  w.Sample("headroom_coordinator_leader", s.role == "leader" ? 1.0 : 0.0);
  w.Family("headroom_coordinator_term", "gauge",
           "The leader's term (its election revision) while this replica leads, else 0.");
  w.Sample("headroom_coordinator_term", static_cast<double>(s.term));
  w.Family("headroom_coordinator_elections_won_total", "counter",
           "Times this replica began leading its site.");
  w.Sample("headroom_coordinator_elections_won_total", static_cast<double>(s.elections_won));
  w.Family("headroom_coordinator_leadership_lost_total", "counter",
           "Times this replica stopped leading other than by resigning (lease expired, store "
           "unreachable for a lease TTL, leader key no longer its own).");
  w.Sample("headroom_coordinator_leadership_lost_total", static_cast<double>(s.leadership_lost));

  if (Leading(s)) LedgerMetrics(s, *s.ledger, w);
  if (s.parent) ParentMetrics(*s.parent, w);

  w.Family("headroom_coordinator_ledger_writes_total", "counter",
           "Ledger transactions this replica wrote.");
  w.Sample("headroom_coordinator_ledger_writes_total", static_cast<double>(s.ledger_writes));
  w.Family("headroom_coordinator_write_conflicts_total", "counter",
           "Ledger transactions that lost a race (their comparisons failed).");
  w.Sample("headroom_coordinator_write_conflicts_total", static_cast<double>(s.write_conflicts));
  w.Family("headroom_coordinator_unknown_outcomes_total", "counter",
           "Ledger transactions whose outcome was unknown (resolved by reading back).");
  w.Sample("headroom_coordinator_unknown_outcomes_total", static_cast<double>(s.unknown_outcomes));
  w.Family("headroom_coordinator_invariant_refusals_total", "counter",
           "Plans not written because they broke the invariant (a bug when above 0).");
  w.Sample("headroom_coordinator_invariant_refusals_total",
           static_cast<double>(s.invariant_refusals));
  w.Family("headroom_coordinator_site_lists_total", "counter",
           "Reads of the site's whole prefix by this replica as leader: once per term, and "
           "again when its watch fails, falls behind its own writes or a write finds its view "
           "stale.");
  w.Sample("headroom_coordinator_site_lists_total", static_cast<double>(s.site_lists));
  w.Family("headroom_coordinator_view_updates_total", "counter",
           "Leader periods planned on the view as a watch of the prefix brought it up to date.");
  w.Sample("headroom_coordinator_view_updates_total", static_cast<double>(s.view_updates));
  w.Family("headroom_coordinator_malformed_values_total", "counter",
           "Store values ignored because they did not parse.");
  w.Sample("headroom_coordinator_malformed_values_total", static_cast<double>(s.malformed_values));

  double latency_sum_s = 0.0;
  for (double v : s.txn_latency_s) latency_sum_s += v;
  w.Family("headroom_coordinator_txn_latency_seconds", "summary",
           "Ledger transaction latency, over the last transactions (up to 1024).");
  for (const auto& [label, q] : {std::pair{"0.5", 0.5}, std::pair{"0.99", 0.99}}) {
    const auto v = TxnLatencyQuantile(s, q);
    w.Sample("headroom_coordinator_txn_latency_seconds", "quantile", label, v ? *v : std::nan(""));
  }
  w.Sample("headroom_coordinator_txn_latency_seconds_sum", latency_sum_s);
  w.Sample("headroom_coordinator_txn_latency_seconds_count",
           static_cast<double>(s.txn_latency_s.size()));

  if (!s.decrease_settle_s.empty()) {
    w.Family("headroom_site_budget_decrease_settle_seconds", "gauge",
             "The last site budget decrease: seconds from its request to its being in force.");
    w.Sample("headroom_site_budget_decrease_settle_seconds", s.decrease_settle_s.back());
  }
  return std::move(w).text();
}

Result<TargetBody> ParseSiteBudgetBody(std::string_view body) {
  if (Status st = net::CheckJsonBody(body); !st) return std::move(st).error();
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::Input(
        "body: expected a JSON object, {\"site_budget_w\": W} and/or {\"reserve_w\": W}");
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "site_budget_w" && key != "reserve_w") {
      return Error::Input(
          fmt::format("{}: unknown field (expected site_budget_w and/or reserve_w)", key));
    }
  }
  if (!j.contains("site_budget_w") && !j.contains("reserve_w")) {
    return Error::Input("site_budget_w: missing (and no reserve_w)");
  }
  TargetBody out;
  for (const char* key : {"site_budget_w", "reserve_w"}) {
    if (!j.contains(key)) continue;
    const json& v = j[key];
    if (!v.is_number()) return Error::Input(fmt::format("{}: expected a number of watts", key));
    const double w = v.get<double>();
    if (!std::isfinite(w)) return Error::Input(fmt::format("{}: expected a finite number", key));
    const bool budget = std::string_view(key) == "site_budget_w";
    if (budget ? !(w > 0.0) : !(w >= 0.0)) {
      return Error::Input(fmt::format("{}: {} W: expected {}", key, w, budget ? "> 0" : ">= 0"));
    }
    if (w > kMaxSiteBudgetW) {
      return Error::Input(fmt::format("{}: {} W: expected at most {} W", key, w, kMaxSiteBudgetW));
    }
    (budget ? out.site_budget_w : out.reserve_w) = w;
  }
  return out;
}

// ---- The API ----

net::ServerLimits CoordinatorLimits() {
  net::ServerLimits limits;
  limits.max_body_bytes = kMaxSiteBudgetBodyBytes;
  limits.worker_threads = 1;
  limits.max_queued_work = kMaxQueuedBudgetRequests;
  limits.bulk_threads = 1;  // history answers (GET /v1/history)
  limits.max_queued_bulk = kMaxQueuedHistory;
  return limits;
}

namespace {

net::Response Reply(int status, std::string body, std::string content_type = "application/json") {
  net::Response r = net::JsonResponse(status, std::move(body));
  r.content_type = std::move(content_type);
  return r;
}

// The answer to a budget request, once the coordinator has taken it or not (a worker thread:
// it waits on the coordinator's mutex and the store).
net::Response AnswerSiteBudget(CoordinatorHost& host, const TargetBody& w) {
  const SiteBudgetAnswer answer = host.RequestTarget(w.site_budget_w, w.reserve_w);
  switch (answer.outcome) {
    case SiteBudgetAnswer::Outcome::kNotLeader: {
      const LeaderInfo leader = ParseLeader(host.Snapshot(), host.config());
      json j{{"error", answer.message}};
      j["leader"] = leader.id.empty() ? json(nullptr) : json(leader.id);
      j["leader_listen"] = leader.listen.empty() ? json(nullptr) : json(leader.listen);
      return Reply(409, Dump(j) + "\n");
    }
    case SiteBudgetAnswer::Outcome::kRefused:
      return net::ErrorResponse(400, answer.message);
    case SiteBudgetAnswer::Outcome::kUnavailable:
      return net::ErrorResponse(503, answer.message);
    case SiteBudgetAnswer::Outcome::kAccepted:
      // Written to the store: it survives a change of leader. In force from the next period
      // (an increase at once, a decrease once the grants have come down).
      return Reply(202, Dump(json{{"revision", answer.written.revision},
                                  {"target_site_budget_w", answer.written.site_budget_w},
                                  {"reserve_w", answer.written.reserve_w}}) +
                            "\n");
  }
  return net::ErrorResponse(500, "internal error");
}

}  // namespace

CoordinatorApi::CoordinatorApi(CoordinatorHost& host, net::AccessPolicy access,
                               std::function<net::ConnectionCounters()> connections)
    : host_(host), connections_(std::move(connections)), router_(std::move(access), "coordinator") {
  using Access = net::Router::Access;
  router_.Add("/", Access::kPage, [](const net::Request&, std::string_view) {
    net::Response r = Reply(200, std::string(kSitePage), "text/html; charset=utf-8");
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'none'; script-src 'unsafe-inline'; style-src "
                           "'unsafe-inline'; connect-src 'self'; img-src data:; form-action "
                           "'none'; frame-ancestors 'none'");
    return r;
  });
  router_.Add("/v1/status", Access::kRead, [this](const net::Request&, std::string_view query) {
    if (auto q = net::ParseQuery(query, {}); !q)
      return net::ErrorResponse(400, q.error().message());
    std::optional<net::ConnectionCounters> counters;
    if (connections_) counters = connections_();
    return Reply(200, CoordinatorStatusJson(host_.Snapshot(), host_.config(), counters));
  });
  router_.Add("/v1/history", Access::kCostlyRead,
              [this](const net::Request&, std::string_view query) { return GetHistory(query); });
  router_.Add("/metrics", Access::kRead, [this](const net::Request&, std::string_view query) {
    if (auto q = net::ParseQuery(query, {}); !q)
      return net::ErrorResponse(400, q.error().message());
    return Reply(200, CoordinatorMetricsText(host_.Snapshot()), "text/plain; version=0.0.4");
  });
  router_.Add("/v1/site-budget", Access::kWrite,
              [this](const net::Request& r, std::string_view q) { return PostSiteBudget(r, q); });
}

net::Response CoordinatorApi::Handle(const net::Request& request) {
  return router_.Handle(request);
}

net::Response CoordinatorApi::PostSiteBudget(const net::Request& request, std::string_view query) {
  if (!query.empty()) return net::ErrorResponse(400, "query: /v1/site-budget takes none");
  if (const std::string& parent = host_.config().parent_site; !parent.empty()) {
    return net::ErrorResponse(
        409, fmt::format("site '{}' is a domain of site '{}': its budget is its grant from there "
                         "(POST /v1/site-budget to that site's coordinator)",
                         host_.config().site, parent));
  }
  auto w = ParseSiteBudgetBody(request.body);
  if (!w) return net::ErrorResponse(400, w.error().message());
  net::Response r;
  r.offload = [&host = host_, body = *w] { return AnswerSiteBudget(host, body); };
  return r;
}

net::Response CoordinatorApi::GetHistory(std::string_view query) {
  auto q = net::ParseQuery(query, {"after", "limit"});
  if (!q) return net::ErrorResponse(400, q.error().message());
  SiteHistoryQuery h;
  h.limit = kMaxHistoryLimit;
  h.max_bytes = kMaxHistoryBytes;
  if (const auto after = q->Get("after")) {
    const auto t = net::ParseQueryReal(*after);
    if (!t) return net::ErrorResponse(400, "after: expected a Unix time in seconds");
    h.after_unix_s = *t;
  }
  if (const auto limit = q->Get("limit")) {
    const auto n = net::ParseQueryUint(*limit);
    if (!n || *n < 1 || *n > kMaxHistoryLimit) {
      return net::ErrorResponse(
          400, fmt::format("limit: expected a number of points from 1 to {}", kMaxHistoryLimit));
    }
    h.limit = static_cast<size_t>(*n);
  }
  net::Response r;
  r.lane = net::Lane::kBulk;
  r.offload = [&host = host_, h, in_flight = history_bytes_]() -> net::Response {
    // What readers have not taken yet bounds what more is built.
    if (in_flight->load() >= kMaxHistoryBytesInFlight) {
      return net::Unavailable("busy: too many history answers not yet read; try again");
    }
    net::Response answer = Reply(200, host.HistoryPage(h));
    const size_t bytes = answer.body.size();
    in_flight->fetch_add(bytes);
    answer.hold = std::shared_ptr<const void>(
        nullptr, [in_flight, bytes](const void*) { in_flight->fetch_sub(bytes); });
    return answer;
  };
  return r;
}

// ---- The server ----

CoordinatorServer::CoordinatorServer(CoordinatorApiConfig config)
    : config_(std::move(config)), server_(config_.limits, "coordinator") {}

CoordinatorServer::~CoordinatorServer() { Stop(); }

Status CoordinatorServer::Bind(const std::string& host, int port) {
  return server_.Bind(host, port);
}

void CoordinatorServer::Serve(CoordinatorHost& host) {
  assert(api_ == nullptr);
  api_ =
      std::make_unique<CoordinatorApi>(host, config_.access, [this] { return server_.counters(); });
  server_.Serve(*api_);
}

void CoordinatorServer::Stop() { server_.Stop(); }

}  // namespace headroom::coord_server
