// `headroom coordinator`'s HTTP API over the in-memory store (fake members put in the store as
// agents would, the server on a free port, real HTTP requests), and the real binary: bad
// options, etcd unreachable at start, and, with /usr/bin/etcd, two replicas where the leader is
// SIGKILLed and the other takes over with a higher term.
#include "coord_server/coordinator_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "build_info/build_info.h"
#include "coord/coordinator.h"
#include "coord/layout.h"
#include "coord/memory_store.h"
#include "support/child_process.h"
#include "support/site_processes.h"

#if __has_include("support/etcd_cluster.h")
#include "support/etcd_cluster.h"
#define HEADROOM_HAVE_ETCD_CLUSTER 1
#endif

namespace headroom::coord_server {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using test_support::Process;

constexpr double kSiteW = 1000.0;
constexpr double kReserveW = 100.0;
constexpr const char* kToken = "s3cret-token";

struct FakeClock {
  double t = 0.0;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};

struct FakeJob {
  std::string job;
  double floor_w = 0.0;
  double demand_w = 0.0;
  double power_w = 0.0;
  double budget_w = 0.0;
  std::string phase;
  double value = 0.0;
  double standby_w = -1.0;  // absent: counted at its floor until admitted
};

// One replica: the host, and its server on a free loopback port.
struct Replica {
  std::unique_ptr<CoordinatorHost> host;
  std::unique_ptr<CoordinatorServer> server;
  int port() const { return server->port(); }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port());
    c.set_connection_timeout(2);
    c.set_read_timeout(5);
    return c;
  }
};

class CoordinatorServerTest : public ::testing::Test {
 protected:
  CoordinatorServerTest() : store_(clock_.fn()) {}

  Replica StartReplica(const std::string& id, std::string token = kToken,
                       std::vector<std::string> allowed_hosts = {}, coord::Store* store = nullptr,
                       const std::string& parent_site = "") {
    Replica r;
    CoordinatorApiConfig api;
    api.access.token = std::move(token);
    api.access.allowed_hosts = std::move(allowed_hosts);
    r.server = std::make_unique<CoordinatorServer>(api);
    Status bound = r.server->Bind("127.0.0.1", 0);
    EXPECT_TRUE(bound.ok()) << bound.error().message();
    coord::CoordinatorConfig config;
    config.site = "s";
    config.site_budget_w = kSiteW;
    config.reserve_w = kReserveW;
    config.id = id;
    config.parent_site = parent_site;
    config.listen = "127.0.0.1:" + std::to_string(r.server->port());
    r.host = std::make_unique<CoordinatorHost>(store != nullptr ? *store : store_, config,
                                               clock_.fn(), [](const std::string&) {});
    r.server->Serve(*r.host);
    return r;
  }

  void PutMember(const FakeJob& f) {
    if (!leases_.contains(f.job)) {
      Result<coord::LeaseId> lease = store_.LeaseGrant(3600);
      ASSERT_TRUE(lease.ok());
      leases_[f.job] = *lease;
    }
    coord::Member m;
    m.job = f.job;
    m.gpus = 1;
    m.nameplate_w = f.demand_w;
    m.floor_w = f.floor_w;
    m.demand_w = f.demand_w;
    m.power_w = f.power_w;
    m.phase = f.phase;
    m.value_tokens_per_j = f.value;
    m.budget_w = f.budget_w;
    m.lease = leases_[f.job];
    m.standby_w = f.standby_w;
    ASSERT_TRUE(store_.Put(coord::Keys("s").member(f.job), coord::ToJson(m), m.lease).ok());
  }

  // Acknowledges every stored grant, as an agent acting on it would.
  void AckGrants() {
    Result<coord::RangeResult> grants = store_.Get(coord::Keys("s").grants(), true);
    ASSERT_TRUE(grants.ok());
    for (const coord::KeyValue& kv : grants->kvs) {
      Result<coord::Grant> g = coord::GrantFromJson(kv.value, kv.key);
      ASSERT_TRUE(g.ok()) << g.error().message();
      coord::Ack a{g->job, g->term, g->seq, g->lease, g->job_budget_w};
      ASSERT_TRUE(
          store_.Put(coord::Keys("s").ack(g->job), coord::ToJson(a), leases_.at(g->job)).ok());
    }
  }

  // The ledger as stored, read independently of any coordinator.
  coord::Ledger StoredLedger() {
    Result<coord::RangeResult> r = store_.Get(coord::Keys("s").ledger(), false);
    EXPECT_TRUE(r.ok());
    if (!r.ok() || r->kvs.empty()) return {};
    Result<coord::Ledger> l = coord::LedgerFromJson(r->kvs[0].value, "ledger");
    EXPECT_TRUE(l.ok());
    return l.ok() ? *l : coord::Ledger{};
  }

  void Step(Replica& r, int n = 1) {
    for (int i = 0; i < n; ++i) {
      clock_.t += 1.0;
      r.host->Step();
    }
  }

