// DiLoCo's round protocol in one process (docs/DILOCO.md, "The invariant under faults"): worker
// threads over a MemoryStore and LocalGroups, on a simulated clock (tests/support/
// sim_scheduler.h) and a tiny model (tiny_model.h). Every row of the invariant table is a test
// here: a calm run against its replay bit for bit, a member killed mid-round, a joiner, a
// straggler, each hostile kind, a member whose model differs, a collective that fails, a member
// stalled past its lease, leave and rejoin on request, and the data-parallel baseline. Timeouts,
// leases and deadlines of seconds cost no real time, and every run interleaves the workers the
// same way: the assertions are exact where the protocol is.
//
// The checks are an auditor's, not the workers' bookkeeping: the store's own records (each
// round's agreed hash, group and every member's published hash), the replay's arithmetic, and
// times on the simulated clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coord/memory_store.h"
#include "diloco/accounting.h"
#include "diloco/exchange.h"
#include "diloco/recovery.h"
#include "diloco/replay.h"
#include "diloco/round_group.h"
#include "diloco/stream.h"
#include "diloco/tiny_model.h"
#include "diloco/worker.h"
#include "diloco_comm/local_communicator.h"
#include "diloco_core/contribution.h"
#include "diloco_core/digest.h"
#include "diloco_core/scatter.h"
#include "support/sim_scheduler.h"

namespace headroom::diloco {
namespace {

using headroom::testing::SimScheduler;
using nlohmann::json;
using testing::TinyModel;

constexpr std::uint64_t kSeed = 7;
constexpr double kInnerLr = 0.01;
constexpr double kStepS = 0.1;  // simulated seconds an inner step costs
constexpr int kH = 5;
constexpr double kTtlS = 3.0;

// ---------------------------------------------------------------------------------------------
// The pure parts.

TEST(JudgeHashes, TheMajorityWinsATieGoesToTheLowestRankAndTheDonorIsTheLowestHoldingIt) {
  const std::vector<std::string> group = {"a", "b", "c", "d"};
  // b differs: evicted; a is the donor.
  auto v = JudgeHashes(group, {{"a", "H"}, {"b", "X"}, {"c", "H"}, {"d", "H"}}, "X", 1);
  EXPECT_EQ(v.majority, "H");
  EXPECT_FALSE(v.agreed);
  EXPECT_EQ(v.disagreeing, 1);
  EXPECT_TRUE(v.evicted);
  EXPECT_FALSE(v.donor);
  v = JudgeHashes(group, {{"a", "H"}, {"b", "X"}, {"c", "H"}, {"d", "H"}}, "H", 0);
  EXPECT_TRUE(v.donor);
  EXPECT_FALSE(v.evicted);
  // A tie of two against two: the lowest rank's hash (a's) is the round's; c is its donor
  // when a's hash is the minority's... a holds it, so a is the donor.
  v = JudgeHashes(group, {{"a", "P"}, {"b", "Q"}, {"c", "P"}, {"d", "Q"}}, "Q", 1);
  EXPECT_EQ(v.majority, "P");
  EXPECT_EQ(v.disagreeing, 2);
  EXPECT_TRUE(v.evicted);
  // A member that published nothing is left out of the vote; the donor is the lowest rank
  // that holds the majority (b, as a published none).
  v = JudgeHashes(group, {{"b", "H"}, {"c", "H"}, {"d", "X"}}, "H", 1);
  EXPECT_EQ(v.majority, "H");
  EXPECT_TRUE(v.donor);
  EXPECT_EQ(v.disagreeing, 1);
  // Everyone agrees.
  v = JudgeHashes(group, {{"a", "H"}, {"b", "H"}, {"c", "H"}, {"d", "H"}}, "H", 3);
  EXPECT_TRUE(v.agreed);
  EXPECT_EQ(v.disagreeing, 0);
  EXPECT_FALSE(v.donor);
}

TEST(RunStateBlob, RoundTripsBitForBitAndItsLayoutIsTheDocumentedOne) {
  RunState s;
  s.next_round = 12;
  s.run_tokens = 123456789012ULL;
  s.model = {1.5f, -2.25f, 3.0f};
  s.momentum = {0.5f, 0.0f, -0.125f};
  s.inner.schedule_step = 40;
  s.inner.adam_step = 41;
  s.inner.exp_avg = {1, 2, 3};
  s.inner.exp_avg_sq = {4, 5, 6};
  const auto blob = EncodeState(s);
  ASSERT_EQ(blob.size(), 32u + 16u * 3u);
  ASSERT_EQ(blob.size(), StateBytes(3));
  // u64 next_round first, little-endian; the model from byte 32.
  EXPECT_EQ(blob[0], 12);
  float first = 0;
  std::memcpy(&first, blob.data() + 32, 4);
  EXPECT_EQ(first, 1.5f);
  auto back = DecodeState(blob, 3);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->next_round, 12);
  EXPECT_EQ(back->run_tokens, s.run_tokens);
  EXPECT_EQ(back->model, s.model);
  EXPECT_EQ(back->momentum, s.momentum);
  EXPECT_EQ(back->inner.schedule_step, 40);
  EXPECT_EQ(back->inner.adam_step, 41);
  EXPECT_EQ(back->inner.exp_avg, s.inner.exp_avg);
  EXPECT_EQ(back->inner.exp_avg_sq, s.inner.exp_avg_sq);
  // No outer step yet: the momentum travels as zeros and comes back empty.
  s.momentum.clear();
  back = DecodeState(EncodeState(s), 3);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->momentum.empty());
  // Another model's size is refused.
  EXPECT_FALSE(DecodeState(blob, 4).ok());
  EXPECT_FALSE(DecodeState(std::span<const std::uint8_t>(blob.data(), blob.size() - 1), 3).ok());
}

