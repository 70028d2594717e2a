// What several of the coordinator's tests share: a clock the test moves, members and ledgers
// built in one line, and one simulated site of coordinators and members on the in-memory store
// (Site, with its auditor).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coord/coordinator.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"

namespace headroom::coord {

struct FakeClock {
  double t = 0.0;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};

inline Member M(const std::string& job, double floor_w, double demand_w, LeaseId lease) {
  Member m;
  m.job = job;
  m.gpus = 1;
  m.floor_w = floor_w;
  m.demand_w = demand_w;
  m.nameplate_w = demand_w;
  m.lease = lease;
  // Held at its step boundary with no standby draw: counted at 0 W until admitted (the
  // protocol before standby; tests of standby set their own).
  m.phase = "idle";
  m.standby_w = 0.0;
  return m;
}

inline Ledger Fresh(double site_w, double reserve_w) {
  Ledger l;
  l.site_budget_w = site_w;
  l.target_site_budget_w = site_w;
  l.reserve_w = reserve_w;
  return l;
}

inline Member Opportunistic(const std::string& job, double demand_w, LeaseId lease) {
  Member m = M(job, 0, demand_w, lease);
  m.job_class = JobClass::kOpportunistic;
  return m;
}

// Acknowledge every grant in `p` (the members act on them).
inline void AckAll(const PlanOutput& p, PlanInput& in) {
  for (const Grant& g : p.grants) {
    in.grants[g.job] = g;
    in.acks[g.job] = {g.job, g.term, g.seq, g.lease, g.job_budget_w};
  }
}

// One simulated site: coordinators and members stepped in lockstep on one clock, faults by
// name. The auditor keeps, per member, what it last acted on and until when (its Current()), and
// after that its floor: a member that stops running acts on its last budget until that
// deadline, and its trainer's safe actuation after it.
class Site {
 public:
  Site(int jobs, double site_w, double reserve_w, int coordinators) : store_(clock_.fn()) {
    for (int c = 0; c < coordinators; ++c) {
      CoordinatorConfig cc;
      cc.site = "s";
      cc.site_budget_w = site_w;
      cc.reserve_w = reserve_w;
      cc.id = std::to_string(c);
      cc.id.insert(cc.id.begin(), 'c');  // (g++ 12 -O3 -Wrestrict misfires on "c" + ...)
      coordinators_.push_back(std::make_unique<Coordinator>(store_, cc, clock_.fn(), [](auto&) {}));
      coord_up_.push_back(true);
    }
    for (int j = 0; j < jobs; ++j) {
      MemberConfig mc;
      mc.site = "s";
      mc.job = "job" + std::to_string(j);
      mc.nameplate_w = 400 + 100 * j;
      mc.floor_w = 100 + 10 * j;
      mc.local_budget_w = mc.floor_w;
      configs_.push_back(mc);
      members_.push_back(std::make_unique<SiteMember>(store_, mc, clock_.fn(), [](auto&) {}));
      running_.push_back(true);
      acting_.push_back({});
    }
  }

  // One tick of 0.25 s: every running member acts (Current) and steps; each coordinator steps
  // once a second. Then the audit.
  void Tick() {
    clock_.t += 0.25;
    ++ticks_;
    for (size_t j = 0; j < members_.size(); ++j) {
      if (!running_[j]) continue;
      acting_[j] = members_[j]->Current();
      members_[j]->Step();
    }
    if (ticks_ % 4 == 0) {
      for (size_t c = 0; c < coordinators_.size(); ++c) {
        if (coord_up_[c]) coordinators_[c]->Step();
      }
    }
    Audit();
  }

  void Audit() {
    // The budget in force, from the store's ledger (not a coordinator's memory).
    // (While the store is down its ledger cannot change: the last one read stands.)
    auto r = store_.Get("/headroom/s/ledger", false);
    if (r && !r->kvs.empty()) {
      auto parsed = LedgerFromJson(r->kvs[0].value, "ledger");
      ASSERT_TRUE(parsed);
      ledger_ = std::move(*parsed);
    }
    if (!ledger_) return;
    const Ledger* l = &*ledger_;
    double sum_w = 0.0;
    for (size_t j = 0; j < members_.size(); ++j) {
      const Acting& a = acting_[j];
      if (a.state == Acting::State::kLocal) continue;  // outside the site's ledger
      double w = a.job_budget_w;
      if (!running_[j] && clock_.t >= a.valid_until_s) w = configs_[j].floor_w;
      sum_w += w;
      if (a.state == Acting::State::kGranted) full_ = std::max(full_, a.term);
    }
    max_sum_w_ = std::max(max_sum_w_, sum_w);
    if (sum_w > l->site_budget_w - l->reserve_w + 1e-6) ++violations_;
  }

  // Job j becomes an opportunistic member (floor 0: paused without a grant); before any Tick.
  void MakeOpportunistic(size_t j) {
    configs_[j].job_class = JobClass::kOpportunistic;
    configs_[j].floor_w = 0.0;
    configs_[j].local_budget_w = 0.0;
    members_[j] = std::make_unique<SiteMember>(store_, configs_[j], clock_.fn(), [](auto&) {});
  }

  void Run(double s) {
    const int n = static_cast<int>(s / 0.25);
    for (int i = 0; i < n; ++i) Tick();
  }
  // Everyone granted, and the grants add up to the budget or to every demand.
  bool FullyAllocated() {
    for (size_t j = 0; j < members_.size(); ++j) {
      if (running_[j] && acting_[j].state != Acting::State::kGranted) return false;
    }
    return true;
  }

  FakeClock clock_;
  MemoryStore store_;
  std::vector<std::unique_ptr<Coordinator>> coordinators_;
  std::vector<bool> coord_up_;
  std::vector<MemberConfig> configs_;
  std::vector<std::unique_ptr<SiteMember>> members_;
  std::vector<bool> running_;
  std::vector<Acting> acting_;
  uint64_t ticks_ = 0;
  int violations_ = 0;
  double max_sum_w_ = 0.0;
  int64_t full_ = 0;
  std::optional<Ledger> ledger_;
};

}  // namespace headroom::coord
