// Domains under a site (coord/domain.h, plan.h rule 1a): the parent's rules for a domain member
// (pure Plan), and two levels stepped in lockstep on the in-memory store -- a site coordinator,
// one agent at the site, a domain coordinator on a store of its own with its DomainLink and
// two agents -- audited at every tick from the stores, never from a coordinator's memory:
//   - the domain: the sum of what its agents act on <= its budget in force - its reserve;
//   - the composition: the domain's budget in force <= what the parent's ledger holds for it;
//   - the site: what every agent acts on, at both levels, <= the site budget - its reserve.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coord/coord_test_util.h"
#include "coord/coordinator.h"
#include "coord/domain.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"

namespace headroom::coord {
namespace {

constexpr double kEps = 1e-6;

LedgerJob Job(double floor_w, double demand_w, double grant_w = 0, double held_w = 0,
              int64_t seq = 0, LeaseId lease = 0, bool domain = false) {
  LedgerJob j;
  j.floor_w = floor_w;
  j.demand_w = demand_w;
  j.grant_w = grant_w;
  j.held_w = held_w;
  j.seq = seq;
  j.lease = lease;
  j.domain = domain;
  return j;
}

Member AsDomain(const std::string& name, double floor_w, double demand_w, LeaseId lease) {
  Member m = M(name, floor_w, demand_w, lease);
  m.domain = true;
  m.standby_w = floor_w;
  return m;
}

// The site with domain `rack` (lease 1) and agent `x` (lease 2) as registered in `in`, planned
// on `site_w` and every grant acknowledged `rounds` times: the ledger after.
Ledger Settled(PlanInput& in, const Member& rack, double x_demand_w, double site_w, int rounds) {
  in.members = {{"rack", rack}, {"x", M("x", 100, x_demand_w, 2)}};
  in.registered_at = {{"rack", 1}, {"x", 2}};
  PlanOutput p = Plan(Fresh(site_w, 0), in, 5);
  for (int i = 0; i < rounds; ++i) {
    AckAll(p, in);
    p = Plan(p.ledger, in, 5);
  }
  return p.ledger;
}

// ---- The parent's rules for a domain member (Plan) ----

TEST(DomainPlan, ALeaseGoneKeepsWhatItHoldsAndIsNeverForgotten) {
  PlanInput in;
  Ledger l = Settled(in, AsDomain("rack", 200, 1000, 1), 1000, 1500, 1);
  const double held_w = l.jobs.at("rack").held_w;
  ASSERT_GT(held_w, 200.0);
  EXPECT_TRUE(l.jobs.at("rack").domain);
  // Its coordinator killed: an agent's place would fall to its floor; a domain's jobs may still
  // draw what it holds.
  in.members.erase("rack");
  in.gone_for_s["rack"] = 0.0;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_EQ(p.ledger.jobs.at("rack").lease, 0);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("rack").held_w, held_w);
  // Never forgotten, however long.
  in.gone_for_s["rack"] = 1e6;
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.jobs.contains("rack"));
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("rack").held_w, held_w);
  EXPECT_TRUE(p.forgotten.empty());
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

TEST(DomainPlan, ANewLeaseTakesItsPlaceHoldingTheSameAndAcknowledgesLower) {
  PlanInput in;
  Ledger l = Settled(in, AsDomain("rack", 200, 1000, 1), 1000, 1500, 1);
  const double held_w = l.jobs.at("rack").held_w;
  in.members.erase("rack");
  in.gone_for_s["rack"] = 30.0;
  l = Plan(l, in, 5).ledger;
  // Another replica leads the domain: a new lease. It declares its whole budget in force as its
  // floor until granted (what its jobs may draw).
  in.gone_for_s.erase("rack");
  in.members["rack"] = AsDomain("rack", held_w, 1000, 7);
  PlanOutput p = Plan(l, in, 5);
  const LedgerJob& j = p.ledger.jobs.at("rack");
  EXPECT_EQ(j.lease, 7);
  EXPECT_DOUBLE_EQ(j.held_w, held_w);
  EXPECT_DOUBLE_EQ(RaisedW(l, p), 0.0);
  bool granted = false;
  for (const Grant& g : p.grants) {
    if (g.job == "rack") {
      granted = true;
      EXPECT_EQ(g.lease, 7);
      EXPECT_DOUBLE_EQ(g.job_budget_w, held_w);
    }
  }
  EXPECT_TRUE(granted);
  // Its floor back to its jobs' floors: down at once; what it holds stays until acknowledged.
  AckAll(p, in);
  in.members["rack"] = AsDomain("rack", 200, 1000, 7);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("rack").floor_w, 200);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("rack").held_w, held_w);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

