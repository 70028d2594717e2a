// Domains under a site (coord/domain.h, plan.h rule 1a) against real processes: two etcds the
// test starts (the site's and the domain's), the coordinator binary at each level (the domain's
// with --parent-etcd and --parent-site), and agents written as an agent writes them (each on a
// lease of its own, acknowledging its grant only when the test lets it), one at the site and
// two in the domain. What is checked is read back from the two etcds, not from a coordinator's
// memory. Each composition rule has its test, which fails without the rule:
//   - down before up: a lower grant is acknowledged to the site only once the domain's jobs hold
//     no more (without: the site's ledger lowers the domain's held watts while its jobs still
//     act on more);
//   - a domain whose coordinator is killed keeps its watts counted at the site until the next
//     one takes its place (without: the site fences it to its floor and gives the rest away
//     while its jobs still draw it);
//   - a domain cut off from its site brings its jobs to their floors (the agent's fencing rule
//     one level up).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coord/layout.h"
#include "etcd/etcd_store.h"
#include "support/child_process.h"
#include "support/etcd_cluster.h"
#include "support/site_processes.h"

namespace headroom::coord {
namespace {

using etcd_test::EtcdCluster;
using nlohmann::json;
using test_support::Process;
using Clock = std::chrono::steady_clock;

constexpr double kWaitS = 30.0;  // every wait is for an event; this only bounds a failure
constexpr double kEpsW = 1e-6;
constexpr double kDomainReserveW = 50.0;

// One level: its etcd, a store on it, its coordinator, its agents (job -> lease) and what each
// acknowledged.
struct Level {
  std::string site;
  std::optional<EtcdCluster> etcd;
  std::unique_ptr<etcd::EtcdStore> store;
  std::unique_ptr<Process> coordinator;
  int port = 0;
  std::map<std::string, LeaseId> agents;
  std::map<std::string, int64_t> acked;

  std::optional<Ledger> ReadLedger() const {
    const Keys keys(site);
    auto r = store->Get(keys.ledger());
    if (!r || r->kvs.empty()) return std::nullopt;
    auto l = LedgerFromJson(r->kvs[0].value, keys.ledger());
    if (!l) return std::nullopt;
    return *l;
  }
  // Each agent acts on its newest grant and acknowledges it.
  void AckGrants() {
    const Keys keys(site);
    for (const auto& [job, lease] : agents) {
      auto r = store->Get(keys.grant(job));
      if (!r || r->kvs.empty()) continue;
      auto g = GrantFromJson(r->kvs[0].value, keys.grant(job));
      if (!g || g->lease != lease || !g->admitted || g->seq <= acked[job]) continue;
      const Ack a{job, g->term, g->seq, lease, g->job_budget_w};
      if (store->Put(keys.ack(job), ToJson(a), lease)) acked[job] = g->seq;
    }
  }
  void Join(const std::string& job, double floor_w, double demand_w) {
    auto lease = store->LeaseGrant(300);
    ASSERT_TRUE(lease) << lease.error().message();
    Member m;
    m.job = job;
    m.gpus = 1;
    m.floor_w = floor_w;
    m.demand_w = demand_w;
    m.nameplate_w = demand_w;
    m.lease = *lease;
    m.phase = "rollout";
    ASSERT_TRUE(store->Put(Keys(site).member(job), ToJson(m), *lease));
    agents[job] = *lease;
  }
};

class DomainProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
    for (Level* l : {&top_, &rack_}) {
      std::string why;
      l->etcd = EtcdCluster::Start(1, &why);
      ASSERT_TRUE(l->etcd) << why;
      auto store = etcd::EtcdStore::Open(l->etcd->endpoints());
      ASSERT_TRUE(store) << store.error().message();
      l->store = std::move(*store);
    }
    top_.site = "top-" + std::to_string(getpid());
    rack_.site = "rack-" + std::to_string(getpid());
    top_.coordinator = Coordinator(top_, 3000, {});
    ASSERT_GT(top_.port, 0) << top_.coordinator->Stderr();
    StartDomain();
    top_.Join("x", 100, 1500);
    rack_.Join("a", 100, 800);
    rack_.Join("b", 150, 900);
  }

  std::unique_ptr<Process> Coordinator(Level& l, double site_budget_w,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"coordinator",
                                     "--etcd",
                                     l.etcd->endpoints(),
                                     "--site",
                                     l.site,
                                     "--site-budget-w",
                                     fmt::format("{}", site_budget_w),
                                     "--period-s",
                                     "0.2",
                                     "--lease-ttl-s",
                                     "2",
                                     "--listen",
                                     "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Process>(HEADROOM_BINARY, args);
    l.port = p->ListenPort(std::chrono::seconds(20));
    return p;
  }
  void StartDomain() {
    rack_.coordinator = Coordinator(
        rack_, 1200,
        {"--reserve-w", fmt::format("{}", kDomainReserveW), "--parent-etcd", top_.etcd->endpoints(),
         "--parent-site", top_.site, "--parent-lease-ttl-s", "3"});
    ASSERT_GT(rack_.port, 0) << rack_.coordinator->Stderr();
  }

