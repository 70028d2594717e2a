// The site coordinator's hot paths (docs/PERFORMANCE.md, "A site at scale"): one period's plan
// (coord::Plan) on a ledger of 10 to 1,000 jobs, the allocation, the ledger's and a member's
// JSON, and a whole leader period on the in-memory store. There is no outside peer for these;
// what matters is that a period of a 1,000-job site costs far less than its 1 s.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "coord/coordinator.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord/reservation.h"
#include "coord/stagger.h"
#include "coord/value_allocation.h"

namespace headroom::bench {
namespace {

constexpr int64_t kTerm = 7;

// Job i's floor (100-300 W) and nameplate (400-1000 W), spread evenly and deterministically.
double FloorW(int i) { return 100.0 + 200.0 * static_cast<double>((i * 37) % 101) / 100.0; }
double NameplateW(int i) { return 400.0 + 600.0 * static_cast<double>((i * 53) % 97) / 96.0; }
std::string JobName(int i) { return fmt::format("job-{:04d}", i); }

// Half of the demand above the floors.
double SiteBudgetW(int n) {
  double floors_w = 0.0, demand_w = 0.0;
  for (int i = 0; i < n; ++i) {
    floors_w += FloorW(i);
    demand_w += NameplateW(i);
  }
  return floors_w + 0.5 * (demand_w - floors_w);
}

coord::Member MemberOf(int i) {
  coord::Member m;
  m.job = JobName(i);
  m.gpus = 8;
  m.nameplate_w = NameplateW(i);
  m.floor_w = FloorW(i);
  m.demand_w = m.nameplate_w;
  m.power_w = 0.9 * m.nameplate_w;
  m.phase = "train";
  m.value_tokens_per_j = 1.5;
  m.budget_w = m.floor_w;
  m.lease = 0x1000 + i;
  return m;
}

// A site of n jobs in steady state: every job admitted, granted its target and acknowledged
// (planned until nothing changes).
struct Site {
  coord::Ledger ledger;
  coord::PlanInput in;
};

Site SteadySite(int n) {
  Site s;
  s.ledger.site_budget_w = SiteBudgetW(n);
  s.ledger.target_site_budget_w = s.ledger.site_budget_w;
  for (int i = 0; i < n; ++i) {
    coord::Member m = MemberOf(i);
    s.in.registered_at[m.job] = i + 2;
    s.in.members[m.job] = std::move(m);
  }
  for (int round = 0; round < 20; ++round) {
    coord::PlanOutput p = coord::Plan(s.ledger, s.in, kTerm);
    s.ledger = std::move(p.ledger);
    for (const coord::Grant& g : p.grants) {
      s.in.grants[g.job] = g;
      s.in.acks[g.job] = coord::Ack{g.job, g.term, g.seq, g.lease, g.job_budget_w};
    }
    if (!p.changed) break;
  }
  return s;
}

// A period in which nothing changed: the leader's plan when the site is steady.
void BM_PlanSteady(benchmark::State& state) {
  const Site s = SteadySite(static_cast<int>(state.range(0)));
  if (coord::Plan(s.ledger, s.in, kTerm).changed) state.SkipWithError("the site is not steady");
  for (auto _ : state) {
    coord::PlanOutput p = coord::Plan(s.ledger, s.in, kTerm);
    benchmark::DoNotOptimize(p.changed);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));  // jobs
}
BENCHMARK(BM_PlanSteady)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

// A period in which every job's demand changed (down by a tenth): every target moves; the
// grants above their new target are lowered and rewritten (counter "grants"), the others wait
// for the watts those free.
void BM_PlanEveryDemandChanged(benchmark::State& state) {
  Site s = SteadySite(static_cast<int>(state.range(0)));
  for (auto& [job, m] : s.in.members) m.demand_w = 0.9 * m.demand_w;
  size_t grants = 0;
  bool changed = false;
  for (auto _ : state) {
    coord::PlanOutput p = coord::Plan(s.ledger, s.in, kTerm);
    grants = p.grants.size();
    changed = p.changed;
    benchmark::DoNotOptimize(p.changed);
  }
  if (!changed) state.SkipWithError("the plan saw no change");
  state.counters["grants"] = static_cast<double>(grants);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PlanEveryDemandChanged)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_Allocate(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::map<std::string, coord::AllocationJob> jobs;
  for (int i = 0; i < n; ++i) jobs[JobName(i)] = {FloorW(i), NameplateW(i)};
  const double available_w = SiteBudgetW(n);
  for (auto _ : state) {
    auto out = coord::Allocate(available_w, jobs);
    benchmark::DoNotOptimize(out.size());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Allocate)->Arg(1000)->Unit(benchmark::kMicrosecond);

// Allocation by value: 1,000 jobs of 6-point concave curves (as the twin's), half the room.
void BM_AllocateByValue(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::map<std::string, coord::ValueJob> jobs;
  for (int i = 0; i < n; ++i) {
    coord::ValueJob v{FloorW(i), NameplateW(i), {}};
    double t = 0.0, slope = 1.0 + 0.01 * static_cast<double>(i % 13);
    for (int k = 0; k < 6; ++k) {
      v.curve.push_back({FloorW(i) + k * (NameplateW(i) - FloorW(i)) / 5.0, t});
      t += slope * (NameplateW(i) - FloorW(i)) / 5.0;
      slope *= 0.7;
    }
    jobs[JobName(i)] = std::move(v);
  }
  const double available_w = SiteBudgetW(n);
  const auto fairness = state.range(1) != 0 ? coord::Fairness::kMaxMin : coord::Fairness::kNone;
  for (auto _ : state) {
    auto out = coord::AllocateByValue(available_w, jobs, fairness);
    benchmark::DoNotOptimize(out.size());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_AllocateByValue)->Args({1000, 0})->Args({1000, 1})->Unit(benchmark::kMicrosecond);

// Staggering: 1,000 jobs' holds over a 600 s horizon on a 1 s grid, holds 0-60 s in 5 s steps.
void BM_PlanHolds(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::map<std::string, coord::StaggerJob> jobs;
  double peak_w = 0.0;
  for (int i = 0; i < n; ++i) {
    coord::StepTimeline t;
    t.in_rollout = i % 2 == 0;
    t.phase_elapsed_s = static_cast<double>(i % 17);
    t.rollout_s = 60.0 + static_cast<double>(i % 31);
    t.rest_s = 40.0 + static_cast<double>(i % 23);
    t.rollout_w = NameplateW(i);
    t.rest_w = FloorW(i);
    t.held_w = 0.5 * FloorW(i);
    peak_w += t.rollout_w;
    jobs[JobName(i)] = {t, 10.0};
  }
  coord::StaggerOptions o;
  o.budget_w = 0.7 * peak_w;
  o.max_hold_s = 60;
  o.value_tokens_per_j = 0.02;
  o.passes = static_cast<int>(state.range(1));
  for (auto _ : state) {
    auto plan = coord::PlanHolds(jobs, o);
    benchmark::DoNotOptimize(plan.hold_s.size());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_PlanHolds)->Args({1000, 1})->Args({1000, 4})->Unit(benchmark::kMillisecond);

// Reservations before the update: the same 1,000 timelines, each update at its nameplate above
// its floor, a budget that holds about a third of the updates at once; holds 0-60 s in 5 s steps.
void BM_PlanReservations(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::map<std::string, coord::ReservationJob> jobs;
  double floors_w = 0.0, extra_w = 0.0;
  for (int i = 0; i < n; ++i) {
    coord::ReservationJob j;
    j.timeline.in_rollout = i % 2 == 0;
    j.timeline.phase_elapsed_s = static_cast<double>(i % 17);
    j.timeline.rollout_s = 60.0 + static_cast<double>(i % 31);
    j.timeline.rest_s = 40.0 + static_cast<double>(i % 23);
    j.floor_w = FloorW(i);
    j.update_w = NameplateW(i);
    floors_w += j.floor_w;
    extra_w += j.update_w - j.floor_w;
    jobs[JobName(i)] = j;
  }
  coord::ReservationOptions o;
  o.budget_w = floors_w + extra_w / 3.0;
  o.max_hold_s = 60;
  for (auto _ : state) {
    auto plan = coord::PlanReservations(jobs, o);
    benchmark::DoNotOptimize(plan.hold_s.size());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_PlanReservations)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_LedgerToJson(benchmark::State& state) {
  const Site s = SteadySite(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = coord::ToJson(s.ledger);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_LedgerToJson)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_LedgerFromJson(benchmark::State& state) {
  const Site s = SteadySite(static_cast<int>(state.range(0)));
  const std::string text = coord::ToJson(s.ledger);
  for (auto _ : state) {
    auto l = coord::LedgerFromJson(text, "ledger");
    if (!l) state.SkipWithError("the ledger did not parse");
    benchmark::DoNotOptimize(l->jobs.size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(text.size()) * state.iterations());
}
BENCHMARK(BM_LedgerFromJson)->Arg(1000)->Unit(benchmark::kMicrosecond);

// One member's value, as the leader parses 1,000 of them every period.
void BM_MemberFromJson(benchmark::State& state) {
  const std::string text = coord::ToJson(MemberOf(1));
  for (auto _ : state) {
    auto m = coord::MemberFromJson(text, "members/job-0001");
    if (!m) state.SkipWithError("the member did not parse");
    benchmark::DoNotOptimize(m->floor_w);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemberFromJson);

// A whole steady leader period on the in-memory store: the range read of the site (members,
// grants, acks: 3n + 2 keys, copied), every value parsed, the plan, the grants checked against
// the ledger; nothing written. What the coordinator spends per period besides etcd and its
// JSON gateway.
void BM_CoordinatorPeriodSteady(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  double now_s = 0.0;
  const auto clock = [&now_s] { return now_s; };
  const auto quiet = [](const std::string&) {};
  coord::MemoryStore store(clock);
  coord::CoordinatorConfig config;
  config.site = "bench";
  config.site_budget_w = SiteBudgetW(n);
  config.id = "bench-coordinator";
  coord::Coordinator coordinator(store, config, clock, quiet);
  std::vector<std::unique_ptr<coord::SiteMember>> members;
  for (int i = 0; i < n; ++i) {
    coord::MemberConfig mc;
    mc.site = config.site;
    mc.job = JobName(i);
    mc.gpus = 8;
    mc.floor_w = FloorW(i);
    mc.nameplate_w = NameplateW(i);
    mc.local_budget_w = mc.floor_w;
    members.push_back(std::make_unique<coord::SiteMember>(store, mc, clock, quiet));
  }
  // Registered, admitted, granted, acknowledged: until the leader writes nothing more.
  uint64_t writes = 0;
  for (int round = 0; round < 40; ++round) {
    now_s += 0.25;
    for (auto& m : members) {
      m->Step();
      (void)m->Current();
    }
    coordinator.Step();
    if (round > 8 && coordinator.status().ledger_writes == writes) break;
    writes = coordinator.status().ledger_writes;
  }
  if (!coordinator.leading() || !coordinator.status().ledger ||
      coordinator.status().ledger->jobs.size() != static_cast<size_t>(n)) {
    state.SkipWithError("the site did not settle");
  }
  writes = coordinator.status().ledger_writes;
  for (auto _ : state) coordinator.Step();
  if (coordinator.status().ledger_writes != writes) state.SkipWithError("a steady period wrote");
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_CoordinatorPeriodSteady)->Arg(1000)->Unit(benchmark::kMillisecond);

// A watch of the site's prefix resumed from the last period, on a MemoryStore holding a long
// history (fleet-sim's store; the leader's view of issue 55 asks it each period): the changes of
// one period (`range(0)` puts) after `range(1)` older events.
void BM_MemoryStoreWatchLatest(benchmark::State& state) {
  double t = 0.0;
  coord::MemoryStore store([&t] { return t; }, 200000);
  const auto changes = static_cast<int>(state.range(0));
  const auto older = static_cast<int>(state.range(1));
  for (int i = 0; i < older; ++i)
    (void)store.Put(fmt::format("/headroom/s/members/job{}", i % 1000), "x", 0);
  const int64_t from = *store.Put("/headroom/s/ledger", "l", 0);
  for (int i = 0; i < changes; ++i)
    (void)store.Put(fmt::format("/headroom/s/grants/job{}", i), "g", 0);
  for (auto _ : state) {
    auto r = store.Watch("/headroom/s/", true, from, 0.0);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemoryStoreWatchLatest)->Args({10, 100000})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace headroom::bench