// A domain's new leader registers while the old leader's lease lives on (a duplicate of its
// name): the same domain (the same holder) adds nothing above what the domain holds; another
// holder is charged all it declares.
TEST(DomainPlan, ANewLeaderBesideTheOldLeaseAddsNothingAnotherHolderAll) {
  PlanInput in;
  Member rack = AsDomain("rack", 200, 1000, 1);
  rack.holder = "domain rack on http://a:2379";
  const Ledger l = Settled(in, rack, 1000, 1500, 3);
  const double held_w = l.jobs.at("rack").held_w;
  Member next = AsDomain("rack", held_w, 1000, 9);  // declares all it may draw: ungranted
  next.holder = rack.holder;
  in.duplicates["rack@9"] = next;
  PlanOutput same = Plan(l, in, 5);
  ASSERT_TRUE(same.ledger.standby.contains("rack@9"));
  EXPECT_DOUBLE_EQ(same.ledger.standby.at("rack@9").standby_w, 0.0);
  EXPECT_GE(InvariantSlackW(same.ledger), 0.0);
  {  // The old lease gone in the period its successor's duplicate key is first seen.
    PlanInput gone = in;
    gone.members.erase("rack");
    gone.gone_for_s["rack"] = 0.0;
    PlanOutput both = Plan(l, gone, 5);
    EXPECT_DOUBLE_EQ(both.ledger.standby.at("rack@9").standby_w, 0.0);
    EXPECT_GE(InvariantSlackW(both.ledger), 0.0);
  }
  next.holder = "domain rack on http://elsewhere:2379";
  in.duplicates["rack@9"] = next;
  PlanOutput other = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(other.ledger.standby.at("rack@9").standby_w, held_w);
}

// A grant lowered and not acknowledged yet, whose target rises again: up to what its job holds
// at once (held counts it already), not a share of the room a period, each a new seq that a
// member acknowledging a period late never catches up with.
TEST(DomainPlan, AGrantBelowWhatItHoldsRisesToItAtOnce) {
  // The site full: rack's grant was lowered to 500 W and not acknowledged (it holds 938 W), x
  // holds its 561 W; their targets (computed here: 1,200 W above the floors, 0.923 of each
  // demand above its floor) are 938.46 and 561.54 W. No room: 1500 - 938 - 561 = 1 W.
  Ledger l = Fresh(1500, 0);
  l.jobs["rack"] = Job(200, 1000, 500, 938, 7, 1, true);
  l.jobs["x"] = Job(100, 600, 561, 561, 6, 2);
  l.seq = 7;
  PlanInput in;
  in.members = {{"rack", AsDomain("rack", 200, 1000, 1)}, {"x", M("x", 100, 600, 2)}};
  in.registered_at = {{"rack", 1}, {"x", 2}};
  const PlanOutput p = Plan(l, in, 5);
  // Up to what it holds at once, from no room; the 0.46 W above it from the 1 W of room.
  EXPECT_NEAR(p.ledger.jobs.at("rack").grant_w, 200 + 800 * 12.0 / 13.0, 1e-6);
  EXPECT_NEAR(p.ledger.jobs.at("rack").held_w, 200 + 800 * 12.0 / 13.0, 1e-6);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

TEST(DomainPlan, ItsFloorRisesOnlyIntoWhatItHoldsOrWhatIsFree) {
  PlanInput in;
  PlanOutput p;
  p.ledger = Settled(in, AsDomain("rack", 200, 700, 1), 1000, 1000, 3);
  const double held_w = p.ledger.jobs.at("rack").held_w;
  ASSERT_LT(held_w, 700.0);
  // Into what it holds: at once.
  in.members["rack"] = AsDomain("rack", held_w - 10, 700, 1);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("rack").floor_w, held_w - 10);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("rack").held_w, held_w);
  // Above it while the site is full: not yet (x holds the rest).
  const double x_held_w = p.ledger.jobs.at("x").held_w;
  ASSERT_GT(x_held_w + held_w, 1000 - 1.0);
  in.members["rack"] = AsDomain("rack", held_w + 50, 700, 1);
  p = Plan(p.ledger, in, 5);
  EXPECT_LE(p.ledger.jobs.at("rack").floor_w, held_w);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