  // Polls `done` until it holds (true) or kWaitS passes (false); the agents at the levels in
  // `acking` act on their grants meanwhile.
  bool WaitFor(const std::function<bool()>& done, std::vector<Level*> acking) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(kWaitS);
    while (Clock::now() < deadline) {
      for (Level* l : acking) l->AckGrants();
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  }
  bool WaitForBoth(const std::function<bool()>& done) { return WaitFor(done, {&top_, &rack_}); }

  // The domain's state under its site, from its /v1/status ("" when it does not answer).
  std::string ParentState() {
    const std::optional<json> s = StatusOf(rack_.port);
    if (!s || !(*s)["parent"].is_object()) return "";
    return (*s)["parent"]["state"].get<std::string>();
  }
  // Steady: the domain granted, its budget in force its grant, every agent acting on its grant.
  bool Steady() {
    const std::optional<Ledger> t = top_.ReadLedger(), r = rack_.ReadLedger();
    if (!t || !r || !t->jobs.contains(rack_.site)) return false;
    const LedgerJob& d = t->jobs.at(rack_.site);
    if (ParentState() != "granted" || std::abs(r->site_budget_w - d.grant_w) > kEpsW ||
        std::abs(d.held_w - d.grant_w) > kEpsW) {
      return false;
    }
    // Every watt granted (the demands exceed both budgets), and acted on.
    for (const std::optional<Ledger>& led : {t, r}) {
      if (std::abs(led->HeldW() - (led->site_budget_w - led->reserve_w)) > 1.0) return false;
    }
    for (const Level* l : {&top_, &rack_}) {
      const std::optional<Ledger> led = l == &top_ ? t : r;
      for (const auto& [job, lease] : l->agents) {
        const auto j = led->jobs.find(job);
        if (j == led->jobs.end() || std::abs(j->second.held_w - j->second.grant_w) > kEpsW) {
          return false;
        }
      }
    }
    return true;
  }
  // The composition, from the two ledgers as read now: the domain's budget in force within
  // what the site holds for it, and the site's invariant.
  void ExpectComposed(const std::string& when) {
    const std::optional<Ledger> t = top_.ReadLedger(), r = rack_.ReadLedger();
    ASSERT_TRUE(t && r) << when;
    ASSERT_TRUE(t->jobs.contains(rack_.site)) << when;
    EXPECT_LE(r->site_budget_w, t->jobs.at(rack_.site).held_w + kEpsW) << when;
    EXPECT_LE(t->HeldW(), t->site_budget_w - t->reserve_w + kEpsW) << when;
  }
  int64_t ViewUpdates() {
    const std::optional<json> s = StatusOf(rack_.port);
    return s ? (*s)["view_updates"].get<int64_t>() + (*s)["site_lists"].get<int64_t>() : 0;
  }

  void TearDown() override {
    for (Level* l : {&rack_, &top_}) {
      if (l->coordinator) {
        l->coordinator->Kill(SIGKILL);
        l->coordinator->Wait(std::chrono::seconds(10));
      }
    }
  }

  Level top_, rack_;
};