TEST(Accounting, EverySecondIsInExactlyOnePhaseAndComputingIsToldOnChange) {
  double now = 10.0, cpu = 1.0;
  WorkerClock clock{[&] { return now; }, [&] { return cpu; }, [](double) {}};
  WorkerReport report;
  report.name = "w";
  std::vector<bool> told;
  Accounting a(report, clock, [&](bool c) { told.push_back(c); });
  a.Start();
  now = 11.0;  // 1 s waiting
  a.Enter(Accounting::Phase::kCompute);
  now = 14.0;
  cpu = 3.5;  // 3 s computing, 2.5 CPU-s
  a.Enter(Accounting::Phase::kCommunicate);
  now = 14.5;
  a.Enter(Accounting::Phase::kRecover);
  now = 15.0;
  a.Enter(Accounting::Phase::kThrottled);
  now = 17.0;
  a.Enter(Accounting::Phase::kWait);
  EXPECT_DOUBLE_EQ(report.wait_s, 1.0);
  EXPECT_DOUBLE_EQ(report.compute_s, 3.0);
  EXPECT_DOUBLE_EQ(report.communicate_s, 0.5);
  EXPECT_DOUBLE_EQ(report.recover_s, 0.5);
  EXPECT_DOUBLE_EQ(report.throttled_s, 2.0);
  EXPECT_DOUBLE_EQ(report.compute_cpu_s, 2.5);
  EXPECT_DOUBLE_EQ(report.wait_s + report.compute_s + report.communicate_s + report.recover_s +
                       report.throttled_s,
                   a.elapsed_s());
  EXPECT_EQ(told, (std::vector<bool>{true, false}));
  a.Log("hello");
  ASSERT_EQ(report.log.size(), 1u);
  EXPECT_EQ(report.log[0], "7.000 w hello");
}

// ---------------------------------------------------------------------------------------------
// The harness: a run of worker threads on one simulated clock.

// A communicator that flips one byte of another member's frame in what it hands its own member
// (a member whose view of a round differs from everyone else's).
class CorruptingComm final : public Communicator {
 public:
  explicit CorruptingComm(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Result<std::vector<std::vector<std::uint8_t>>> AllGather(
      std::span<const std::uint8_t> mine) override {
    auto all = inner_->AllGather(mine);
    if (all && all->size() > 1) {
      auto& other = (*all)[static_cast<size_t>((rank() + 1) % size())];
      other[other.size() / 2] ^= 0x40;
    }
    return all;
  }
  Result<std::vector<std::vector<std::uint8_t>>> AllToAll(std::span<const std::uint8_t> mine,
                                                          std::size_t chunk) override {
    auto all = inner_->AllToAll(mine, chunk);
    if (all && all->size() > 1) {
      auto& other = (*all)[static_cast<size_t>((rank() + 1) % size())];
      other[other.size() / 2] ^= 0x40;
    }
    return all;
  }
  Status AllReduceSum(std::span<float> v) override { return inner_->AllReduceSum(v); }
  Status Broadcast(std::span<std::uint8_t> b, int root) override {
    return inner_->Broadcast(b, root);
  }
  TrafficCounters traffic() const override { return inner_->traffic(); }

 private:
  std::unique_ptr<Communicator> inner_;
};

// A member that dies inside its all-gather (SIGKILL mid-collective): it never brings its frame.
class DyingComm final : public Communicator {
 public:
  DyingComm(std::unique_ptr<Communicator> inner, SimScheduler& sim, std::string name)
      : inner_(std::move(inner)), sim_(sim), name_(std::move(name)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Result<std::vector<std::vector<std::uint8_t>>> AllGather(std::span<const std::uint8_t>) override {
    sim_.Kill(name_);
    sim_.Sleep(0);  // throws: killed
    return Error::Io("unreachable");
  }
  Result<std::vector<std::vector<std::uint8_t>>> AllToAll(std::span<const std::uint8_t>,
                                                          std::size_t) override {
    sim_.Kill(name_);
    sim_.Sleep(0);  // throws: killed
    return Error::Io("unreachable");
  }
  Status AllReduceSum(std::span<float> v) override { return inner_->AllReduceSum(v); }
  Status Broadcast(std::span<std::uint8_t> b, int root) override {
    return inner_->Broadcast(b, root);
  }
  TrafficCounters traffic() const override { return inner_->traffic(); }

 private:
  std::unique_ptr<Communicator> inner_;
  SimScheduler& sim_;
  std::string name_;
};

struct WorkerSpec {
  std::string name;
  double step_s = kStepS;  // its inner step's simulated cost
  Hostility hostility = Hostility::kNone;
  int hostile_from_round = 0;
  int corrupt_round = -1;  // its all-gather at this round sees a corrupted frame
  int die_in_round = -1;   // it dies inside this round's all-gather
  double lr = kInnerLr;    // its inner learning rate
  std::function<void(bool)> computing = nullptr;  // told when it starts and stops computing
};

class InProcessRun {
 public:
  explicit InProcessRun(WorkerOptions base) : base_(std::move(base)) {}

  // Starts a worker now (before Go, or from a participant: a joiner).
  void Start(const WorkerSpec& spec) {
    WorkerOptions o = base_;
    o.name = spec.name;
    o.hostility = spec.hostility;
    o.hostile_from_round = spec.hostile_from_round;
    if (spec.computing) o.computing = spec.computing;
    const double step_s = spec.step_s;
    const double lr = spec.lr;
    sim_.Spawn(spec.name, [this, o, step_s, lr, spec] {
      WorkerClock clock{[this] { return sim_.now_s(); }, [this] { return sim_.now_s(); },
                        [this](double s) { sim_.Sleep(s); }};
      ModelFactory model = [this, step_s, lr]() -> Result<std::unique_ptr<Model>> {
        return std::unique_ptr<Model>(
            std::make_unique<TinyModel>(kSeed, lr, [this, step_s] { sim_.Sleep(step_s); }));
      };
      CommFactory comm = [this, spec](const std::string& prefix, int rank, int size,
                                      double timeout_s) -> Result<std::unique_ptr<Communicator>> {
        auto c = Connect(prefix, rank, size, timeout_s);
        if (!c) return c;
        const auto in_round = [&prefix](int round) {
          return round >= 0 && prefix.find("/rounds/" + RoundKey(round) + "/") != std::string::npos;
        };
        if (in_round(spec.corrupt_round)) {
          return std::unique_ptr<Communicator>(std::make_unique<CorruptingComm>(std::move(*c)));
        }
        if (in_round(spec.die_in_round)) {
          return std::unique_ptr<Communicator>(
              std::make_unique<DyingComm>(std::move(*c), sim_, spec.name));
        }
        return c;
      };
      auto r = RunWorker(store_, comm, model, o, clock);
      std::lock_guard lock(mu_);
      if (r) {
        reports_[o.name] = *r;
      } else {
        errors_[o.name] = r.error().message();
      }
    });
  }