// ---- Two levels in lockstep ----

class TwoLevels {
 public:
  static constexpr double kSiteW = 3000, kDomainStartW = 1200, kDomainReserveW = 50;

  // `domain_agents`: the domain's two agents from the start (else AddDomainAgents, later).
  explicit TwoLevels(bool domain_agents = true) : parent_(clock_.fn()), domain_(clock_.fn()) {
    CoordinatorConfig top;
    top.site = "top";
    top.site_budget_w = kSiteW;
    top.id = "top-0";
    site_ = std::make_unique<Coordinator>(parent_, top, clock_.fn(), [](auto&) {});
    CoordinatorConfig rack;
    rack.site = "rack";
    rack.site_budget_w = kDomainStartW;
    rack.reserve_w = kDomainReserveW;
    rack.parent_site = "top";
    rack.id = "rack-0";
    domain_coordinator_ = std::make_unique<Coordinator>(domain_, rack, clock_.fn(), [](auto&) {});
    link_ = NewLink();
    // One agent at the site, two in the domain.
    agents_.push_back(Agent(parent_, "top", "x", 100, 1500));
    acting_.resize(agents_.size());
    if (domain_agents) AddDomainAgents();
  }
  void AddDomainAgents() {
    agents_.push_back(Agent(domain_, "rack", "a", 100, 800));
    agents_.push_back(Agent(domain_, "rack", "b", 150, 900));
    acting_.resize(agents_.size());
  }

  std::unique_ptr<DomainLink> NewLink() {
    DomainConfig dc;
    dc.parent_site = "top";
    dc.parent_etcd = "memory";
    dc.domain = "rack";
    dc.lease_ttl_s = 3;
    dc.period_s = 1.0;
    return std::make_unique<DomainLink>(parent_, dc, clock_.fn(), [](auto&) {});
  }

  std::unique_ptr<SiteMember> Agent(MemoryStore& store, const std::string& site,
                                    const std::string& job, double floor_w, double nameplate_w) {
    MemberConfig mc;
    mc.site = site;
    mc.job = job;
    mc.floor_w = floor_w;
    mc.nameplate_w = nameplate_w;
    mc.standby_w = 0.0;
    return std::make_unique<SiteMember>(store, mc, clock_.fn(), [](auto&) {});
  }

  // 0.25 s: the agents act and step; once a second the domain (its coordinator, then its link,
  // whose wish becomes its target) and the site's coordinator step. Then the audit.
  void Tick() {
    clock_.t += 0.25;
    ++ticks_;
    for (size_t i = 0; i < agents_.size(); ++i) {
      acting_[i] = agents_[i]->Current();
      agents_[i]->Step();
    }
    if (ticks_ % 4 == 0) {
      domain_coordinator_->Step();
      if (link_) {
        const CoordinatorStatus& s = domain_coordinator_->status();
        if (auto want = link_->Step(domain_coordinator_->leading(), s.ledger, s.members)) {
          if (domain_coordinator_->RequestSiteBudget(*want)) link_->Requested(*want);
        }
      }
      site_->Step();
    }
    Audit();
  }
  void Run(double s) {
    for (int i = 0; i < static_cast<int>(s / 0.25); ++i) Tick();
  }
  // The audit of every tick so far: none over at any level.
  void ExpectNoViolations() const {
    EXPECT_EQ(domain_violations_, 0);
    EXPECT_EQ(composition_violations_, 0);
    EXPECT_EQ(site_violations_, 0);
  }