// Down before up: the site's cut reaches the domain's jobs as lower grants at once, and the
// domain acknowledges it to the site only once they act on them.
TEST_F(DomainProcesses, ASiteCutIsAcknowledgedOnlyOnceTheDomainsJobsHoldNoMore) {
  ASSERT_TRUE(WaitForBoth([&] { return Steady(); }))
      << rack_.coordinator->Stderr() << top_.coordinator->Stderr();
  // What each level says of itself, and the site of its domain.
  const std::optional<json> ds = StatusOf(rack_.port), ts = StatusOf(top_.port);
  ASSERT_TRUE(ds && ts);
  EXPECT_EQ((*ds)["level"], "domain");
  EXPECT_EQ((*ds)["parent"]["site"], top_.site);
  EXPECT_EQ((*ts)["level"], "site");
  EXPECT_TRUE((*ts)["parent"].is_null());
  bool listed = false;
  for (const json& j : (*ts)["jobs"]) {
    if (j["job"] == rack_.site) listed = j["domain"].get<bool>();
  }
  EXPECT_TRUE(listed);
  // A budget is set at the site, never at a domain.
  httplib::Client domain_api("127.0.0.1", rack_.port);
  httplib::Result refused =
      domain_api.Post("/v1/site-budget", R"({"site_budget_w": 500})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 409) << refused->body;

  const double held_w = top_.ReadLedger()->jobs.at(rack_.site).held_w;
  httplib::Client site_api("127.0.0.1", top_.port);
  httplib::Result cut =
      site_api.Post("/v1/site-budget", R"({"site_budget_w": 1400})", "application/json");
  ASSERT_TRUE(cut);
  ASSERT_EQ(cut->status, 202) << cut->body;
  // The domain's agents do not act yet: its target follows the lower grant, its budget in force
  // cannot.
  double grant_w = 0.0;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::optional<Ledger> t = top_.ReadLedger(), r = rack_.ReadLedger();
        if (!t || !r) return false;
        grant_w = t->jobs.at(rack_.site).grant_w;
        return grant_w < held_w - 1.0 && std::abs(r->target_site_budget_w - grant_w) < kEpsW;
      },
      {&top_}))
      << rack_.coordinator->Stderr();
  // Five of the domain leader's periods later, still not acknowledged.
  const int64_t periods = ViewUpdates();
  ASSERT_TRUE(WaitFor([&] { return ViewUpdates() >= periods + 5; }, {&top_}));
  EXPECT_DOUBLE_EQ(top_.ReadLedger()->jobs.at(rack_.site).held_w, held_w);
  EXPECT_GT(rack_.ReadLedger()->site_budget_w, grant_w + 1.0);
  ExpectComposed("while the domain's jobs hold");
  // They act: the domain's decrease is in force, then acknowledged at the site.
  ASSERT_TRUE(WaitForBoth([&] { return Steady(); })) << rack_.coordinator->Stderr();
  EXPECT_NEAR(top_.ReadLedger()->jobs.at(rack_.site).held_w, grant_w, 1.0);
  ExpectComposed("after the cut");
}

// A killed domain coordinator: its jobs still act on their grants, so the site keeps what the
// domain holds counted, lease gone and all, until the next one registers and acknowledges.
TEST_F(DomainProcesses, AKilledDomainCoordinatorsWattsStayCountedAtTheSite) {
  ASSERT_TRUE(WaitForBoth([&] { return Steady(); })) << rack_.coordinator->Stderr();
  const LedgerJob before = top_.ReadLedger()->jobs.at(rack_.site);
  rack_.coordinator->Kill(SIGKILL);
  rack_.coordinator->Wait(std::chrono::seconds(10));
  // Its parent lease runs out: the site sees it gone.
  ASSERT_TRUE(WaitFor([&] { return top_.ReadLedger()->jobs.at(rack_.site).lease == 0; }, {&top_}))
      << top_.coordinator->Stderr();
  const LedgerJob gone = top_.ReadLedger()->jobs.at(rack_.site);
  EXPECT_DOUBLE_EQ(gone.held_w, before.held_w);
  ExpectComposed("the domain's coordinator killed");
  // The next one takes the place on the same watts.
  StartDomain();
  ASSERT_TRUE(WaitForBoth([&] {
    const LedgerJob j = top_.ReadLedger()->jobs.at(rack_.site);
    return j.lease != 0 && j.lease != before.lease && ParentState() == "granted";
  })) << rack_.coordinator->Stderr();
  ExpectComposed("the next domain coordinator");
  ASSERT_TRUE(WaitForBoth([&] { return Steady(); })) << rack_.coordinator->Stderr();
  // No cut on its way in: its jobs kept their budget (more while it declared all it held as
  // its floor).
  EXPECT_GE(rack_.ReadLedger()->site_budget_w, before.held_w - 1.0);
}

// Cut off from its site (the site's etcd stopped), the domain fences: its budget goes to its
// jobs' floors and its reserve, and its jobs' grants come down; back, it is granted again.
TEST_F(DomainProcesses, ADomainCutOffFromItsSiteBringsItsJobsToTheirFloors) {
  ASSERT_TRUE(WaitForBoth([&] { return Steady(); })) << rack_.coordinator->Stderr();
  const double floors_w = 100 + 150 + kDomainReserveW;
  kill(top_.etcd->pid(0), SIGSTOP);
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::optional<Ledger> r = rack_.ReadLedger();
        return ParentState() == "fenced" && r && std::abs(r->site_budget_w - floors_w) < kEpsW;
      },
      {&rack_}))
      << rack_.coordinator->Stderr();
  const Ledger r = *rack_.ReadLedger();
  EXPECT_NEAR(r.jobs.at("a").held_w, 100, kEpsW);
  EXPECT_NEAR(r.jobs.at("b").held_w, 150, kEpsW);
  kill(top_.etcd->pid(0), SIGCONT);
  ASSERT_TRUE(WaitForBoth([&] { return Steady(); })) << rack_.coordinator->Stderr();
  EXPECT_GT(rack_.ReadLedger()->site_budget_w, floors_w + 1.0);
  ExpectComposed("back");
}

}  // namespace
}  // namespace headroom::coord