  // A participant that runs `body` (faults, joiners) on the same clock.
  void Direct(std::function<void()> body) { sim_.Spawn("director", std::move(body)); }

  // Runs to the end; fails the test on a deadlock or past max_s.
  void Go(double max_s = 600) {
    const Status s = sim_.Run(max_s);
    ASSERT_TRUE(s.ok()) << s.error().message();
  }

  SimScheduler& sim() { return sim_; }
  coord::MemoryStore& store() { return store_; }
  const WorkerReport& report(const std::string& name) {
    std::lock_guard lock(mu_);
    return reports_.at(name);
  }
  bool finished(const std::string& name) {
    std::lock_guard lock(mu_);
    return reports_.count(name) > 0;
  }
  std::map<std::string, std::string> errors() {
    std::lock_guard lock(mu_);
    return errors_;
  }
  const WorkerOptions& options() const { return base_; }

  // The last round agreed so far (-1: none), from the store.
  int LastAgreed() {
    auto r = store_.Get(RunPrefix(base_.run) + "rounds/", true);
    int last = -1;
    if (!r) return last;
    for (const auto& kv : r->kvs) {
      if (!kv.key.ends_with("/agreed")) continue;
      last = std::max(last, json::parse(kv.value)["round"].get<int>());
    }
    return last;
  }
  // Waits (from a participant) until round `round` is agreed.
  void AwaitAgreed(int round) {
    while (LastAgreed() < round) sim_.Sleep(0.01);
  }

 private:
  Result<std::unique_ptr<Communicator>> Connect(const std::string& prefix, int rank, int size,
                                                double timeout_s) {
    std::lock_guard lock(mu_);
    auto& g = groups_[prefix];
    if (!g.group) g.group = std::make_shared<LocalGroup>(size, timeout_s, sim_.waiter());
    if (g.group->size() != size || rank < 0 || rank >= size || g.taken.count(rank)) {
      return Error::Usage("group " + prefix + ": rank " + std::to_string(rank) + " of " +
                          std::to_string(size) + " taken or out of range");
    }
    g.taken.insert(rank);
    return g.group->Member(rank);
  }