  static std::optional<Ledger> Read(MemoryStore& store, const std::string& site) {
    auto r = store.Get("/headroom/" + site + "/ledger", false);
    if (!r || r->kvs.empty()) return std::nullopt;
    auto l = LedgerFromJson(r->kvs[0].value, "ledger");
    if (!l) return std::nullopt;
    return *l;
  }

  void Audit() {
    if (auto l = Read(parent_, "top")) top_ = *l;
    if (auto l = Read(domain_, "rack")) rack_ = *l;
    if (!top_ || !rack_) return;
    double domain_w = 0.0;
    for (size_t i = 1; i < agents_.size(); ++i) domain_w += acting_[i].job_budget_w;
    if (domain_w > rack_->site_budget_w - rack_->reserve_w + kEps) ++domain_violations_;
    // The composition: the domain never runs on more than its parent counts it holding.
    const auto held = top_->jobs.find("rack");
    if (held != top_->jobs.end()) {
      if (rack_->site_budget_w > held->second.held_w + kEps) ++composition_violations_;
    } else if (top_->standby.contains("rack")) {
      if (rack_->site_budget_w > top_->standby.at("rack").standby_w + kEps) {
        ++composition_violations_;
      }
    }
    if (domain_w + acting_[0].job_budget_w > top_->site_budget_w - top_->reserve_w + kEps) {
      ++site_violations_;
    }
    if (InvariantSlackW(*top_) < 0.0) ++site_violations_;
  }

  FakeClock clock_;
  MemoryStore parent_, domain_;
  std::unique_ptr<Coordinator> site_, domain_coordinator_;
  std::unique_ptr<DomainLink> link_;
  std::vector<std::unique_ptr<SiteMember>> agents_;
  std::vector<Acting> acting_;
  uint64_t ticks_ = 0;
  int domain_violations_ = 0, composition_violations_ = 0, site_violations_ = 0;
  std::optional<Ledger> top_, rack_;
};

TEST(DomainLink, ASiteCutReachesTheDomainsJobsAndIsAcknowledgedOnlyOnceTheyHoldNoMore) {
  TwoLevels t;
  t.Run(20);
  ASSERT_TRUE(t.top_ && t.rack_);
  ASSERT_TRUE(t.top_->jobs.contains("rack"));
  const ParentStatus p = t.link_->status();
  EXPECT_EQ(p.state, "granted");
  // The domain's budget is its grant.
  EXPECT_NEAR(t.rack_->site_budget_w, t.top_->jobs.at("rack").grant_w, kEps);
  const double before_w = t.rack_->site_budget_w;
  // A cut at the site: the domain's share comes down, its agents first.
  ASSERT_TRUE(t.site_->RequestSiteBudget(1400));
  t.Run(20);
  EXPECT_LT(t.rack_->site_budget_w, before_w);
  EXPECT_NEAR(t.rack_->site_budget_w, t.top_->jobs.at("rack").grant_w, kEps);
  EXPECT_NEAR(t.top_->jobs.at("rack").held_w, t.top_->jobs.at("rack").grant_w, kEps);
  EXPECT_DOUBLE_EQ(t.top_->site_budget_w, 1400);
  // And back up.
  ASSERT_TRUE(t.site_->RequestSiteBudget(3000));
  t.Run(20);
  EXPECT_NEAR(t.rack_->site_budget_w, before_w, 1.0);
  t.ExpectNoViolations();
}

TEST(DomainLink, FencedByItsParentTheDomainGoesToItsFloorAndComesBackOnItsHeldWatts) {
  TwoLevels t;
  t.Run(20);
  const double held_w = t.top_->jobs.at("rack").held_w;
  t.parent_.SetUnavailable(true);  // its lease cannot be renewed
  t.Run(10);
  EXPECT_EQ(t.link_->status().state, "fenced");
  // Its floor: its agents' floors, its reserve.
  EXPECT_NEAR(t.rack_->target_site_budget_w, 100 + 150 + TwoLevels::kDomainReserveW, kEps);
  EXPECT_NEAR(t.rack_->site_budget_w, 100 + 150 + TwoLevels::kDomainReserveW, kEps);
  t.parent_.SetUnavailable(false);
  t.Run(20);
  // The parent kept what it held for it (its lease expired meanwhile) and grants it again.
  EXPECT_EQ(t.link_->status().state, "granted");
  EXPECT_GE(t.top_->jobs.at("rack").held_w, t.rack_->site_budget_w - kEps);
  EXPECT_NEAR(t.rack_->site_budget_w, held_w, 1.0);
  t.ExpectNoViolations();
}