  static json GetJson(const Replica& r, const std::string& path, const std::string& token = "") {
    auto c = r.Client();
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    httplib::Result res = c.Get(path.c_str(), headers);
    EXPECT_TRUE(res) << path;
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  static httplib::Result PostBudget(const Replica& r, const std::string& body,
                                    const std::string& token = kToken,
                                    const std::string& type = "application/json") {
    auto c = r.Client();
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return c.Post("/v1/site-budget", headers, body, type.c_str());
  }

  // Two jobs: a (floor 100, demand 500), b (floor 200, demand 900).
  void TwoJobs() {
    PutMember({"a", 100, 500, 310, 320, "rollout", 0.25});
    PutMember({"b", 200, 900, 550, 560, "train", 0.5});
  }

  FakeClock clock_;
  coord::MemoryStore store_;
  std::map<std::string, coord::LeaseId> leases_;
};

// Computed here, not by the coordinator: floors first, the rest of budget - reserve in
// proportion to demand above floor (both below their demand).
constexpr double kAvailableW = kSiteW - kReserveW;                  // 900
constexpr double kAboveFloorsW = kAvailableW - 100.0 - 200.0;       // 600
constexpr double kGrantA = 100.0 + kAboveFloorsW * 400.0 / 1100.0;  // 318.18...
constexpr double kGrantB = 200.0 + kAboveFloorsW * 700.0 / 1100.0;  // 581.81...

// A ledger the replica creates raises no grant for the lease TTL (3 s) and two periods (1 s
// each): agents that lost their lease with an older state register again first (SITE.md,
// "Epochs"). Steps of 1 s.
constexpr int kNewLedgerHoldSteps = 5;

TEST_F(CoordinatorServerTest, StatusReportsTheLedgerAndTheMembers) {
  TwoJobs();
  Replica r = StartReplica("c0");
  Step(r, 3 + kNewLedgerHoldSteps);
  const json s = GetJson(r, "/v1/status");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["role"], "leader");
  EXPECT_GT(s["term"].get<int64_t>(), 0);
  EXPECT_EQ(s["leader"], "c0");
  EXPECT_EQ(s["site"], "s");
  EXPECT_DOUBLE_EQ(s["site_budget_w"].get<double>(), kSiteW);
  EXPECT_DOUBLE_EQ(s["target_site_budget_w"].get<double>(), kSiteW);
  EXPECT_DOUBLE_EQ(s["reserve_w"].get<double>(), kReserveW);
  EXPECT_NEAR(s["sum_grants_w"].get<double>(), kAvailableW, 1e-6);
  EXPECT_NEAR(s["sum_held_w"].get<double>(), kAvailableW, 1e-6);
  EXPECT_NEAR(s["sum_floors_w"].get<double>(), 300.0, 1e-9);
  ASSERT_EQ(s["jobs"].size(), 2u);
  std::map<std::string, json> jobs;
  for (const json& j : s["jobs"]) jobs[j["job"].get<std::string>()] = j;
  EXPECT_NEAR(jobs["a"]["grant_w"].get<double>(), kGrantA, 1e-6);
  EXPECT_NEAR(jobs["b"]["grant_w"].get<double>(), kGrantB, 1e-6);
  EXPECT_NEAR(jobs["a"]["held_w"].get<double>(), kGrantA, 1e-6);
  EXPECT_DOUBLE_EQ(jobs["a"]["floor_w"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(jobs["b"]["demand_w"].get<double>(), 900.0);
  EXPECT_DOUBLE_EQ(jobs["a"]["power_w"].get<double>(), 310.0);
  EXPECT_DOUBLE_EQ(jobs["b"]["budget_w"].get<double>(), 560.0);
  EXPECT_EQ(jobs["b"]["phase"], "train");
  EXPECT_DOUBLE_EQ(jobs["b"]["value_tokens_per_j"].get<double>(), 0.5);
  EXPECT_EQ(jobs["a"]["admitted"], true);
  std::ostringstream hex;
  hex << std::hex << leases_["a"];
  EXPECT_EQ(jobs["a"]["lease"], hex.str());
  EXPECT_TRUE(s["refused"].is_array() && s["refused"].empty());
  EXPECT_EQ(s["conflict"], "");
  EXPECT_GE(s["ledger_writes"].get<uint64_t>(), 1u);
  for (const char* key : {"write_conflicts", "unknown_outcomes", "invariant_refusals",
                          "malformed_values", "reserved_updates", "unreserved_updates"}) {
    EXPECT_EQ(s[key], 0) << key;
  }
  EXPECT_TRUE(s["txn_latency_p50_s"].is_number());  // 0 on the fake clock
  EXPECT_TRUE(s["txn_latency_p99_s"].is_number());
  EXPECT_TRUE(s["decrease_settle_s"].is_array() && s["decrease_settle_s"].empty());
  EXPECT_TRUE(s["reassignments"].is_number());
  EXPECT_EQ(s["last_error"], "");

  // The same numbers in the store's own ledger.
  const coord::Ledger l = StoredLedger();
  EXPECT_NEAR(l.HeldW(), s["sum_held_w"].get<double>(), 1e-9);
  EXPECT_NEAR(l.jobs.at("a").grant_w, kGrantA, 1e-6);
}

// Issue 37: the last hour, one point per period, so the site page opened late has history:
// the ledger's budget and reserve, each job's grant and power, and the site's power (the sum
// its members publish), each point stamped with the wall clock the host is given.
TEST_F(CoordinatorServerTest, HistoryKeepsEveryPeriodWithTheGrantsAndTheSitesPower) {
  TwoJobs();
  Replica r = StartReplica("c0");
  r.host->KeepHistory([this] { return 1796521800.0 + clock_.t; });
  const json none = GetJson(r, "/v1/history", kToken);
  EXPECT_EQ(none["points"].size(), 0u);
  EXPECT_EQ(none["more"], false);
  Step(r, 3 + kNewLedgerHoldSteps);
  const json h = GetJson(r, "/v1/history", kToken);
  ASSERT_TRUE(h.is_object());
  EXPECT_DOUBLE_EQ(h["period_s"].get<double>(), 1.0);
  EXPECT_EQ(h["more"], false);
  EXPECT_EQ(h["next_after"], nullptr);
  ASSERT_EQ(h["points"].size(), 3u + kNewLedgerHoldSteps);
  const json& last = h["points"].back();
  EXPECT_DOUBLE_EQ(last["unix_s"].get<double>(), 1796521800.0 + clock_.t);
  EXPECT_EQ(last["role"], "leader");
  EXPECT_DOUBLE_EQ(last["site_budget_w"].get<double>(), kSiteW);
  EXPECT_DOUBLE_EQ(last["reserve_w"].get<double>(), kReserveW);
  EXPECT_NEAR(last["held_w"].get<double>(), kAvailableW, 1e-6);
  // A job's watts to a float's precision (site_history.h).
  EXPECT_NEAR(last["jobs"]["a"]["grant_w"].get<double>(), kGrantA, 1e-4);
  EXPECT_NEAR(last["jobs"]["b"]["grant_w"].get<double>(), kGrantB, 1e-4);
  EXPECT_DOUBLE_EQ(last["jobs"]["a"]["power_w"].get<double>(), 310.0);
  EXPECT_DOUBLE_EQ(last["power_w"].get<double>(), 310.0 + 550.0);
  for (size_t i = 1; i < h["points"].size(); ++i) {
    EXPECT_DOUBLE_EQ(
        h["points"][i]["unix_s"].get<double>() - h["points"][i - 1]["unix_s"].get<double>(), 1.0);
  }
  // ?after=T: only what came after T (the page asks from its last point).
  const double before_last = h["points"][h["points"].size() - 2]["unix_s"].get<double>();
  const json tail = GetJson(r, "/v1/history?after=" + std::to_string(before_last), kToken);
  ASSERT_EQ(tail["points"].size(), 1u);
  EXPECT_EQ(tail["points"][0], last);
  // ?limit=N: a page of N, and where the next starts.
  const json page = GetJson(r, "/v1/history?limit=2", kToken);
  ASSERT_EQ(page["points"].size(), 2u);
  EXPECT_EQ(page["more"], true);
  EXPECT_EQ(page["next_after"], page["points"][1]["unix_s"]);
  EXPECT_EQ(page["points"][0], h["points"][0]);
  auto c = r.Client();
  const httplib::Headers auth{{"Authorization", std::string("Bearer ") + kToken}};
  const std::pair<const char*, const char*> bad[] = {
      {"/v1/history?after=soon", "after"}, {"/v1/history?before=1", "before"},
      {"/v1/history?limit=0", "limit"},    {"/v1/history?limit=3601", "limit"},
      {"/v1/history?limit=2.5", "limit"},  {"/v1/history?limit=2&limit=3", "limit"}};
  for (const auto& [target, named] : bad) {
    auto res = c.Get(target, auth);
    ASSERT_TRUE(res) << target;
    EXPECT_EQ(res->status, 400) << target;
    EXPECT_NE(res->body.find(named), std::string::npos) << res->body;
  }
}

// Issue 53: a history costs the replica, so a token for writes guards it too (the agent's
// --token-on-reads, always on for this route); /v1/status stays open unless token_on_reads.
TEST_F(CoordinatorServerTest, HistoryNeedsTheTokenWheneverOneIsSet) {
  TwoJobs();
  Replica r = StartReplica("c0");
  r.host->KeepHistory([this] { return 1796521800.0 + clock_.t; });
  Step(r, 2);
  auto c = r.Client();
  auto res = c.Get("/v1/history");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_TRUE(res->has_header("WWW-Authenticate"));
  res = c.Get("/v1/history", {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = c.Get("/v1/status");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(GetJson(r, "/v1/history", kToken)["points"].size(), 2u);
  // No token configured: open, as every read.
  Replica open = StartReplica("c1", /*token=*/"");
  open.host->KeepHistory([this] { return 1796521800.0 + clock_.t; });
  EXPECT_TRUE(GetJson(open, "/v1/history")["points"].is_array());
}

TEST_F(CoordinatorServerTest, ARefusedMemberIsListed) {
  TwoJobs();
  // 300 + 700 > 900: does not fit; held at its step boundary it draws its standby, 50 W.
  PutMember({"c", 700, 800, 0, 0, "idle", 0, 50});
  Replica r = StartReplica("c0");
  Step(r, 3);
  const json s = GetJson(r, "/v1/status");
  ASSERT_EQ(s["refused"].size(), 1u) << s.dump();
  EXPECT_EQ(s["refused"][0].get<std::string>().rfind("c: ", 0), 0u) << s["refused"][0];
  EXPECT_DOUBLE_EQ(s["sum_standby_w"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(s["overcommitted_w"].get<double>(), 0.0);  // 100 + 200 + 50 <= 900
  bool listed = false;
  for (const json& j : s["jobs"]) {
    if (j["job"] == "c") {
      listed = true;
      EXPECT_EQ(j["admitted"], false);
      EXPECT_EQ(j["state"], "standby");
      EXPECT_DOUBLE_EQ(j["standby_w"].get<double>(), 50.0);
      EXPECT_TRUE(j["grant_w"].is_null());
    }
  }
  EXPECT_TRUE(listed);
}

// Jobs started that the site cannot hold: a newcomer mid-step counts at its floor, and what
// does not fit with everyone at their floors is reported at once, in the status, the metrics
// and the log -- while grants still come down (a plan that raises nothing is written).
TEST_F(CoordinatorServerTest, AnOvercommittedSiteSaysSoWithTheNumbers) {
  TwoJobs();
  Replica r = StartReplica("c0");
  Step(r, 3);
  AckGrants();
  Step(r, 1);
  // c, mid-rollout when its agent started: 700 W on top of floors 300 W, budget 900 W.
  PutMember({"c", 700, 800, 650, 0, "rollout", 0, 60});
  Step(r, 1);
  json s = GetJson(r, "/v1/status");
  EXPECT_EQ(s["version"], std::string(Version()));  // what runs, for a bug report
  EXPECT_EQ(s["commit"], std::string(Commit()));
  EXPECT_NEAR(s["overcommitted_w"].get<double>(), 100.0 + 200.0 + 700.0 - 900.0, 1e-6) << s.dump();
  EXPECT_NEAR(s["sum_standby_w"].get<double>(), 700.0, 1e-6);
  // The others come down to their floors (never below).
  for (const json& j : s["jobs"]) {
    if (j["job"] == "a") {
      EXPECT_NEAR(j["grant_w"].get<double>(), 100.0, 1e-6);
    } else if (j["job"] == "b") {
      EXPECT_NEAR(j["grant_w"].get<double>(), 200.0, 1e-6);
    }
  }
  httplib::Result got = r.Client().Get("/metrics");
  ASSERT_TRUE(got);
  const std::string metrics = got->body;
  EXPECT_NE(metrics.find("headroom_site_overcommitted_watts 100"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.rfind(BuildInfoMetric(), 0), 0u) << metrics;
  EXPECT_NE(metrics.find("headroom_job_standby_watts{job=\"c\"} 700"), std::string::npos);
  // At its step boundary c holds: 60 W, and the site fits again.
  PutMember({"c", 700, 800, 60, 0, "idle", 0, 60});
  Step(r, 1);
  s = GetJson(r, "/v1/status");
  EXPECT_DOUBLE_EQ(s["overcommitted_w"].get<double>(), 0.0);
  EXPECT_NEAR(s["sum_standby_w"].get<double>(), 60.0, 1e-6);
}

// Prometheus text, line by line (without std::regex, which trips g++ 12's maybe-uninitialized
// under ASan): "# HELP name text", "# TYPE name gauge|counter|summary", and samples
// "name{label="value",...} number" (escapes \\ \" \n), each after its family's
// # TYPE. Returns the samples by "name{labels}" as written.
bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// The metric or label name at the start of `s` ("" when none).
std::string NameAt(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && IsNameChar(s[n], n == 0)) ++n;
  return std::string(s.substr(0, n));
}

std::map<std::string, double> ParseMetrics(const std::string& text,
                                           std::map<std::string, std::string>* types) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string_view rest = line;
    if (rest.starts_with("# HELP ")) {
      rest.remove_prefix(7);
      const std::string name = NameAt(rest);
      EXPECT_FALSE(name.empty()) << line;
      EXPECT_GT(rest.size(), name.size() + 1) << "no help text: " << line;
      continue;
    }
    if (rest.starts_with("# TYPE ")) {
      rest.remove_prefix(7);
      const std::string name = NameAt(rest);
      const std::string_view type = rest.substr(std::min(rest.size(), name.size() + 1));
      EXPECT_TRUE(!name.empty() && rest.size() > name.size() && rest[name.size()] == ' ' &&
                  (type == "gauge" || type == "counter" || type == "summary"))
          << line;
      (*types)[name] = std::string(type);
      continue;
    }
    const std::string name = NameAt(rest);
    if (name.empty()) {
      ADD_FAILURE() << "not a Prometheus line: '" << line << "'";
      continue;
    }
    rest.remove_prefix(name.size());
    std::string labels;
    if (!rest.empty() && rest.front() == '{') {
      size_t i = 0;  // at '{' or at the ',' before each label
      bool ok = true;
      do {
        const std::string label = NameAt(rest.substr(i + 1));
        i += 1 + label.size();
        ok = !label.empty() && rest.substr(i, 2) == "=\"";
        for (i += 2; ok && i < rest.size() && rest[i] != '"'; ++i) {
          if (rest[i] == '\n') ok = false;
          if (rest[i] == '\\') {
            ok = i + 1 < rest.size() &&
                 (rest[i + 1] == '\\' || rest[i + 1] == '"' || rest[i + 1] == 'n');
            ++i;
          }
        }
        ok = ok && i < rest.size();
        ++i;  // past the closing quote
      } while (ok && i < rest.size() && rest[i] == ',');
      --i;  // at the closing quote of the last label
      ok = ok && rest.substr(i, 2) == "\"}";
      if (!ok) {
        ADD_FAILURE() << "bad labels: '" << line << "'";
        continue;
      }
      labels = std::string(rest.substr(0, i + 2));
      rest.remove_prefix(i + 2);
    }
    if (rest.size() < 2 || rest.front() != ' ' || rest.find(' ', 1) != std::string_view::npos) {
      ADD_FAILURE() << "bad value: '" << line << "'";
      continue;
    }
    const std::string value(rest.substr(1));
    char* end = nullptr;
    const double v = value == "NaN" ? std::nan("") : std::strtod(value.c_str(), &end);
    if (value != "NaN" && (end == value.c_str() || *end != '\0')) {
      ADD_FAILURE() << "bad number: '" << line << "'";
      continue;
    }
    std::string family = name;
    for (const std::string suffix : {"_sum", "_count"}) {
      if (!types->contains(family) && family.ends_with(suffix)) {
        family = family.substr(0, family.size() - suffix.size());
      }
    }
    EXPECT_TRUE(types->contains(family)) << "no # TYPE before: " << line;
    samples[name + labels] = v;
  }
  return samples;
}

TEST_F(CoordinatorServerTest, MetricsCarryTheGrantOfEveryJob) {
  TwoJobs();
  Replica r = StartReplica("c0");
  Step(r, 3 + kNewLedgerHoldSteps);
  auto c = r.Client();
  httplib::Result res = c.Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  std::map<std::string, std::string> types;
  const auto m = ParseMetrics(res->body, &types);
  EXPECT_NEAR(m.at("headroom_job_grant_watts{job=\"a\"}"), kGrantA, 1e-6);
  EXPECT_NEAR(m.at("headroom_job_grant_watts{job=\"b\"}"), kGrantB, 1e-6);
  EXPECT_DOUBLE_EQ(m.at("headroom_job_power_watts{job=\"b\"}"), 550.0);
  EXPECT_DOUBLE_EQ(m.at("headroom_job_floor_watts{job=\"a\"}"), 100.0);
  EXPECT_DOUBLE_EQ(m.at("headroom_site_budget_watts"), kSiteW);
  EXPECT_DOUBLE_EQ(m.at("headroom_site_target_budget_watts"), kSiteW);
  EXPECT_DOUBLE_EQ(m.at("headroom_site_reserve_watts"), kReserveW);
  EXPECT_NEAR(m.at("headroom_site_grants_watts"), kAvailableW, 1e-6);
  EXPECT_NEAR(m.at("headroom_site_held_watts"), kAvailableW, 1e-6);
  EXPECT_DOUBLE_EQ(m.at("headroom_site_acting_budget_watts"), 320.0 + 560.0);
  EXPECT_EQ(m.at("headroom_coordinator_leader"), 1.0);
  EXPECT_GT(m.at("headroom_coordinator_term"), 0.0);
  EXPECT_GE(m.at("headroom_coordinator_ledger_writes_total"), 1.0);
  EXPECT_EQ(m.at("headroom_coordinator_elections_won_total"), 1.0);  // one replica, elected once
  EXPECT_EQ(m.at("headroom_coordinator_leadership_lost_total"), 0.0);
  EXPECT_EQ(types["headroom_coordinator_elections_won_total"], "counter");
  EXPECT_EQ(types["headroom_coordinator_leadership_lost_total"], "counter");
  EXPECT_TRUE(m.contains("headroom_site_reassignments_total"));
  EXPECT_TRUE(m.contains("headroom_coordinator_txn_latency_seconds{quantile=\"0.5\"}"));
  EXPECT_TRUE(m.contains("headroom_coordinator_txn_latency_seconds{quantile=\"0.99\"}"));
  EXPECT_GE(m.at("headroom_coordinator_txn_latency_seconds_count"), 1.0);
  EXPECT_EQ(types["headroom_coordinator_txn_latency_seconds"], "summary");
  EXPECT_EQ(types["headroom_coordinator_ledger_writes_total"], "counter");
  EXPECT_EQ(types["headroom_job_grant_watts"], "gauge");
}

// Issue 55: a domain says so, with its place under its parent site, in its status and its
// metrics; its budget is its grant from there, so a POST of its own is refused (409).
TEST_F(CoordinatorServerTest, ADomainShowsItsParentAndRefusesABudgetOfItsOwn) {
  TwoJobs();
  Replica site = StartReplica("c0");
  Step(site);
  json s = GetJson(site, "/v1/status");
  EXPECT_EQ(s["level"], "site");
  EXPECT_TRUE(s["parent"].is_null());
  site.server->Stop();

  Replica r = StartReplica("d0", kToken, {}, nullptr, "top");
  coord::ParentStatus p;
  p.etcd = "http://127.0.0.1:2379";
  p.site = "top";
  p.state = "granted";
  p.job_budget_w = 700;
  p.pending_w = 600;
  p.floor_w = 350;
  p.fences = 2;
  r.host->SetParent(p);
  Step(r);
  s = GetJson(r, "/v1/status");
  EXPECT_EQ(s["level"], "domain");
  EXPECT_EQ(s["parent"]["etcd"], "http://127.0.0.1:2379");
  EXPECT_EQ(s["parent"]["site"], "top");
  EXPECT_EQ(s["parent"]["state"], "granted");
  EXPECT_DOUBLE_EQ(s["parent"]["job_budget_w"].get<double>(), 700);
  EXPECT_DOUBLE_EQ(s["parent"]["pending_w"].get<double>(), 600);
  std::map<std::string, std::string> types;
  auto c = r.Client();
  httplib::Result res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const auto m = ParseMetrics(res->body, &types);
  EXPECT_EQ(m.at("headroom_domain_parent_state{state=\"granted\"}"), 1.0);
  EXPECT_EQ(m.at("headroom_domain_parent_state{state=\"fenced\"}"), 0.0);
  EXPECT_DOUBLE_EQ(m.at("headroom_domain_parent_budget_watts"), 700);
  EXPECT_DOUBLE_EQ(m.at("headroom_domain_parent_pending_watts"), 600);
  EXPECT_DOUBLE_EQ(m.at("headroom_domain_parent_floor_watts"), 350);
  EXPECT_EQ(m.at("headroom_domain_parent_fences_total"), 2.0);
  EXPECT_EQ(types["headroom_domain_parent_fences_total"], "counter");
  httplib::Result post = PostBudget(r, R"({"site_budget_w": 500})");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 409);
  EXPECT_NE(post->body.find("a domain of site 'top'"), std::string::npos) << post->body;
}

TEST(CoordinatorMetrics, LabelValuesAreEscaped) {
  coord::CoordinatorStatus s;
  s.role = "leader";
  s.term = 7;
  coord::Ledger l;
  l.site_budget_w = 10;
  l.target_site_budget_w = 10;
  l.jobs["we\"ird\\job\n"].grant_w = 3;
  s.ledger = l;
  const std::string text = CoordinatorMetricsText(s);
  EXPECT_NE(text.find("headroom_job_grant_watts{job=\"we\\\"ird\\\\job\\n\"} 3\n"),
            std::string::npos)
      << text;
  std::map<std::string, std::string> types;
  ParseMetrics(text, &types);  // every line well formed
}

TEST_F(CoordinatorServerTest, PostSiteBudgetNeedsTheTokenAndAGoodBody) {
  TwoJobs();
  Replica r = StartReplica("c0");
  Step(r, 3);
  const auto expect = [&](const httplib::Result& res, int status, const std::string& text) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    if (!text.empty()) {
      EXPECT_NE(j.value("error", "").find(text), std::string::npos) << res->body;
    }
  };
  expect(PostBudget(r, R"({"site_budget_w": 1200})", ""), 401, "bearer token");
  expect(PostBudget(r, R"({"site_budget_w": 1200})", "wrong-token"), 401, "bearer token");
  expect(PostBudget(r, R"({"site_budget_w": 1200})", "s3cret-tokeX"), 401, "");
  expect(PostBudget(r, R"({"site_budget_w": 1200})", kToken, "text/plain"), 415, "Content-Type");
  expect(PostBudget(r, "not json"), 400, "body");
  expect(PostBudget(r, "[1200]"), 400, "body");
  expect(PostBudget(r, "{}"), 400, "site_budget_w: missing");
  expect(PostBudget(r, R"({"reserve_w": -1})"), 400, "reserve_w");
  expect(PostBudget(r, R"({"reserve_w": null})"), 400, "reserve_w");
  // A reserve at or above the budget; the budget less a larger reserve below the floors.
  expect(PostBudget(r, R"({"site_budget_w": 1000, "reserve_w": 1000})"), 400, "reserve_w");
  expect(PostBudget(r, R"({"reserve_w": 800})"), 400, "below the floors");
  expect(PostBudget(r, R"({"site_budget_w": "1200"})"), 400, "site_budget_w");
  expect(PostBudget(r, R"({"site_budget_w": true})"), 400, "site_budget_w");
  expect(PostBudget(r, R"({"site_budget_w": null})"), 400, "site_budget_w");
  expect(PostBudget(r, R"({"site_budget_w": 0})"), 400, "site_budget_w");
  expect(PostBudget(r, R"({"site_budget_w": -5})"), 400, "site_budget_w");
  expect(PostBudget(r, R"({"site_budget_w": 2e9})"), 400, "site_budget_w");
  expect(PostBudget(r, R"({"site_budget_w": 1e400})"), 400, "");  // not finite: refused
  expect(PostBudget(r, R"({"site_budget_w": 1200, "extra": 1})"), 400, "extra");
  expect(PostBudget(r, R"({"site_budget": 1200})"), 400, "site_budget");
  expect(PostBudget(r, std::string(5000, ' ')), 413, "");
  // Below the floors (300 W) + the reserve (100 W): the coordinator's refusal, with its numbers.
  expect(PostBudget(r, R"({"site_budget_w": 350})"), 400, "below the floors");
  // Nothing of that changed the ledger.
  Step(r, 2);
  EXPECT_DOUBLE_EQ(StoredLedger().target_site_budget_w, kSiteW);

  // 202 once the target is in the store (its own key, with the revision that wrote it).
  httplib::Result ok = PostBudget(r, R"({"site_budget_w": 1200})");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 202) << ok->body;
  const json j = json::parse(ok->body);
  EXPECT_DOUBLE_EQ(j["target_site_budget_w"].get<double>(), 1200.0);
  EXPECT_DOUBLE_EQ(j["reserve_w"].get<double>(), kReserveW);
  auto target = store_.Get("/headroom/s/target", false);
  ASSERT_TRUE(target && target->kvs.size() == 1u);
  EXPECT_EQ(target->kvs[0].mod_revision, j["revision"].get<int64_t>());
  auto t = coord::TargetFromJson(target->kvs[0].value, "target");
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_DOUBLE_EQ(t->site_budget_w, 1200.0);
  Step(r, 2);
  EXPECT_DOUBLE_EQ(StoredLedger().site_budget_w, 1200.0);  // an increase: in force at once
  EXPECT_DOUBLE_EQ(GetJson(r, "/v1/status")["site_budget_w"].get<double>(), 1200.0);
  EXPECT_EQ(StoredLedger().target_revision, j["revision"].get<int64_t>());

  // The reserve alone: a decrease is in force at once, an increase once the held watts fit.
  ok = PostBudget(r, R"({"reserve_w": 50})");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 202) << ok->body;
  EXPECT_DOUBLE_EQ(json::parse(ok->body)["target_site_budget_w"].get<double>(), 1200.0);
  Step(r, 2);
  EXPECT_DOUBLE_EQ(StoredLedger().reserve_w, 50.0);
  ok = PostBudget(r, R"({"reserve_w": 300})");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 202) << ok->body;
  Step(r, 2);
  coord::Ledger l = StoredLedger();
  EXPECT_DOUBLE_EQ(l.TargetReserveW(), 300.0);
  EXPECT_LE(l.HeldW(), l.site_budget_w - l.reserve_w + 1e-6);
  AckGrants();
  Step(r, 2);
  l = StoredLedger();
  EXPECT_DOUBLE_EQ(l.reserve_w, 300.0);
  EXPECT_LT(l.target_reserve_w, 0.0);
  EXPECT_LE(l.HeldW(), 1200.0 - 300.0 + 1e-6);
}