  struct Group {
    std::shared_ptr<LocalGroup> group;
    std::set<int> taken;
  };
  WorkerOptions base_;
  SimScheduler sim_;
  coord::MemoryStore store_{[this] { return sim_.now_s(); }};
  std::mutex mu_;
  std::map<std::string, Group> groups_;
  std::map<std::string, WorkerReport> reports_;
  std::map<std::string, std::string> errors_;
};

WorkerOptions Options(int rounds, int start_workers) {
  WorkerOptions o;
  o.run = "inproc";
  o.model = "tiny-test";
  o.inner_steps = kH;
  o.rounds = rounds;
  o.batch = TinyModel::kBatch;
  o.seq_len = 1;
  o.seed = kSeed;
  o.lease_ttl_s = kTtlS;
  o.renew_in_background = false;  // the lease renewed on the simulated clock, by the worker
  o.collective_timeout_s = 2.0;
  o.min_deadline_s = 1.0;
  o.start_workers = start_workers;
  o.eval_every = 1;
  return o;
}

// The auditor: each agreed round from the store, and every hash published for it.
struct AgreedRound {
  int round = -1;
  std::string hash;
  std::vector<std::string> members;
  std::uint64_t tokens = 0;
  int rejected = 0;
  double val_loss = 0;
  std::map<std::string, std::string> hashes;  // member id -> its published hash
};

// From the store's history (a watch from the first revision): hashes are leased, so a member's
// are gone from the store once it has left.
std::vector<AgreedRound> Audit(coord::Store& store, const std::string& run) {
  std::map<int, AgreedRound> rounds;
  const std::string prefix = RunPrefix(run) + "rounds/";
  std::int64_t after = 1;  // the store's first revision: its whole history
  while (true) {
    auto w = store.Watch(prefix, true, after, 0.0);
    EXPECT_TRUE(w.ok());
    if (!w.ok() || w->events.empty()) break;
    EXPECT_FALSE(w->compacted);
    after = w->revision;
    for (const auto& e : w->events) {
      if (e.type != coord::WatchEvent::Type::kPut) continue;
      const std::string rest = e.kv.key.substr(prefix.size());
      const int round = std::stoi(rest.substr(0, 8));
      if (rest.ends_with("/agreed")) {
        const json j = json::parse(e.kv.value);
        AgreedRound& a = rounds[round];
        EXPECT_EQ(a.round, -1) << "round " << round << " agreed twice";
        a.round = round;
        a.hash = j["hash"];
        a.members = j["members"].get<std::vector<std::string>>();
        a.tokens = j["tokens"];
        a.rejected = j["rejected"];
        a.val_loss = j.value("val_loss", std::nan(""));  // none: skipped, no power granted
      } else if (const auto at = rest.find("/hash/"); at != std::string::npos) {
        auto& h = rounds[round].hashes[rest.substr(at + 6)];
        EXPECT_TRUE(h.empty()) << e.kv.key << " published twice";
        h = e.kv.value;
      }
    }
  }
  std::vector<AgreedRound> out;
  for (auto& [round, a] : rounds) out.push_back(a);
  return out;
}

// Every round 0..rounds-1 agreed once, in order.
void ExpectEveryRoundAgreed(const std::vector<AgreedRound>& rounds, int n) {
  ASSERT_EQ(static_cast<int>(rounds.size()), n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(rounds[static_cast<size_t>(r)].round, r);
}

// The member ids of a worker: its current one and any earlier lease it registered under.
std::string IdOf(InProcessRun& run, const std::string& name) { return run.report(name).member; }

double FinalLoss(const std::vector<AgreedRound>& rounds) { return rounds.back().val_loss; }

// The same run without faults: its final validation loss, by replay.
double ReplayLoss(const WorkerOptions& o, std::vector<int> members) {
  ReplayOptions ro;
  ro.worker = o;
  ro.workers = *std::max_element(members.begin(), members.end());
  ro.members = std::move(members);
  ModelFactory model = []() -> Result<std::unique_ptr<Model>> {
    return std::unique_ptr<Model>(std::make_unique<TinyModel>(kSeed, kInnerLr, nullptr));
  };
  auto r = ReplayRun(model, ro, nullptr);
  EXPECT_TRUE(r.ok());
  return r->final_val_loss;
}

// ---------------------------------------------------------------------------------------------
// The invariant, fault by fault.

// No fault: every member of every round holds the round's model, and that model is the replay's
// (the same arithmetic without the store, the groups or the clock) to the last bit.
TEST(DilocoInProcess, ACalmRunIsItsReplayBitForBit) {
  constexpr int kRounds = 6;
  InProcessRun run(Options(kRounds, 3));
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Go();
  ASSERT_TRUE(run.errors().empty()) << run.errors().begin()->second;
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    EXPECT_EQ(a.members.size(), 3u) << "round " << a.round;
    ASSERT_EQ(a.hashes.size(), 3u) << "round " << a.round;
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash) << "round " << a.round << " " << id;
    EXPECT_EQ(a.rejected, 0);
    EXPECT_EQ(a.tokens, static_cast<std::uint64_t>(3 * (a.round + 1) * kH * TinyModel::kBatch));
  }
  // The replay's arithmetic gives the same loss, bit for bit, and the donor's final model hashes
  // to the last agreed hash.
  const double replay = ReplayLoss(run.options(), std::vector<int>(kRounds, 3));
  EXPECT_EQ(FinalLoss(rounds), replay);
  std::vector<float> final_params;
  for (int i = 0; i < 3; ++i) {
    const auto& r = run.report("worker-" + std::to_string(i));
    EXPECT_EQ(r.rounds_done, kRounds);
    EXPECT_EQ(r.rounds_contributed, kRounds);
    EXPECT_TRUE(r.hashes_agreed);
    EXPECT_EQ(r.resyncs, 0);
    if (!r.final_params.empty()) final_params = r.final_params;
    // Accounting: the phases add up to the wall time.
    EXPECT_NEAR(r.compute_s + r.communicate_s + r.wait_s + r.recover_s + r.throttled_s, r.wall_s,
                1e-9);
    EXPECT_NEAR(r.compute_s, kRounds * kH * kStepS, 1e-9);
  }
  ASSERT_FALSE(final_params.empty());
  EXPECT_EQ(Hex(Sha256Floats(final_params)), rounds.back().hash);
  // The loss fell: the run trains.
  EXPECT_LT(rounds.back().val_loss, 0.5 * rounds.front().val_loss);
}

// A member killed mid-round (SIGKILL: no goodbye, its lease left to lapse): the others close
// the next group without it within an ordinary round plus two leases, every hash agrees, and the
// run ends within 3 % of the calm run's loss. A fresh member joins later through a donor, its
// state checked against the agreed hash, and contributes from its first round in.
TEST(DilocoInProcess, AKilledMemberIsLeftBehindAndAJoinerResyncsAndContributes) {
  constexpr int kRounds = 10;
  InProcessRun run(Options(kRounds, 4));
  for (int i = 0; i < 4; ++i) run.Start({"worker-" + std::to_string(i)});
  double killed_at = -1, agreed_after = -1, ordinary_round_s = -1;
  run.Direct([&] {
    run.AwaitAgreed(1);
    const double r1 = run.sim().now_s();
    run.AwaitAgreed(2);
    ordinary_round_s = run.sim().now_s() - r1;
    run.sim().Sleep(0.5 * kH * kStepS);  // mid-way through round 3's inner steps
    run.sim().Kill("worker-1");
    killed_at = run.sim().now_s();
    run.AwaitAgreed(3);
    agreed_after = run.sim().now_s();
    run.AwaitAgreed(5);
    run.Start({"worker-4"});
  });
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  EXPECT_FALSE(run.finished("worker-1"));
  ASSERT_GT(killed_at, 0);
  // Not waited for past its lease: the round it died in is agreed within an ordinary round and
  // two leases of the kill.
  EXPECT_LE(agreed_after - killed_at, ordinary_round_s + 2 * kTtlS);
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  const std::string joiner = IdOf(run, "worker-4");
  int joiner_rounds = 0;
  for (const auto& a : rounds) {
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash) << "round " << a.round << " " << id;
    if (std::find(a.members.begin(), a.members.end(), joiner) != a.members.end()) ++joiner_rounds;
  }
  EXPECT_EQ(rounds[3].members.size(), 3u);  // the round worker-1 died in went on without it
  const auto& w4 = run.report("worker-4");
  EXPECT_EQ(w4.resyncs, 1);
  EXPECT_GE(w4.rounds_contributed, 1);
  EXPECT_EQ(w4.rounds_contributed, joiner_rounds);
  EXPECT_TRUE(w4.hashes_agreed);
  const double calm = ReplayLoss(run.options(), std::vector<int>(kRounds, 4));
  EXPECT_NEAR(FinalLoss(rounds), calm, 0.03 * calm);
}

