#include "coord/coordinator_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "coord/fleet_page.h"

namespace headroom::coord {

using nlohmann::json;

// ---- CoordinatorHost ----

CoordinatorHost::CoordinatorHost(Store& store, CoordinatorConfig config,
                                 std::function<double()> now_s,
                                 std::function<void(const std::string&)> log)
    : config_(config), coordinator_(store, std::move(config), std::move(now_s), std::move(log)) {}

void CoordinatorHost::Step() {
  MutexLock lock(mu_);
  coordinator_.Step();
  MutexLock snapshot(snapshot_mu_);
  snapshot_ = coordinator_.status();
}

CoordinatorStatus CoordinatorHost::Snapshot() const {
  MutexLock snapshot(snapshot_mu_);
  return snapshot_;
}

SiteBudgetAnswer CoordinatorHost::RequestTarget(std::optional<double> site_budget_w,
                                                std::optional<double> reserve_w) {
  MutexLock lock(mu_);
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
}

// ---- Bodies ----

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json OrNull(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string LeaseHex(LeaseId lease) { return fmt::format("{:x}", static_cast<uint64_t>(lease)); }

// A sample value as the exposition format writes it.
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

bool Leading(const CoordinatorStatus& s) { return s.role == "leader" && s.ledger.has_value(); }

double SumGrantsW(const Ledger& l) {
  double sum = 0.0;
  for (const auto& [job, j] : l.jobs) sum += j.grant_w;
  return sum;
}

}  // namespace

LeaderInfo ParseLeader(const CoordinatorStatus& s, const CoordinatorConfig& self) {
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

std::optional<double> Quantile(std::vector<double> values, double q) {
  assert(q > 0.0 && q <= 1.0);
  if (values.empty()) return std::nullopt;
  const auto n = static_cast<double>(values.size());
  const auto rank = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
  const auto nth = values.begin() + static_cast<std::ptrdiff_t>(std::min(rank, values.size()) - 1);
  std::nth_element(values.begin(), nth, values.end());
  return *nth;
}

std::string CoordinatorStatusJson(const CoordinatorStatus& s, const CoordinatorConfig& config) {
  const bool leading = Leading(s);
  const LeaderInfo leader = ParseLeader(s, config);
  json j;
  j["role"] = s.role;
  j["term"] = s.term;
  j["id"] = config.id;
  j["listen"] = config.listen;
  j["leader"] = leader.id.empty() ? json(nullptr) : json(leader.id);
  j["leader_listen"] = leader.listen.empty() ? json(nullptr) : json(leader.listen);
  j["site"] = config.site;
  json& jobs = j["jobs"] = json::array();
  if (leading) {
    const Ledger& l = *s.ledger;
    j["site_budget_w"] = l.site_budget_w;
    j["target_site_budget_w"] = l.target_site_budget_w;
    j["reserve_w"] = l.reserve_w;
    j["sum_grants_w"] = SumGrantsW(l);
    j["sum_held_w"] = l.HeldW();
    j["sum_floors_w"] = l.FloorsW();
    j["sum_standby_w"] = l.StandbyW();
    j["overcommitted_w"] = l.OvercommittedW();
    j["reassignments"] = l.reassignments;
    // The ledger's jobs, then those in its standby, then members it has not counted yet.
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
        o["class"] = JobClassName(JobClass::kGuaranteed);
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
      o["class"] = JobClassName(admitted ? lj->second.job_class : m->second.job_class);
      o["floor_w"] = admitted ? lj->second.floor_w : m->second.floor_w;
      o["standby_w"] = standby ? json(sb->second.standby_w) : json(nullptr);
      o["demand_w"] = member ? m->second.demand_w : lj->second.demand_w;
      o["grant_w"] = admitted ? json(lj->second.grant_w) : json(nullptr);
      o["held_w"] = admitted ? json(lj->second.held_w) : json(nullptr);
      o["power_w"] = member ? json(m->second.power_w) : json(nullptr);
      o["phase"] = member ? json(m->second.phase) : json(nullptr);
      o["value_tokens_per_j"] = member ? json(m->second.value_tokens_per_j) : json(nullptr);
      o["budget_w"] = member ? json(m->second.budget_w) : json(nullptr);
      const LeaseId lease = member ? m->second.lease : lj->second.lease;
      o["lease"] = lease != 0 ? json(LeaseHex(lease)) : json(nullptr);
      jobs.push_back(std::move(o));
    }
    j["refused"] = s.refused;
    j["conflict"] = s.conflict;
  } else {
    for (const char* key :
         {"site_budget_w", "target_site_budget_w", "reserve_w", "sum_grants_w", "sum_held_w",
          "sum_floors_w", "sum_standby_w", "overcommitted_w", "reassignments"}) {
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
  j["targets_written"] = s.targets_written;
  j["txn_latency_p50_s"] = OrNull(Quantile(s.txn_latency_s, 0.5));
  j["txn_latency_p99_s"] = OrNull(Quantile(s.txn_latency_s, 0.99));
  j["decrease_settle_s"] = s.decrease_settle_s;
  j["last_error"] = s.last_error;
  return Dump(j) + "\n";
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string CoordinatorMetricsText(const CoordinatorStatus& s) {
  std::string out;
  const auto metric = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  const auto sample = [&](std::string_view name, double v) {
    out += fmt::format("{} {}\n", name, Number(v));
  };
  const auto job_sample = [&](std::string_view name, std::string_view job, double v) {
    out += fmt::format("{}{{job=\"{}\"}} {}\n", name, EscapeLabelValue(job), Number(v));
  };

  metric("headroom_coordinator_leader", "gauge", "1 while this replica leads its site, else 0.");
  sample("headroom_coordinator_leader", s.role == "leader" ? 1.0 : 0.0);
  metric("headroom_coordinator_term", "gauge",
         "The leader's term (its election revision) while this replica leads, else 0.");
  sample("headroom_coordinator_term", static_cast<double>(s.term));
  metric("headroom_coordinator_elections_won_total", "counter",
         "Times this replica began leading its site.");
  sample("headroom_coordinator_elections_won_total", static_cast<double>(s.elections_won));
  metric("headroom_coordinator_leadership_lost_total", "counter",
         "Times this replica stopped leading other than by resigning (lease expired, store "
         "unreachable for a lease TTL, leader key no longer its own).");
  sample("headroom_coordinator_leadership_lost_total", static_cast<double>(s.leadership_lost));

  if (Leading(s)) {
    const Ledger& l = *s.ledger;
    metric("headroom_site_budget_watts", "gauge",
           "The site budget in force (the ledger's: what the invariant holds against).");
    sample("headroom_site_budget_watts", l.site_budget_w);
    metric("headroom_site_target_budget_watts", "gauge",
           "The site budget asked for (below the one in force while a decrease settles).");
    sample("headroom_site_target_budget_watts", l.target_site_budget_w);
    metric("headroom_site_reserve_watts", "gauge", "Watts of the site budget never granted.");
    sample("headroom_site_reserve_watts", l.reserve_w);
    metric("headroom_site_grants_watts", "gauge", "Sum of the latest grants.");
    sample("headroom_site_grants_watts", SumGrantsW(l));
    metric("headroom_site_held_watts", "gauge",
           "Sum of held watts: the ledger's bound on the sum of the budgets jobs act on.");
    sample("headroom_site_held_watts", l.HeldW());
    double acting_w = 0.0;
    for (const auto& [job, m] : s.members) acting_w += m.budget_w;
    metric("headroom_site_acting_budget_watts", "gauge",
           "Sum of the job budgets the members report acting on.");
    sample("headroom_site_acting_budget_watts", acting_w);
    metric("headroom_job_grant_watts", "gauge", "The job's latest grant.");
    for (const auto& [job, j] : l.jobs) job_sample("headroom_job_grant_watts", job, j.grant_w);
    metric("headroom_job_floor_watts", "gauge",
           "The job's power at its lowest actuation, with the node overhead.");
    for (const auto& [job, j] : l.jobs) job_sample("headroom_job_floor_watts", job, j.floor_w);
    metric("headroom_job_power_watts", "gauge", "The job's power as its member reports it.");
    for (const auto& [job, m] : s.members) job_sample("headroom_job_power_watts", job, m.power_w);
    metric("headroom_site_standby_watts", "gauge",
           "Sum of what the registered jobs not admitted may draw (their standby, or their "
           "floor while a step may run): inside the held watts.");
    sample("headroom_site_standby_watts", l.StandbyW());
    metric("headroom_job_standby_watts", "gauge",
           "What a registered job not admitted may draw (a duplicate by its key's name).");
    for (const auto& [job, sb] : l.standby)
      job_sample("headroom_job_standby_watts", job, sb.standby_w);
    metric("headroom_site_overcommitted_watts", "gauge",
           "Watts by which the admitted floors and every standby exceed the site budget less "
           "the reserve (asked for): above 0, jobs were started that the site cannot hold.");
    sample("headroom_site_overcommitted_watts", l.OvercommittedW());
    metric("headroom_site_reassignments_total", "counter",
           "Grants raised with watts another job gave up (the ledger's count).");
    sample("headroom_site_reassignments_total", static_cast<double>(l.reassignments));
  }

  metric("headroom_coordinator_ledger_writes_total", "counter",
         "Ledger transactions this replica wrote.");
  sample("headroom_coordinator_ledger_writes_total", static_cast<double>(s.ledger_writes));
  metric("headroom_coordinator_write_conflicts_total", "counter",
         "Ledger transactions that lost a race (their comparisons failed).");
  sample("headroom_coordinator_write_conflicts_total", static_cast<double>(s.write_conflicts));
  metric("headroom_coordinator_unknown_outcomes_total", "counter",
         "Ledger transactions whose outcome was unknown (resolved by reading back).");
  sample("headroom_coordinator_unknown_outcomes_total", static_cast<double>(s.unknown_outcomes));
  metric("headroom_coordinator_invariant_refusals_total", "counter",
         "Plans not written because they broke the invariant (a bug when above 0).");
  sample("headroom_coordinator_invariant_refusals_total",
         static_cast<double>(s.invariant_refusals));
  metric("headroom_coordinator_malformed_values_total", "counter",
         "Store values ignored because they did not parse.");
  sample("headroom_coordinator_malformed_values_total", static_cast<double>(s.malformed_values));

  double latency_sum_s = 0.0;
  for (double v : s.txn_latency_s) latency_sum_s += v;
  metric("headroom_coordinator_txn_latency_seconds", "summary",
         "Ledger transaction latency, over the last transactions (up to 1024).");
  for (const auto& [label, q] : {std::pair{"0.5", 0.5}, std::pair{"0.99", 0.99}}) {
    const auto v = Quantile(s.txn_latency_s, q);
    out += fmt::format("headroom_coordinator_txn_latency_seconds{{quantile=\"{}\"}} {}\n", label,
                       Number(v ? *v : std::nan("")));
  }
  sample("headroom_coordinator_txn_latency_seconds_sum", latency_sum_s);
  sample("headroom_coordinator_txn_latency_seconds_count",
         static_cast<double>(s.txn_latency_s.size()));

  if (!s.decrease_settle_s.empty()) {
    metric("headroom_site_budget_decrease_settle_seconds", "gauge",
           "The last site budget decrease: seconds from its request to its being in force.");
    sample("headroom_site_budget_decrease_settle_seconds", s.decrease_settle_s.back());
  }
  return out;
}

Result<TargetBody> ParseSiteBudgetBody(std::string_view body) {
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

bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const auto lower = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == y;
           });
  };
  if (lower(host, "localhost") || host == "::1") return true;
  // 127.x.y.z, each part decimal 0-255.
  int parts = 0;
  size_t start = 0;
  while (start <= host.size()) {
    const size_t dot = std::min(host.find('.', start), host.size());
    const std::string_view part = host.substr(start, dot - start);
    if (part.empty() || part.size() > 3) return false;
    int v = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    if (v > 255 || (parts == 0 && v != 127)) return false;
    ++parts;
    start = dot + 1;
  }
  return parts == 4;
}

// ---- The server ----

namespace {

constexpr int kServerThreads = 16;
constexpr auto kStartWait = std::chrono::seconds(10);

bool SameSecret(std::string_view a, std::string_view b) {
  // Constant time in the content (the length of a configured token is not a secret worth it).
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void Reply(httplib::Response& res, int status, std::string body,
           const char* type = "application/json") {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(std::move(body), type);
}

void ReplyError(httplib::Response& res, int status, std::string_view message) {
  Reply(res, status, Dump(json{{"error", std::string(message)}}) + "\n");
}

bool Authorized(const httplib::Request& req, const std::string& token) {
  if (token.empty()) return true;
  if (!req.has_header("Authorization")) return false;
  const std::string header = req.get_header_value("Authorization");
  const std::string_view value = Trim(header);
  const size_t space = value.find(' ');
  if (space == std::string_view::npos) return false;
  if (!EqualsIgnoreCase(value.substr(0, space), "bearer")) return false;
  return SameSecret(Trim(value.substr(space + 1)), token);
}

// Host names a browser may have been pointed to: IP literals and loopback names, else only the
// configured ones (a DNS name that rebinds to this machine is refused).
bool HostAllowed(const httplib::Request& req, const CoordinatorApiConfig& config) {
  if (!req.has_header("Host")) return true;  // HTTP/1.0: not a browser
  const std::string header = req.get_header_value("Host");
  std::string_view h = Trim(header);
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    return true;  // an IPv6 literal
  }
  if (const size_t colon = h.rfind(':'); colon != std::string_view::npos) h = h.substr(0, colon);
  if (h.empty()) return false;
  if (IsLoopbackHost(h)) return true;
  bool ipv4 = true;
  for (char c : h) ipv4 = ipv4 && ((c >= '0' && c <= '9') || c == '.');
  if (ipv4) return true;
  for (const std::string& allowed : config.allowed_hosts) {
    if (EqualsIgnoreCase(h, allowed)) return true;
  }
  return false;
}

const char* StatusText(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 413:
      return "request body too large";
    case 414:
      return "request target too long";
    case 500:
      return "internal error";
    default:
      return "error";
  }
}

void PostSiteBudget(CoordinatorHost& host, const CoordinatorApiConfig& config,
                    const httplib::Request& req, httplib::Response& res) {
  if (!Authorized(req, config.token)) {
    res.set_header("WWW-Authenticate", "Bearer");
    ReplyError(res, 401, "a bearer token is required (Authorization: Bearer T)");
    return;
  }
  const std::string type = req.get_header_value("Content-Type");
  if (!EqualsIgnoreCase(Trim(std::string_view(type).substr(0, type.find(';'))),
                        "application/json")) {
    ReplyError(res, 415, "Content-Type: expected application/json");
    return;
  }
  auto w = ParseSiteBudgetBody(req.body);
  if (!w) {
    ReplyError(res, 400, w.error().message());
    return;
  }
  const SiteBudgetAnswer answer = host.RequestTarget(w->site_budget_w, w->reserve_w);
  switch (answer.outcome) {
    case SiteBudgetAnswer::Outcome::kNotLeader: {
      const LeaderInfo leader = ParseLeader(host.Snapshot(), host.config());
      json j{{"error", answer.message}};
      j["leader"] = leader.id.empty() ? json(nullptr) : json(leader.id);
      j["leader_listen"] = leader.listen.empty() ? json(nullptr) : json(leader.listen);
      Reply(res, 409, Dump(j) + "\n");
      return;
    }
    case SiteBudgetAnswer::Outcome::kRefused:
      ReplyError(res, 400, answer.message);
      return;
    case SiteBudgetAnswer::Outcome::kUnavailable:
      ReplyError(res, 503, answer.message);
      return;
    case SiteBudgetAnswer::Outcome::kAccepted:
      // Written to the store: it survives a change of leader. In force from the next period
      // (an increase at once, a decrease once the grants have come down).
      Reply(res, 202,
            Dump(json{{"revision", answer.written.revision},
                      {"target_site_budget_w", answer.written.site_budget_w},
                      {"reserve_w", answer.written.reserve_w}}) +
                "\n");
      return;
  }
}

void Route(CoordinatorHost& host, const CoordinatorApiConfig& config, const char* method,
           const httplib::Request& req, httplib::Response& res) {
  if (!HostAllowed(req, config)) {
    ReplyError(res, 403,
               "Host: not a name of this coordinator (DNS rebinding?); start it with "
               "--allow-host NAME to accept it");
    return;
  }
  const std::string_view m(method);
  const bool get = m == "GET";  // httplib routes HEAD here too
  const auto only = [&](const char* allowed) {
    res.set_header("Allow", allowed);
    ReplyError(
        res, 405,
        fmt::format("{} {}: method not allowed (allowed: {})", req.method, req.path, allowed));
  };
  if (req.path == "/") {
    if (!get) return only("GET, HEAD");
    Reply(res, 200, std::string(kFleetPage), "text/html; charset=utf-8");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src data:; form-action 'none'");
  } else if (req.path == "/v1/status") {
    if (!get) return only("GET, HEAD");
    Reply(res, 200, CoordinatorStatusJson(host.Snapshot(), host.config()));
  } else if (req.path == "/metrics") {
    if (!get) return only("GET, HEAD");
    Reply(res, 200, CoordinatorMetricsText(host.Snapshot()), "text/plain; version=0.0.4");
  } else if (req.path == "/v1/site-budget") {
    if (m != "POST") return only("POST");
    PostSiteBudget(host, config, req, res);
  } else {
    ReplyError(res, 404,
               fmt::format("{}: not found (/, /v1/status, /metrics, /v1/site-budget)", req.path));
  }
}

}  // namespace