// Issue 32, F4: a request answered is not lost with the leader that took it. The target is in
// the store before the answer; a new leader applies it.
TEST_F(CoordinatorServerTest, ATargetWrittenSurvivesTheLeaderThatTookIt) {
  TwoJobs();
  Replica first = StartReplica("c0");
  Step(first, 3);
  AckGrants();
  httplib::Result ok = PostBudget(first, R"({"site_budget_w": 700})");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 202) << ok->body;
  // The leader goes before its next period (its lease revoked: no resignation of its own).
  first.host->Resign();
  Replica second = StartReplica("c1");
  Step(second, 2);
  AckGrants();
  Step(second, 2);
  const coord::Ledger l = StoredLedger();
  EXPECT_DOUBLE_EQ(l.target_site_budget_w, 700.0);
  EXPECT_DOUBLE_EQ(l.site_budget_w, 700.0);
  EXPECT_LE(l.HeldW(), 700.0 - kReserveW + 1e-6);
}

TEST_F(CoordinatorServerTest, ADecreaseIsInForceOnceTheMembersAcknowledge) {
  TwoJobs();
  Replica r = StartReplica("c0");
  Step(r, 3 + kNewLedgerHoldSteps);
  AckGrants();
  Step(r, 2);
  httplib::Result ok = PostBudget(r, R"({"site_budget_w": 700})");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 202) << ok->body;
  Step(r, 2);
  coord::Ledger l = StoredLedger();
  EXPECT_DOUBLE_EQ(l.target_site_budget_w, 700.0);
  EXPECT_DOUBLE_EQ(l.site_budget_w, kSiteW);  // held until the members act on less
  AckGrants();
  Step(r, 2);
  l = StoredLedger();
  EXPECT_DOUBLE_EQ(l.site_budget_w, 700.0);
  EXPECT_LE(l.HeldW(), 700.0 - kReserveW + 1e-6);
  const json s = GetJson(r, "/v1/status");
  ASSERT_EQ(s["decrease_settle_s"].size(), 1u);
  EXPECT_GT(s["decrease_settle_s"][0].get<double>(), 0.0);
  auto c = r.Client();
  httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  std::map<std::string, std::string> types;
  const auto m = ParseMetrics(metrics->body, &types);
  EXPECT_DOUBLE_EQ(m.at("headroom_site_budget_decrease_settle_seconds"),
                   s["decrease_settle_s"][0].get<double>());
  EXPECT_DOUBLE_EQ(m.at("headroom_site_budget_watts"), 700.0);
}