// A member more than 1.5x slower than the fastest is not waited for: the group closes at the
// fastest one's deadline, the straggler resyncs from the round's donor and is back for later
// rounds (each time it arrives late it is left out again).
TEST(DilocoInProcess, AStragglerIsLeftOutNotWaitedForAndResyncs) {
  constexpr int kRounds = 4;
  WorkerOptions o = Options(kRounds, 4);
  o.min_deadline_s = 0.1;  // the deadline is 0.5 x the compute time (kH x kStepS = 0.5 s)
  InProcessRun run(o);
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Start({"worker-slow", 4 * kStepS});  // 2 s of compute against 0.5 s
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  const auto& slow = run.report("worker-slow");
  for (const auto& a : rounds) {
    EXPECT_EQ(std::count(a.members.begin(), a.members.end(), slow.member), 0)
        << "round " << a.round;
    EXPECT_EQ(a.members.size(), 3u);
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash);
  }
  EXPECT_GE(slow.resyncs, 1);
  EXPECT_EQ(slow.rounds_contributed, 0);
  // Nobody waited for it: the three fast workers' rounds are paced by their own compute.
  const auto& fast = run.report("worker-0");
  EXPECT_LT(fast.wall_s, kRounds * (kH * kStepS + o.collective_timeout_s));
}

// Each hostile kind (a scaled, a sign-flipped, a NaN-holding and a forged contribution) is
// excluded from every round from its first on; the run ends within 3 % of the honest run.
class DilocoHostile : public ::testing::TestWithParam<Hostility> {};

TEST_P(DilocoHostile, ExcludedFromItsFirstRoundOnAndTheLossHolds) {
  constexpr int kRounds = 6;
  constexpr int kFrom = 1;
  InProcessRun run(Options(kRounds, 4));
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Start({"worker-3", kStepS, GetParam(), kFrom});
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    EXPECT_EQ(a.rejected, a.round >= kFrom ? 1 : 0) << "round " << a.round;
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash) << "round " << a.round;
  }
  // Honest: the three others every round, and the hostile one in round 0.
  std::vector<int> members(kRounds, 3);
  members[0] = 4;
  const double honest = ReplayLoss(run.options(), members);
  EXPECT_NEAR(FinalLoss(rounds), honest, 0.03 * honest);
  EXPECT_EQ(run.report("worker-3").rounds_contributed, kFrom);
}

INSTANTIATE_TEST_SUITE_P(Kinds, DilocoHostile,
                         ::testing::Values(Hostility::kScale, Hostility::kFlip, Hostility::kNan,
                                           Hostility::kForge),
                         [](const ::testing::TestParamInfo<Hostility>& p) {
                           switch (p.param) {
                             case Hostility::kScale:
                               return std::string("Scale");
                             case Hostility::kFlip:
                               return std::string("Flip");
                             case Hostility::kNan:
                               return std::string("Nan");
                             default:
                               return std::string("Forge");
                           }
                         });

// A member whose view of a round differs (a frame corrupted on its way to it alone) ends the
// round on another model: its hash is the minority's, it is evicted, resyncs from the donor,
// and from the next round on holds the round's model again.
TEST(DilocoInProcess, AMemberWhoseModelDiffersIsEvictedAndResyncs) {
  constexpr int kRounds = 5;
  constexpr int kBad = 2;
  InProcessRun run(Options(kRounds, 4));
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  WorkerSpec odd{"worker-3"};
  odd.corrupt_round = kBad;
  run.Start(odd);
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  const std::string id = IdOf(run, "worker-3");
  for (const auto& a : rounds) {
    ASSERT_TRUE(a.hashes.count(id) || a.round > kBad) << "round " << a.round;
    for (const auto& [who, h] : a.hashes) {
      if (a.round == kBad && who == id) {
        EXPECT_NE(h, a.hash) << "its model differs after the corrupted round";
      } else {
        EXPECT_EQ(h, a.hash) << "round " << a.round << " " << who;
      }
    }
  }
  const auto& w3 = run.report("worker-3");
  EXPECT_FALSE(w3.hashes_agreed);
  EXPECT_EQ(w3.resyncs, 1);
  // Back for the rounds after the one it was evicted from.
  EXPECT_EQ(std::count(rounds.back().members.begin(), rounds.back().members.end(), id), 1);
  // The other members saw the disagreement as one eviction each.
  EXPECT_FALSE(run.report("worker-0").hashes_agreed);
}

// A member that dies inside the all-gather breaks the collective: the others fail within the
// collective timeout and attempt the round again without it; nothing of the failed attempt is
// counted.
TEST(DilocoInProcess, ACollectiveThatFailsIsAttemptedAgainWithoutTheDeadMember) {
  constexpr int kRounds = 4;
  WorkerOptions o = Options(kRounds, 3);
  InProcessRun run(o);
  for (int i = 0; i < 2; ++i) run.Start({"worker-" + std::to_string(i)});
  WorkerSpec dying{"worker-2"};
  dying.die_in_round = 1;
  run.Start(dying);
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  EXPECT_EQ(rounds[1].members.size(), 2u);
  // A second attempt was made for round 1 (its group under attempt 1).
  auto second = run.store().Get(RunPrefix(o.run) + "rounds/" + RoundKey(1) + "/1/group", false);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->kvs.size(), 1u);
  for (const auto& a : rounds) {
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash);
  }
  // The failed all-gather: waited for up to the collective timeout, then attempted again.
  // (The first member to time out leaves the group at once: the others fail then, up to a poll
  // period sooner.)
  EXPECT_GE(run.report("worker-0").communicate_s, o.collective_timeout_s - 0.1);
  bool again = false;
  for (const auto& line : run.report("worker-0").log) {
    again |= line.find("again without whoever is gone") != std::string::npos;
  }
  EXPECT_TRUE(again);
}

// A member stopped past its lease (SIGSTOP, then SIGCONT) finds itself gone: the run went on
// without it, and it comes back as a new member through a donor.
TEST(DilocoInProcess, AMemberStoppedPastItsLeaseRegistersAgainAndResyncs) {
  constexpr int kRounds = 16;
  InProcessRun run(Options(kRounds, 3));
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Direct([&] {
    run.AwaitAgreed(1);
    run.sim().Stop("worker-2", 1.5 * kTtlS);  // past its lease
  });
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash);
  }
  const auto& w2 = run.report("worker-2");
  EXPECT_GE(w2.resyncs, 1);
  EXPECT_GE(w2.rounds_contributed, 1);
  // Its member id changed: it registered again, and contributed under the new one.
  const auto& last = rounds.back().members;
  EXPECT_EQ(std::count(last.begin(), last.end(), w2.member), 1);
  bool registered_again = false;
  for (const auto& line : w2.log)
    registered_again |= line.find("registering again") != std::string::npos;
  EXPECT_TRUE(registered_again);
}