TEST(DomainLink, AKilledDomainLeadersWattsStayCountedUntilTheNextOneTakesThePlace) {
  TwoLevels t;
  t.Run(20);
  const double held_w = t.top_->jobs.at("rack").held_w;
  const LeaseId lease = t.top_->jobs.at("rack").lease;
  t.link_.reset();  // killed: no Leave, its parent lease runs out
  t.Run(15);
  EXPECT_EQ(t.top_->jobs.at("rack").lease, 0);
  EXPECT_DOUBLE_EQ(t.top_->jobs.at("rack").held_w, held_w);
  // The next leader's process: a new lease, the same watts, no cut on its way in.
  t.link_ = t.NewLink();
  t.Run(10);
  EXPECT_NE(t.top_->jobs.at("rack").lease, 0);
  EXPECT_NE(t.top_->jobs.at("rack").lease, lease);
  EXPECT_EQ(t.link_->status().state, "granted");
  EXPECT_NEAR(t.rack_->site_budget_w, held_w, 1.0);
  t.ExpectNoViolations();
}

// A domain that joined its site empty is granted little (its floor: a watt above its reserve);
// jobs then starting in it are counted at their standby and asked for at their demand, so the
// site grants the domain what admits them.
TEST(DomainLink, JobsStartingInAnEmptyDomainAreAdmittedAsItsSiteGrantsMore) {
  TwoLevels t(/*domain_agents=*/false);
  t.Run(20);
  ASSERT_TRUE(t.rack_);
  EXPECT_NEAR(t.rack_->site_budget_w, 1 + TwoLevels::kDomainReserveW, kEps);
  t.AddDomainAgents();
  t.Run(30);
  ASSERT_TRUE(t.rack_->jobs.contains("a"));
  ASSERT_TRUE(t.rack_->jobs.contains("b"));
  EXPECT_TRUE(t.rack_->standby.empty());
  EXPECT_GT(t.rack_->site_budget_w, 100 + 150 + TwoLevels::kDomainReserveW);
  t.ExpectNoViolations();
}

// The link acknowledges a lower grant only once what it last asked its domain for fits too: a
// ledger read before that request was applied shows neither the raise it asked for nor that
// the budget in force may still rise to it. (The test plays the site, writing the grants.)
TEST(DomainLink, ALowerGrantWaitsForWhatTheLinkAskedItsDomainFor) {
  FakeClock clock;
  MemoryStore parent(clock.fn());
  DomainConfig dc;
  dc.parent_site = "top";
  dc.domain = "rack";
  DomainLink link(parent, dc, clock.fn(), [](auto&) {});
  Ledger stale = Fresh(800, 50);  // as read before any request of the link's was applied
  const auto step = [&] {
    clock.t += 1.0;
    return link.Step(true, stale, {});
  };
  step();  // registered
  auto m = parent.Get(Keys("top").member("rack"), false);
  ASSERT_TRUE(m && m->kvs.size() == 1u);
  const LeaseId lease = m->kvs[0].lease;
  const auto grant = [&](int64_t seq, double w) {
    Grant g;
    g.job = "rack";
    g.term = 1;
    g.epoch = 1;
    g.seq = seq;
    g.lease = lease;
    g.job_budget_w = w;
    ASSERT_TRUE(parent.Put(Keys("top").grant("rack"), ToJson(g), 0));
  };
  const auto acked_seq = [&]() -> int64_t {
    auto a = parent.Get(Keys("top").ack("rack"), false);
    if (!a || a->kvs.empty()) return 0;
    auto ack = AckFromJson(a->kvs[0].value, "ack");
    return ack ? ack->seq : -1;
  };
  grant(1, 1000);
  const std::optional<double> raise = step();
  ASSERT_TRUE(raise);
  EXPECT_DOUBLE_EQ(*raise, 1000);
  link.Requested(1000);  // written to the domain's target; the ledger read does not show it yet
  step();
  EXPECT_EQ(acked_seq(), 1);  // a raise: at once
  grant(2, 900);
  const std::optional<double> cut = step();
  ASSERT_TRUE(cut);
  EXPECT_DOUBLE_EQ(*cut, 900);
  step();
  EXPECT_EQ(acked_seq(), 1);  // not 2: its budget may still rise to the 1,000 W asked for
  link.Requested(900);
  step();                     // judged and served
  step();                     // acknowledged
  EXPECT_EQ(acked_seq(), 2);  // the ledger read (800 W) and the request (900 W) fit now
}