// A target accepted is told to the daemon's loop (which plans at once instead of at its next
// period); a refused one, or one a follower answers, is not.
TEST_F(CoordinatorServerTest, AnAcceptedTargetWakesThePlanAtOnce) {
  TwoJobs();
  Replica leader = StartReplica("c0");
  Replica follower = StartReplica("c1");
  std::atomic<int> leader_woken{0}, follower_woken{0};
  leader.host->SetOnTarget([&] { ++leader_woken; });
  follower.host->SetOnTarget([&] { ++follower_woken; });
  Step(leader, 2);
  Step(follower, 1);
  httplib::Result refused = PostBudget(leader, R"({"site_budget_w": -5})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(leader_woken.load(), 0);
  httplib::Result elsewhere = PostBudget(follower, R"({"site_budget_w": 700})");
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(elsewhere->status, 409);
  httplib::Result ok = PostBudget(leader, R"({"site_budget_w": 700})");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 202) << ok->body;
  EXPECT_EQ(leader_woken.load(), 1);  // told before the answer
  EXPECT_EQ(follower_woken.load(), 0);
}

TEST_F(CoordinatorServerTest, AFollowerRefusesWritesAndNamesTheLeader) {
  TwoJobs();
  Replica leader = StartReplica("c0");
  Replica follower = StartReplica("c1");
  Step(leader, 2);
  follower.host->Step();
  const json s = GetJson(follower, "/v1/status");
  EXPECT_EQ(s["role"], "follower");
  EXPECT_EQ(s["leader"], "c0");
  EXPECT_EQ(s["leader_listen"], "127.0.0.1:" + std::to_string(leader.port()));
  EXPECT_TRUE(s["site_budget_w"].is_null());
  EXPECT_TRUE(s["jobs"].empty());
  httplib::Result res = PostBudget(follower, R"({"site_budget_w": 1200})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409) << res->body;
  EXPECT_NE(res->body.find("c0"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("127.0.0.1:" + std::to_string(leader.port())), std::string::npos);
  auto c = follower.Client();
  httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  std::map<std::string, std::string> types;
  const auto m = ParseMetrics(metrics->body, &types);
  EXPECT_EQ(m.at("headroom_coordinator_leader"), 0.0);
  EXPECT_EQ(m.at("headroom_coordinator_elections_won_total"), 0.0);  // never led
  EXPECT_FALSE(m.contains("headroom_site_budget_watts"));  // a follower's ledger is not current
}

TEST_F(CoordinatorServerTest, RoutesMethodsAndHosts) {
  Replica r = StartReplica("c0", /*token=*/"", {"coord.example"});
  Step(r);
  auto c = r.Client();
  httplib::Result page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("<canvas"), std::string::npos);
  EXPECT_NE(page->body.find("/v1/status"), std::string::npos);
  // Self-contained: nothing from elsewhere.
  EXPECT_EQ(page->body.find("http://"), page->body.find("\"http://\" + s.leader_listen") + 1);
  EXPECT_EQ(page->body.find("https://"), std::string::npos);
  EXPECT_EQ(page->body.find(" src="), std::string::npos);

  httplib::Result missing = c.Get("/v2/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  httplib::Result wrong = c.Get("/v1/site-budget");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  httplib::Result post_status = c.Post("/v1/status", "{}", "application/json");
  ASSERT_TRUE(post_status);
  EXPECT_EQ(post_status->status, 405);
  httplib::Result del = c.Delete("/metrics");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  httplib::Result put = c.Put("/", "x", "text/plain");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);

  // No token configured: writes are open (the replica listens on loopback only, by the CLI's
  // rule), yet a DNS name that may have been rebound to it is refused.
  httplib::Result rebound =
      c.Get("/v1/status", httplib::Headers{{"Host", "attacker.example:10471"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
  httplib::Result allowed = c.Get("/v1/status", httplib::Headers{{"Host", "coord.example:10471"}});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200);
  httplib::Result open = PostBudget(r, R"({"site_budget_w": 1500})", "");
  ASSERT_TRUE(open);
  EXPECT_EQ(open->status, 202) << open->body;
}

// The transport's rules, on the coordinator as on the agent (net/router.h, net/policy.h).
TEST_F(CoordinatorServerTest, QueriesHeadAndTheTokensChallenge) {
  Replica r = StartReplica("c0");
  Step(r);
  auto c = r.Client();
  httplib::Result query = c.Get("/v1/status?verbose=1");
  ASSERT_TRUE(query);
  EXPECT_EQ(query->status, 400);
  EXPECT_NE(query->body.find("unknown parameter 'verbose'"), std::string::npos) << query->body;
  httplib::Result head = c.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  httplib::Result unauthorized = PostBudget(r, R"({"site_budget_w": 1200})", "");
  ASSERT_TRUE(unauthorized);
  EXPECT_EQ(unauthorized->status, 401);
  EXPECT_EQ(unauthorized->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(unauthorized->get_header_value("Cache-Control"), "no-store");
  const json s = GetJson(r, "/v1/status");
  ASSERT_TRUE(s.contains("connections")) << s.dump();
  EXPECT_GE(s["connections"]["open"].get<int>(), 1);
  EXPECT_GE(s["connections"]["requests"].get<int>(), 4);
}

// A Store that, once armed, holds its next Get until released: a period stuck in the store's
// I/O (etcd slow, or partitioned from this replica) while it holds the coordinator's mutex.
class StallingStore final : public coord::Store {
 public:
  explicit StallingStore(coord::Store& inner) : inner_(inner) {}
  void Arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
  }
  void WaitStalled() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return stalled_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  // The first read after Arm stalls: a Get, or the leader view's Watch of its prefix.
  Result<coord::RangeResult> Get(const std::string& key, bool prefix = false) override {
    StallIfArmed();
    return inner_.Get(key, prefix);
  }
  Result<int64_t> Put(const std::string& key, const std::string& value,
                      coord::LeaseId lease = 0) override {
    return inner_.Put(key, value, lease);
  }
  Result<int64_t> Delete(const std::string& key, bool prefix = false) override {
    return inner_.Delete(key, prefix);
  }
  Result<coord::TxnResult> Txn(const coord::TxnRequest& request) override {
    return inner_.Txn(request);
  }
  Result<coord::LeaseId> LeaseGrant(int64_t ttl_s) override { return inner_.LeaseGrant(ttl_s); }
  Result<int64_t> LeaseKeepAlive(coord::LeaseId lease) override {
    return inner_.LeaseKeepAlive(lease);
  }
  Status LeaseRevoke(coord::LeaseId lease) override { return inner_.LeaseRevoke(lease); }
  Result<coord::WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                                   double wait_s) override {
    StallIfArmed();
    return inner_.Watch(key, prefix, after_revision, wait_s);
  }
  Status Compact(int64_t revision) override { return inner_.Compact(revision); }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  void StallIfArmed() {
    std::unique_lock lock(mu_);
    if (!armed_) return;
    armed_ = false;
    stalled_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
  }

  coord::Store& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stalled_ = false;
  bool released_ = false;
};

// Issue 32: a budget request waits for the period in progress (its store I/O) and then for the
// store; it does so on the transport's worker, so every other client is answered meanwhile.
TEST_F(CoordinatorServerTest, ABudgetRequestWaitingOnTheStoreHoldsUpNoRead) {
  TwoJobs();
  StallingStore stalling(store_);
  Replica r = StartReplica("c0", kToken, {}, &stalling);
  Step(r, 3);
  stalling.Arm();
  std::thread period([&] { r.host->Step(); });  // holds the coordinator's mutex, stuck
  stalling.WaitStalled();
  const uint64_t before = r.server->counters().requests;
  std::atomic<bool> answered{false};
  std::optional<httplib::Result> posted;
  std::thread post([&] {
    posted.emplace(PostBudget(r, R"({"site_budget_w": 1200})"));
    answered = true;
  });
  // The request has reached the server (and waits on the coordinator's mutex, off the loop).
  while (r.server->counters().requests == before) std::this_thread::yield();
  for (int i = 0; i < 20; ++i) {
    auto c = r.Client();
    httplib::Result status = c.Get("/v1/status");
    ASSERT_TRUE(status) << i;
    EXPECT_EQ(status->status, 200);
    httplib::Result metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics) << i;
    EXPECT_EQ(metrics->status, 200);
  }
  EXPECT_FALSE(answered.load());  // still waiting for the store
  stalling.Release();
  period.join();
  post.join();
  ASSERT_TRUE(posted && *posted);
  EXPECT_EQ((*posted)->status, 202) << (*posted)->body;
  const json j = json::parse((*posted)->body);
  EXPECT_EQ(j.size(), 3u) << (*posted)->body;
  EXPECT_DOUBLE_EQ(j["target_site_budget_w"].get<double>(), 1200.0);
}

TEST(CoordinatorServerBind, ASecondServerOnAPortInUseFails) {
  CoordinatorServer first(CoordinatorApiConfig{});
  ASSERT_TRUE(first.Bind("127.0.0.1", 0).ok());
  CoordinatorServer second(CoordinatorApiConfig{});
  Status st = second.Bind("127.0.0.1", first.port());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find(std::to_string(first.port())), std::string::npos)
      << st.error().message();
}