// control/<name> leave: true takes a member out at the next round boundary (nobody waits for
// it), leave: false brings it back through a donor; a member at half duty idles as long as it
// computes.
TEST(DilocoInProcess, ALeaveAndARejoinOnRequestAndAMemberAtHalfDuty) {
  constexpr int kRounds = 8;
  InProcessRun run(Options(kRounds, 3));
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  const std::string control = RunPrefix("inproc") + "control/";
  ASSERT_TRUE(run.store().Put(control + "worker-2", R"({"duty": 0.5})", 0).ok());
  run.Direct([&] {
    run.AwaitAgreed(1);
    ASSERT_TRUE(run.store().Put(control + "worker-1", R"({"leave": true})", 0).ok());
    run.AwaitAgreed(4);
    ASSERT_TRUE(run.store().Put(control + "worker-1", R"({"leave": false})", 0).ok());
  });
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), run.options().run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  const auto& w1 = run.report("worker-1");
  EXPECT_EQ(w1.leaves, 1);
  EXPECT_EQ(w1.resyncs, 1);
  int out = 0;
  for (const auto& a : rounds) {
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash);
    if (std::count(a.members.begin(), a.members.end(), w1.member) == 0) ++out;
  }
  EXPECT_GE(out, 2);  // out for the rounds between the two requests
  EXPECT_EQ(w1.rounds_contributed, kRounds - out);
  EXPECT_EQ(std::count(rounds.back().members.begin(), rounds.back().members.end(), w1.member), 1);
  // Half duty: idle (throttled) as long as it computed.
  const auto& w2 = run.report("worker-2");
  EXPECT_NEAR(w2.throttled_s, w2.compute_s, 1e-6);
  EXPECT_NEAR(w2.compute_s, kRounds * kH * kStepS, 1e-9);
}

// A starting checkpoint (--init-checkpoint) is every member's first model, and the run's
// config carries its hash: with the inner steps standing still (learning rate 0) every round's
// model is the checkpoint's, bit for bit. A member with another starting model is refused, and
// one of another size before it touches the run.
TEST(DilocoInProcess, AStartingCheckpointIsEveryMembersFirstModel) {
  constexpr int kRounds = 2;
  WorkerOptions o = Options(kRounds, 2);
  o.init_parameters.resize(TinyModel::kParameters);
  for (std::size_t i = 0; i < o.init_parameters.size(); ++i) {
    o.init_parameters[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  }
  const std::string init = Hex(Sha256Floats(o.init_parameters));
  InProcessRun run(o);
  for (int i = 0; i < 2; ++i) {
    WorkerSpec still{"worker-" + std::to_string(i)};
    still.lr = 0;
    run.Start(still);
  }
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) EXPECT_EQ(a.hash, init) << "round " << a.round;
  auto config = run.store().Get(RunPrefix(o.run) + "config", false);
  ASSERT_TRUE(config.ok() && config->kvs.size() == 1);
  EXPECT_EQ(json::parse(config->kvs[0].value)["init"], init);

  // Another starting model: the run's settings differ; another size: refused before the store.
  WorkerOptions other = o;
  other.init_parameters[0] += 1.0f;
  WorkerOptions wrong = o;
  wrong.run = "other-run";
  wrong.init_parameters.resize(10);
  std::map<std::string, std::string> errors;
  for (const auto& [name, opts] : {std::pair{"other", other}, std::pair{"wrong", wrong}}) {
    InProcessRun late(opts);
    // The same store's run: its config is copied in first.
    ASSERT_TRUE(late.store().Put(RunPrefix(o.run) + "config", config->kvs[0].value, 0).ok());
    late.Start({name});
    late.Go();
    errors[name] = late.errors()[name];
  }
  EXPECT_NE(errors["other"].find("has other settings in the store"), std::string::npos)
      << errors["other"];
  EXPECT_NE(errors["wrong"].find("the starting checkpoint has 10 parameters"), std::string::npos)
      << errors["wrong"];
}

// On a site's spare power (docs/DILOCO.md, "On spare power"): a grant that falls to nothing
// pauses every worker at once and takes them out at the round boundary (no round is agreed
// while they have no watts, and they say they are not computing); when watts return they are
// back, with no donor needed (none agreed a round meanwhile), and the run ends with every hash
// agreed.
TEST(DilocoInProcess, WorkersOnSparePowerPauseWhileTheirGrantIsNothing) {
  constexpr int kRounds = 6;
  constexpr double kOffS = 2.0, kOnS = 8.0;  // no watts from 2 s to 8 s
  WorkerOptions o = Options(kRounds, 2);
  SimScheduler* sim = nullptr;
  // The grant as the fleet member would give it: all it asks, or nothing.
  o.granted_duty = [&sim](int, double duty) {
    const double t = sim->now_s();
    return t >= kOffS && t < kOnS ? 0.0 : duty;
  };
  InProcessRun site(o);
  sim = &site.sim();
  std::vector<std::pair<double, bool>> told;  // (time, computing), worker-0's
  int agreed_at_off = -2, agreed_before_on = -2;
  WorkerSpec w0spec{"worker-0"};
  w0spec.computing = [&](bool c) { told.emplace_back(sim->now_s(), c); };
  site.Start(w0spec);
  site.Start({"worker-1"});
  site.Direct([&] {
    site.sim().Sleep(kOffS + 1.0);  // a round boundary has passed since the grant fell
    agreed_at_off = site.LastAgreed();
    site.sim().Sleep(kOnS - kOffS - 1.01);
    agreed_before_on = site.LastAgreed();
  });
  site.Go();
  EXPECT_TRUE(site.errors().empty());
  EXPECT_EQ(agreed_at_off, agreed_before_on) << "a round was agreed with no watts granted";
  const auto rounds = Audit(site.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash);
  }
  const auto& w0 = site.report("worker-0");
  EXPECT_EQ(w0.leaves, 1);
  EXPECT_GE(w0.throttled_s, kOnS - kOffS - 1.0);
  // Not computing from the moment the grant fell (within a step) until it returned.
  bool stopped = false, restarted = false;
  for (const auto& [t, c] : told) {
    if (!c && t >= kOffS && t <= kOffS + kStepS + 1e-9) stopped = true;
    if (c && t >= kOnS) restarted = true;
    if (c) {
      EXPECT_FALSE(t > kOffS + kStepS && t < kOnS) << "computing at " << t;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(restarted);
}

// The data-parallel baseline: one all-reduce of the fp32 gradient per step, its bytes by Gloo's
// ring formula, its tokens every member's every step, and every member on the same bits.
TEST(DilocoInProcess, TheDataParallelBaselineMovesItsGradientEveryStep) {
  constexpr int kRounds = 3;
  WorkerOptions o = Options(kRounds, 3);
  o.mode = "ddp";
  InProcessRun run(o);
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  const std::uint64_t steps = kRounds * kH;
  const std::uint64_t chunk = (TinyModel::kParameters + 2) / 3;
  for (int i = 0; i < 3; ++i) {
    const auto& r = run.report("worker-" + std::to_string(i));
    EXPECT_EQ(r.traffic.bytes_sent, steps * 2 * 2 * chunk * 4);
    EXPECT_EQ(r.tokens, steps * TinyModel::kBatch);
  }
  EXPECT_EQ(rounds.back().tokens, 3 * steps * TinyModel::kBatch);
  for (const auto& a : rounds) {
    ASSERT_EQ(a.hashes.size(), 3u);
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash);
  }
}