CoordinatorServer::CoordinatorServer(CoordinatorApiConfig config)
    : config_(std::move(config)), server_(std::make_unique<httplib::Server>()) {}

CoordinatorServer::~CoordinatorServer() { Stop(); }

Status CoordinatorServer::Bind(const std::string& host, int port) {
  assert(!bound_);
  // httplib's default sets SO_REUSEPORT, which lets a second replica share the port (and the
  // kernel split the requests between them): SO_REUSEADDR only.
  server_->set_socket_options([](auto sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(s));
  };
  server_->set_read_timeout(seconds(config_.read_timeout_s));
  server_->set_write_timeout(seconds(config_.write_timeout_s));
  server_->set_keep_alive_timeout(
      static_cast<time_t>(std::max(1.0, std::ceil(config_.keep_alive_timeout_s))));
  server_->set_payload_max_length(config_.max_body_bytes);
  server_->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (server_->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    const int err = errno;
    return Error::Io(fmt::format("coordinator: cannot listen on {}:{}: {}", host, port,
                                 err == EADDRINUSE
                                     ? std::string("the port is in use (another replica?)")
                                 : err != 0 ? std::string(std::strerror(err))
                                            : std::string("not an address of this machine?")));
  }
  port_ = bound;
  bound_ = true;
  return OkStatus();
}

void CoordinatorServer::Serve(CoordinatorHost& host) {
  assert(bound_ && !thread_.joinable());
  const CoordinatorApiConfig* config = &config_;
  const auto route = [&host, config](const char* method) {
    return [&host, config, method](const httplib::Request& req, httplib::Response& res) {
      Route(host, *config, method, req, res);
    };
  };
  server_->Get(".*", route("GET"));
  server_->Post(".*", route("POST"));
  server_->Put(".*", route("PUT"));
  server_->Patch(".*", route("PATCH"));
  server_->Delete(".*", route("DELETE"));
  server_->Options(".*", route("OPTIONS"));
  // What httplib answers itself (a body over the cap, a bad request line): one JSON line too.
  server_->set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 413) {
          ReplyError(res, 413, fmt::format("body: larger than {} bytes", config_.max_body_bytes));
        } else {
          ReplyError(res, res.status, StatusText(res.status));
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        ReplyError(res, 500, "internal error");
      });
  httplib::Server* server = server_.get();
  thread_ = std::thread([server] { server->listen_after_bind(); });
  // Stop() works only once the loop runs (httplib's stop() is a no-op before).
  const auto deadline = std::chrono::steady_clock::now() + kStartWait;
  while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void CoordinatorServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace headroom::coord