TEST(DomainSums, FloorsStandbyAndReserveAndTheWholeBudgetUntilGranted) {
  Ledger l = Fresh(1000, 50);
  l.jobs["a"] = Job(100, 400);
  l.jobs["b"] = Job(150, 300);
  l.standby["c"] = {.standby_w = 20, .floor_w = 120};
  std::map<std::string, Member> members = {{"a", M("a", 100, 400, 1)}, {"b", M("b", 150, 500, 2)}};
  Declared d = DomainSums(l, members, false);
  EXPECT_DOUBLE_EQ(d.floor_w, 100 + 150 + 20 + 50);
  EXPECT_DOUBLE_EQ(d.demand_w, 400 + 300 + 20 + 50);
  // c registered, waiting: its demand, not its standby, in the domain's.
  members["c"] = M("c", 120, 600, 3);
  EXPECT_DOUBLE_EQ(DomainSums(l, members, false).demand_w, 400 + 300 + 600 + 50);
  members.erase("c");
  EXPECT_DOUBLE_EQ(d.nameplate_w, 400 + 500 + 20 + 50);
  EXPECT_EQ(d.gpus, 2);
  d = DomainSums(l, members, true);
  EXPECT_DOUBLE_EQ(d.floor_w, 1000);
  EXPECT_DOUBLE_EQ(d.demand_w, 1000);
  // Empty: a watt above its reserve (a budget must exceed it).
  EXPECT_DOUBLE_EQ(DomainSums(Fresh(1000, 50), {}, false).floor_w, 51);
  EXPECT_EQ(DomainHolder("rack", "http://b:2379,http://a:2379"),
            "domain rack on http://a:2379,http://b:2379");
}

// The domain's curve is its jobs' water-filled: at its floors their tokens at their floors, at
// its demands their tokens at their demands, the first watts above the floors to the steeper
// job (computed here by hand from the two straight curves).
TEST(DomainCurve, ItsJobsCurvesWaterFilled) {
  Ledger l = Fresh(2000, 50);
  l.jobs["a"] = Job(100, 500);
  l.jobs["b"] = Job(100, 300);
  std::map<std::string, Member> members = {{"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 300, 2)}};
  members["a"].value_curve = {{100, 10}, {500, 50}};  // 0.1 tokens/s per W
  members["b"].value_curve = {{100, 10}, {300, 70}};  // 0.3 tokens/s per W
  const std::vector<ValuePoint> c = DomainCurve(l, members);
  ASSERT_EQ(c.size(), 16u);
  EXPECT_DOUBLE_EQ(c.front().budget_w, 200 + 50);
  EXPECT_DOUBLE_EQ(c.front().tokens_per_s, 20);
  EXPECT_DOUBLE_EQ(c.back().budget_w, 800 + 50);
  EXPECT_NEAR(c.back().tokens_per_s, 120, 1e-9);
  // 600 W above the floors in 15 steps of 40 W: the first five (200 W) all to b.
  EXPECT_NEAR(c[5].tokens_per_s, 20 + 0.3 * 200, 1e-9);
  EXPECT_NEAR(c[10].tokens_per_s, 80 + 0.1 * 200, 1e-9);
  // No job with a curve: none.
  members["a"].value_curve.clear();
  members["b"].value_curve.clear();
  EXPECT_TRUE(DomainCurve(l, members).empty());
}

}  // namespace
}  // namespace headroom::coord