// `--aggregate mean`: each member's chunks all-to-all, each owner's mean all-gathered (no
// screen). Every member of every round holds the same model; the bytes are the formula's,
// (k - 1) chunk frames and (k - 1) mean frames a round (scatter.h; on a model this small the
// padding to whole blocks outweighs the halving, which diloco_core's test shows at a million
// values); the loss is the all-gathered plain mean's within int8's second rounding.
TEST(DilocoInProcess, TheMeanByReduceScatterAgreesEveryRoundAndMovesTheFormulasBytes) {
  constexpr int kRounds = 6;
  WorkerOptions o = Options(kRounds, 4);
  o.aggregate = Aggregation::kMean;
  InProcessRun run(o);
  for (int i = 0; i < 4; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Go();
  ASSERT_TRUE(run.errors().empty()) << run.errors().begin()->second;
  const auto rounds = Audit(run.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    ASSERT_EQ(a.hashes.size(), 4u) << "round " << a.round;
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash) << "round " << a.round << " " << id;
    EXPECT_EQ(a.tokens, static_cast<std::uint64_t>(4 * (a.round + 1) * kH * TinyModel::kBatch));
  }
  const std::uint64_t per_round = 3 * (ChunkFrameBytes(Codec::kInt8, TinyModel::kParameters, 4) +
                                       MeanFrameBytes(Codec::kInt8, TinyModel::kParameters, 4));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(run.report("worker-" + std::to_string(i)).traffic.bytes_sent, kRounds * per_round);
  }
  WorkerOptions p = Options(kRounds, 4);
  p.screen.trimmed_mean = false;  // the same mean, all-gathered
  InProcessRun plain(p);
  for (int i = 0; i < 4; ++i) plain.Start({"worker-" + std::to_string(i)});
  plain.Go();
  ASSERT_TRUE(plain.errors().empty());
  const double plain_loss = FinalLoss(Audit(plain.store(), p.run));
  EXPECT_NEAR(FinalLoss(rounds), plain_loss, 0.01 * plain_loss);
  EXPECT_NE(FinalLoss(rounds), plain_loss);  // two roundings, not one: not the same arithmetic
}

// `--stream-fragments 2` (streaming DiLoCo): the first fragment is sent half-way through each
// round on the last round's group (on this simulated clock at once, on the worker's thread) and
// applied at the round's end, the second is the round's own exchange. Every hash agrees every
// round; round 0 syncs only the last fragment (no group yet), each later round both, by the
// bytes; the loss is near the same run unstreamed.
TEST(DilocoInProcess, StreamingSyncsAFragmentDuringTheRoundAndEveryHashAgrees) {
  constexpr int kRounds = 8;
  WorkerOptions o = Options(kRounds, 3);
  o.stream_fragments = 2;
  o.stream_in_background = false;
  InProcessRun run(o);
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Go();
  ASSERT_TRUE(run.errors().empty()) << run.errors().begin()->second;
  const auto rounds = Audit(run.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    ASSERT_EQ(a.hashes.size(), 3u) << "round " << a.round;
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash) << "round " << a.round << " " << id;
  }
  // Fragments of 256 and 44 values (whole blocks of 256).
  const std::uint64_t first = FrameBytes(Codec::kInt8, 256);
  const std::uint64_t last = FrameBytes(Codec::kInt8, TinyModel::kParameters - 256);
  for (int i = 0; i < 3; ++i) {
    const auto& r = run.report("worker-" + std::to_string(i));
    EXPECT_EQ(r.traffic.bytes_sent, 2 * last + (kRounds - 1) * 2 * (first + last));
    EXPECT_EQ(r.resyncs, 0);
  }
  InProcessRun whole(Options(kRounds, 3));
  for (int i = 0; i < 3; ++i) whole.Start({"worker-" + std::to_string(i)});
  whole.Go();
  const double whole_loss = FinalLoss(Audit(whole.store(), "inproc"));
  // 48.9 against 43.3 (deterministic): round 0 cannot stream (no group yet), so the first
  // fragment's first outer step comes a round late.
  EXPECT_LT(FinalLoss(rounds), 1.2 * whole_loss);
  EXPECT_LT(rounds.back().val_loss, 0.5 * rounds.front().val_loss);  // it trains
}