// ---- The real binary ----

struct Ran {
  int exit_code = -1;
  std::string err;
};

Ran RunToEnd(const std::vector<std::string>& args) {
  Process p(HEADROOM_BINARY, args);
  const std::optional<int> status = p.Wait(std::chrono::seconds(30));
  Ran r;
  r.err = p.Stderr();
  if (status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  return r;
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

TEST(CoordinatorCli, EtcdUnreachableAtStartIsOneLineAndExit1) {
  const Ran r = RunToEnd(
      {"coordinator", "--etcd", "http://127.0.0.1:1", "--site", "s", "--site-budget-w", "1000"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("http://127.0.0.1:1"), std::string::npos) << r.err;
}

TEST(CoordinatorCli, BadOptionsAreOneLineAndExit2) {
  const std::vector<std::string> base = {"coordinator", "--etcd", "http://127.0.0.1:1"};
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"--site", "bad name", "--site-budget-w", "1000"}, "--site"},
      {{"--site", "s", "--site-budget-w", "0"}, "--site-budget-w"},
      {{"--site", "s", "--site-budget-w", "nan"}, "--site-budget-w"},
      {{"--site", "s", "--site-budget-w", "1000", "--reserve-w", "1000"}, "--reserve-w"},
      {{"--site", "s", "--site-budget-w", "1000", "--reserve-w", "-1"}, "--reserve-w"},
      {{"--site", "s", "--site-budget-w", "1000", "--period-s", "0.05"}, "--period-s"},
      {{"--site", "s", "--site-budget-w", "1000", "--period-s", "61"}, "--period-s"},
      {{"--site", "s", "--site-budget-w", "1000", "--lease-ttl-s", "1"}, "--lease-ttl-s"},
      {{"--site", "s", "--site-budget-w", "1000", "--lease-ttl-s", "2.5"}, "--lease-ttl-s"},
      {{"--site", "s", "--site-budget-w", "1000", "--period-s", "5", "--lease-ttl-s", "4"},
       "must exceed --period-s"},
      {{"--site", "s", "--site-budget-w", "1000", "--listen", "0.0.0.0:10471"}, "--listen"},
      {{"--site", "s", "--site-budget-w", "1000", "--listen", "nonsense"}, "--listen"},
      {{"--site", "s", "--site-budget-w", "1000", "--token", "a b"}, "--token"},
      {{"--site", "s", "--site-budget-w", "1000", "--token-on-reads"}, "--token-on-reads"},
      {{"--site", "s", "--site-budget-w", "1000", "--forget-after-s", "0"}, "--forget-after-s"},
      {{"--site-budget-w", "1000"}, "--site"},
      {{"--site", "s", "--site-budget-w", "1000", "--parent-etcd", "http://127.0.0.1:1"},
       "--parent-etcd and --parent-site"},
      {{"--site", "s", "--site-budget-w", "1000", "--parent-site", "top"},
       "--parent-etcd and --parent-site"},
      {{"--site", "s", "--site-budget-w", "1000", "--parent-etcd", "http://127.0.0.1:1",
        "--parent-site", "bad name"},
       "--parent-site"},
      {{"--site", "s", "--site-budget-w", "1000", "--parent-etcd", "http://127.0.0.1:1",
        "--parent-site", "top", "--parent-lease-ttl-s", "2"},
       "--parent-lease-ttl-s"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Ran r = RunToEnd(args);
    EXPECT_EQ(r.exit_code, 2) << c.names << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << c.names << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
  // The endpoints and the TLS options, before anything is reached.
  for (const std::vector<std::string>& etcd :
       {std::vector<std::string>{"--etcd", "http://127.0.0.1:1,https://127.0.0.1:2"},
        std::vector<std::string>{"--etcd", "ftp://127.0.0.1:2379"},
        std::vector<std::string>{"--etcd", "http://127.0.0.1:1", "--etcd-cacert", "/etc/hostname"},
        std::vector<std::string>{"--etcd", "https://127.0.0.1:1", "--etcd-cert", "/etc/hostname"},
        std::vector<std::string>{"--etcd", "http://127.0.0.1:1", "--etcd-user", "u"}}) {
    std::vector<std::string> args = {"coordinator", "--site", "s", "--site-budget-w", "1000"};
    args.insert(args.end(), etcd.begin(), etcd.end());
    const Ran bad_etcd = RunToEnd(args);
    EXPECT_EQ(bad_etcd.exit_code, 2) << etcd.back() << ": " << bad_etcd.err;
    EXPECT_EQ(Lines(bad_etcd.err), 1) << bad_etcd.err;
    EXPECT_NE(bad_etcd.err.find("--etcd"), std::string::npos) << bad_etcd.err;
  }
  const Ran unreadable =
      RunToEnd({"coordinator", "--site", "s", "--site-budget-w", "1000", "--etcd",
                "https://127.0.0.1:1", "--etcd-cacert", "/nonexistent/ca.pem"});
  EXPECT_EQ(unreadable.exit_code, 1) << unreadable.err;
  EXPECT_NE(unreadable.err.find("/nonexistent/ca.pem: cannot read (--etcd-cacert)"),
            std::string::npos)
      << unreadable.err;
}

#ifdef HEADROOM_HAVE_ETCD_CLUSTER

TEST(CoordinatorCli, TwoReplicasOneLeadsAndTheOtherTakesOverWhenItIsKilled) {
  using etcd_test::EtcdCluster;
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> etcd = EtcdCluster::Start(1, &why);
  ASSERT_TRUE(etcd) << why;
  const std::string site = "cli-" + std::to_string(getpid());
  const std::vector<std::string> args = {
      "coordinator", "--etcd", etcd->endpoints(), "--site", site,       "--site-budget-w", "1000",
      "--period-s",  "0.2",    "--lease-ttl-s",   "2",      "--listen", "127.0.0.1:0"};
  std::vector<std::unique_ptr<Process>> replicas;
  replicas.push_back(std::make_unique<Process>(HEADROOM_BINARY, args));
  replicas.push_back(std::make_unique<Process>(HEADROOM_BINARY, args));
  std::vector<int> ports;
  for (auto& p : replicas) {
    ports.push_back(p->ListenPort(std::chrono::seconds(20)));
    ASSERT_GT(ports.back(), 0) << p->Stderr();
  }

  // Exactly one leads; the other follows it.
  int leader = -1;
  int64_t term = 0;
  std::string leader_id;
  for (auto deadline = SteadyClock::now() + std::chrono::seconds(20);
       leader < 0 && SteadyClock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
    std::vector<std::optional<json>> s = {coord::StatusOf(ports[0]), coord::StatusOf(ports[1])};
    if (!s[0] || !s[1]) continue;
    const bool l0 = (*s[0])["role"] == "leader", l1 = (*s[1])["role"] == "leader";
    ASSERT_FALSE(l0 && l1) << s[0]->dump() << "\n" << s[1]->dump();
    if (l0 == l1) continue;
    const int i = l0 ? 0 : 1;
    if ((*s[1 - i])["role"] != "follower" || (*s[i])["site_budget_w"].is_null()) continue;
    leader = i;
    term = (*s[i])["term"].get<int64_t>();
    leader_id = (*s[i])["id"].get<std::string>();
    EXPECT_EQ((*s[1 - i])["leader"], leader_id);
    EXPECT_DOUBLE_EQ((*s[i])["site_budget_w"].get<double>(), 1000.0);
  }
  ASSERT_GE(leader, 0) << replicas[0]->Stderr() << "\n" << replicas[1]->Stderr();
  EXPECT_GT(term, 0);

  // SIGKILL: no resignation; the other leads once the lease runs out, with a higher term.
  replicas[leader]->Kill(SIGKILL);
  ASSERT_TRUE(replicas[leader]->Wait(std::chrono::seconds(10)));
  const int other = 1 - leader;
  int64_t new_term = 0;
  for (auto deadline = SteadyClock::now() + std::chrono::seconds(20);
       new_term == 0 && SteadyClock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
    std::optional<json> s = coord::StatusOf(ports[other]);
    if (s && (*s)["role"] == "leader") new_term = (*s)["term"].get<int64_t>();
  }
  ASSERT_GT(new_term, 0) << replicas[other]->Stderr();
  EXPECT_GT(new_term, term);

  // SIGTERM: it resigns (its lease revoked: the leader key is gone at once) and exits 0.
  replicas[other]->Kill(SIGTERM);
  const std::optional<int> status = replicas[other]->Wait(std::chrono::seconds(15));
  ASSERT_TRUE(status) << replicas[other]->Stderr();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << replicas[other]->Stderr();
  const auto range = etcd->Post(
      0, "/v3/kv/range", json{{"key", coord::Base64("/headroom/" + site + "/leader")}}.dump());
  ASSERT_TRUE(range);
  const json r = json::parse(range->body, nullptr, false);
  EXPECT_FALSE(r.contains("kvs")) << range->body;
}

// Issue 53: a replica started while etcd had no quorum said "etcd refuses to read" and named
// --etcd-user; it says the read was not answered, and that quorum may be why.
TEST(CoordinatorCli, EtcdWithoutQuorumAtStartSaysItDidNotAnswer) {
  using etcd_test::EtcdCluster;
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> etcd = EtcdCluster::Start(3, &why);
  ASSERT_TRUE(etcd) << why;
  etcd->Kill(1);
  etcd->Kill(2);  // one member of three: no quorum, its reads are never answered
  const Ran r = RunToEnd({"coordinator", "--etcd", etcd->endpoint(0), "--site", "s",
                          "--site-budget-w", "1000", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("etcd did not answer a read of /headroom/s/ within "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("no quorum?"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("refuses"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--etcd-user"), std::string::npos) << r.err;
}

#endif  // HEADROOM_HAVE_ETCD_CLUSTER

}  // namespace
}  // namespace headroom::coord_server