// A member killed during a streamed round: the others' fragment collective on the last round's
// group fails (the dead member never brings its part), that fragment is not synced this round
// and the group is given up; the round's own exchange closes a group without the dead member and
// every hash agrees, every round.
TEST(DilocoInProcess, StreamingWithAMemberKilledMidRoundGoesOnAndEveryHashAgrees) {
  constexpr int kRounds = 6;
  WorkerOptions o = Options(kRounds, 3);
  o.stream_fragments = 2;
  o.stream_in_background = false;
  InProcessRun run(o);
  for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
  run.Direct([&] {
    run.AwaitAgreed(1);
    run.sim().Sleep(0.25 * kH * kStepS);  // round 2, before its first fragment is sent
    run.sim().Kill("worker-2");
  });
  run.Go();
  EXPECT_TRUE(run.errors().empty());
  const auto rounds = Audit(run.store(), o.run);
  ExpectEveryRoundAgreed(rounds, kRounds);
  for (const auto& a : rounds) {
    for (const auto& [id, h] : a.hashes) EXPECT_EQ(h, a.hash) << "round " << a.round << " " << id;
  }
  EXPECT_EQ(rounds[2].members.size(), 2u);
  EXPECT_EQ(rounds.back().members.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(run.report("worker-" + std::to_string(i)).resyncs, 0);
}

// Streaming's exchange on a thread of its own (stream.h), as the worker runs it with
// stream_in_background: three members on real threads and the steady clock, each starting its
// exchange in the background, writing its own buffer meanwhile, then waiting: every member gets
// the same aggregate (the plain mean of the three, by hand), and the error feedback the
// background wrote is the caller's after Wait (TSan: `make test-tsan` runs this). A member gone
// makes the others' result an Io error, not a hang past the group's timeout.
TEST(DilocoInProcess, StreamingExchangesRunOnAThreadOfTheirOwnAndHandTheirResultBack) {
  constexpr std::size_t n = 300;
  const std::vector<std::uint8_t> key = {'k', 'e', 'y'};
  const std::vector<std::uint64_t> ids = {5, 6, 7};
  LocalGroup group(3, 30.0);
  std::vector<Aggregate> got(3);
  std::vector<std::vector<float>> errors(3);
  std::vector<std::thread> members;
  for (int r = 0; r < 3; ++r) {
    members.emplace_back([&, r] {
      auto comm = group.Member(r);
      std::vector<float> delta(n, static_cast<float>(r + 1));  // 1, 2, 3: the mean is 2
      ExchangeSpec spec{FragmentRound(4, 0, 2), ids, r,   Codec::kNone,
                        Aggregation::kMean,     {},  key, key};
      BackgroundExchange bg;
      bg.Start(0, [&]() -> BackgroundExchange::Result_ {
        std::string why;
        return Exchange(*comm, spec, delta, errors[static_cast<size_t>(r)], &why);
      });
      std::vector<float> busy(1000, 1.0f);  // the inner steps, meanwhile
      for (int i = 1; i < 1000; ++i)
        busy[static_cast<size_t>(i)] += busy[static_cast<size_t>(i - 1)];
      EXPECT_TRUE(bg.pending());
      auto result = bg.Wait();
      EXPECT_FALSE(bg.pending());
      ASSERT_TRUE(result && result->has_value());
      got[static_cast<size_t>(r)] = **result;
    });
  }
  for (auto& t : members) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)].mean, std::vector<float>(n, 2.0f)) << r;
    EXPECT_EQ(got[static_cast<size_t>(r)].accepted, (std::vector<std::uint32_t>{0, 1, 2}));
    EXPECT_EQ(errors[static_cast<size_t>(r)], std::vector<float>(n, 0.0f));  // fp32: nothing lost
  }
  // Member 2 gone: the others' exchange fails (Io) within the group's timeout.
  LocalGroup broken(3, 30.0);
  broken.Kill(2);
  std::vector<std::thread> left;
  for (int r = 0; r < 2; ++r) {
    left.emplace_back([&, r] {
      auto comm = broken.Member(r);
      std::vector<float> delta(n, 1.0f), error;
      ExchangeSpec spec{0, ids, r, Codec::kNone, Aggregation::kMean, {}, key, key};
      BackgroundExchange bg;
      bg.Start(0, [&]() -> BackgroundExchange::Result_ {
        std::string why;
        auto agg = Exchange(*comm, spec, delta, error, &why);
        if (agg && !agg->has_value()) return Error::Io(why);
        return agg;
      });
      auto result = bg.Wait();
      ASSERT_FALSE(result);
      EXPECT_EQ(result.error().kind(), ErrorKind::kIo);
    });
  }
  for (auto& t : left) t.join();
  // Fragments: whole blocks, as even as they go; each sent at round((f + 1) H / N).
  const auto f = Fragments(1000, 3, 256);  // 4 blocks over 3: 1, 1, 2
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].begin, 0u);
  EXPECT_EQ(f[0].end, 256u);
  EXPECT_EQ(f[1].end, 512u);
  EXPECT_EQ(f[2].end, 1000u);
  EXPECT_EQ(FragmentStep(0, 3, 100), 33);
  EXPECT_EQ(FragmentStep(1, 3, 100), 67);
  EXPECT_EQ(FragmentStep(2, 3, 100), 100);
  EXPECT_NE(FragmentRound(4, 0, 2), FragmentRound(4, 1, 2));
  EXPECT_EQ(FragmentRound(4, 1, 2), 4u);  // the round's own exchange carries the round
}

// The simulation is deterministic: the same run twice is the same history, to the revision.
TEST(DilocoInProcess, TheSameRunTwiceIsTheSameHistory) {
  auto once = [] {
    InProcessRun run(Options(3, 3));
    for (int i = 0; i < 3; ++i) run.Start({"worker-" + std::to_string(i)});
    run.Go();
    std::vector<std::string> history;
    auto r = run.store().Get("", true);
    for (const auto& kv : r->kvs) {
      history.push_back(kv.key + "=" + kv.value + "@" + std::to_string(kv.mod_revision));
    }
    return history;
  };
  EXPECT_EQ(once(), once());
}

}  // namespace
}  // namespace headroom::diloco
