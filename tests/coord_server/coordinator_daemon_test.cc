// The coordinator's composition root (coord_server/daemon.h) over the in-memory store, on a
// clock the test moves: each period runs when the test advances the clock, wakes the loop or
// stops it, and the test waits (with a deadline) until the loop is asleep again. The stop order
// (the lease revoked while the API still answers, then the server stopped), a target that wakes
// the loop, and the suspender's actions on a fake batch scheduler.
#include "coord_server/daemon.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/memory_store.h"
#include "slurm/batch_scheduler.h"

namespace headroom::coord_server {
namespace {

constexpr double kSiteW = 1000.0;
constexpr double kReserveW = 100.0;
constexpr double kUnixEpochS = 1.7e9;  // the wall clock at monotonic 0
constexpr const char* kToken = "s3cret-token";
constexpr auto kWaitLimit = std::chrono::seconds(20);  // a deadline, never a delay

// The daemon's clock: time moves only when the test advances it; a sleep ends when the clock
// reaches its end, on a wake, or on a stop. Counts the sleeps: the loop sleeps once a period,
// so `n` sleeps means n Steps done and the loop parked.
class TestClock {
 public:
  double now_s() {
    std::lock_guard lock(mu_);
    return now_s_;
  }
  void SleepUntil(double t_s) {
    std::unique_lock lock(mu_);
    ++sleeps_;
    deadlines_.push_back(t_s);
    cv_.notify_all();
    cv_.wait(lock, [&] { return stop_.load() || woken_ || now_s_ >= t_s; });
    woken_ = false;
  }
  void Wake() {
    std::lock_guard lock(mu_);
    woken_ = true;
    cv_.notify_all();
  }
  void Advance(double s) {
    std::lock_guard lock(mu_);
    now_s_ += s;
    cv_.notify_all();
  }
  void Stop() {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  // Whether the loop has slept n times (within the deadline).
  bool WaitForSleeps(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kWaitLimit, [&] { return sleeps_ >= n; });
  }
  int sleeps() {
    std::lock_guard lock(mu_);
    return sleeps_;
  }
  // Where each sleep was to end.
  std::vector<double> deadlines() {
    std::lock_guard lock(mu_);
    return deadlines_;
  }
  const std::atomic<bool>& stop() const { return stop_; }

  CoordinatorClock Clock() {
    return {[this] { return now_s(); }, [this] { return kUnixEpochS + now_s(); },
            [this](double t_s) { SleepUntil(t_s); }, [this] { Wake(); }};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  double now_s_ = 0.0;
  int sleeps_ = 0;
  std::vector<double> deadlines_;
  bool woken_ = false;
  std::atomic<bool> stop_{false};
};

// Calls `on_revoke` once a lease revocation has reached the store (on the caller's thread).
class RevokeWatchingStore final : public coord::ForwardingStore {
 public:
  explicit RevokeWatchingStore(coord::Store* target) : coord::ForwardingStore(target) {}
  std::function<void()> on_revoke;

 protected:
  void End(coord::StoreCall call, bool ok) override {
    if (call == coord::StoreCall::kLeaseRevoke && ok && on_revoke) on_revoke();
  }
};

httplib::Client ClientOf(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2);
  c.set_read_timeout(5);
  return c;
}

class CoordinatorDaemonTest : public ::testing::Test {
 protected:
  CoordinatorDaemonTest() : store_([this] { return clock_.now_s(); }) {}
  ~CoordinatorDaemonTest() override {
    clock_.Stop();
    if (thread_.joinable()) thread_.join();
  }

  // The daemon on a free loopback port over `store` (the memory store by default).
  void Start(coord::Store* store = nullptr, std::optional<SlurmParts> slurm = std::nullopt,
             std::optional<ParentParts> parent = std::nullopt) {
    coord::CoordinatorConfig config;
    config.site = "s";
    config.site_budget_w = kSiteW;
    config.reserve_w = kReserveW;
    config.id = "replica-1";
    if (parent) {
      config.parent_site = parent->config.parent_site;
      config.period_s = parent->config.period_s;
    }
    CoordinatorApiConfig api;
    api.access.token = kToken;
    daemon_.emplace(
        store != nullptr ? *store : store_, config, api, slurm, clock_.Clock(),
        [this](const LogEvent& e) {
          std::lock_guard lock(log_mu_);
          log_.push_back(e.msg);
        },
        parent);
    Status bound = daemon_->Listen({"127.0.0.1", 0});
    ASSERT_TRUE(bound.ok()) << bound.error().message();
    port_ = daemon_->port();
    thread_ = std::thread([this] { daemon_->Run(clock_.stop()); });
  }

  // Runs periods until `done` or `max_periods`, acknowledging the grants after each, as the
  // members acting on them would. Whether `done` held.
  bool RunPeriodsUntil(const std::function<bool()>& done, int max_periods) {
    for (int i = 0; i < max_periods; ++i) {
      const int slept = clock_.sleeps();
      if (done()) return true;
      AckGrants();
      clock_.Advance(1.0);
      if (!clock_.WaitForSleeps(slept + 1)) return false;
    }
    return done();
  }

  void PutMember(const std::string& job, double floor_w, double demand_w, coord::JobClass job_class,
                 const std::string& slurm_job = "") {
    Result<coord::LeaseId> lease = store_.LeaseGrant(3600);
    ASSERT_TRUE(lease.ok());
    leases_[job] = *lease;
    coord::Member m;
    m.job = job;
    m.gpus = 1;
    m.nameplate_w = demand_w;
    m.floor_w = floor_w;
    m.demand_w = demand_w;
    m.power_w = demand_w;
    m.lease = *lease;
    m.job_class = job_class;
    m.slurm_job = slurm_job;
    ASSERT_TRUE(store_.Put(coord::Keys("s").member(job), coord::ToJson(m), m.lease).ok());
  }

  void AckGrants() {
    Result<coord::RangeResult> grants = store_.Get(coord::Keys("s").grants(), true);
    ASSERT_TRUE(grants.ok());
    for (const coord::KeyValue& kv : grants->kvs) {
      Result<coord::Grant> g = coord::GrantFromJson(kv.value, kv.key);
      ASSERT_TRUE(g.ok()) << g.error().message();
      if (!leases_.contains(g->job)) continue;
      coord::Ack a{g->job, g->term, g->seq, g->lease, g->job_budget_w};
      ASSERT_TRUE(
          store_.Put(coord::Keys("s").ack(g->job), coord::ToJson(a), leases_.at(g->job)).ok());
    }
  }

  bool HasLeaderKey() {
    Result<coord::RangeResult> r = store_.Get(coord::Keys("s").leader(), false);
    return r.ok() && !r->kvs.empty();
  }

  std::optional<coord::Ledger> StoredLedger() {
    Result<coord::RangeResult> r = store_.Get(coord::Keys("s").ledger(), false);
    if (!r.ok() || r->kvs.empty()) return std::nullopt;
    Result<coord::Ledger> l = coord::LedgerFromJson(r->kvs[0].value, "ledger");
    return l.ok() ? std::optional<coord::Ledger>(*l) : std::nullopt;
  }

  std::vector<std::string> Log() {
    std::lock_guard lock(log_mu_);
    return log_;
  }

  // Declared in the order they are needed: the daemon's thread is joined by the destructor,
  // before any of them goes.
  TestClock clock_;
  coord::MemoryStore store_;
  RevokeWatchingStore watched_{&store_};
  std::mutex log_mu_;
  std::vector<std::string> log_;
  std::map<std::string, coord::LeaseId> leases_;
  int port_ = 0;
  // What the store saw at the lease's revocation (written on the daemon's thread, read after
  // it is joined).
  int revocations_ = 0;
  bool leader_key_after_revoke_ = true;
  int status_during_resign_ = 0;
  std::optional<CoordinatorDaemon> daemon_;
  std::thread thread_;
};

TEST_F(CoordinatorDaemonTest, AStopRevokesTheLeaseWhileTheApiAnswersThenStopsTheServer) {
  // The store sees the revocation on the daemon's thread: at that moment the leader key must be
  // gone and the API must still answer.
  watched_.on_revoke = [this] {
    ++revocations_;
    leader_key_after_revoke_ = HasLeaderKey();
    httplib::Client c = ClientOf(port_);
    if (httplib::Result res = c.Get("/v1/status")) status_during_resign_ = res->status;
  };
  Start(&watched_);
  ASSERT_TRUE(clock_.WaitForSleeps(1));
  ASSERT_TRUE(HasLeaderKey()) << "the only replica leads after its first period";
  {
    httplib::Client c = ClientOf(port_);
    httplib::Result res = c.Get("/v1/status");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("\"leader\""), std::string::npos) << res->body;
  }

  clock_.Stop();
  thread_.join();
  EXPECT_EQ(revocations_, 1);
  EXPECT_FALSE(leader_key_after_revoke_) << "the lease revoked takes the leader key with it";
  EXPECT_EQ(status_during_resign_, 200) << "the API answers while the replica resigns";
  // Then the server: nothing answers any more.
  httplib::Client c = ClientOf(port_);
  EXPECT_FALSE(c.Get("/v1/status"));
  const std::vector<std::string> log = Log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back(), "stopped");
  ASSERT_GE(log.size(), 3u);
  EXPECT_NE(log[0].find("replica replica-1 of site 's': etcd memory, site budget 1000.0 W"),
            std::string::npos)
      << log[0];
  EXPECT_NE(log[0].find("token required on POST and GET /v1/history"), std::string::npos) << log[0];
  EXPECT_EQ(log[1], "listening on http://127.0.0.1:" + std::to_string(port_) + "/");
  EXPECT_EQ(daemon_->config().listen, "127.0.0.1:" + std::to_string(port_));
}

TEST_F(CoordinatorDaemonTest, ATargetAcceptedRunsTheNextPeriodAtOnce) {
  Start();
  ASSERT_TRUE(clock_.WaitForSleeps(1));
  ASSERT_TRUE(HasLeaderKey());
  std::optional<coord::Ledger> before = StoredLedger();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->target_revision, 0);

  // The clock stands still: only the target's wake can end the loop's sleep.
  httplib::Client c = ClientOf(port_);
  httplib::Headers headers{{"Authorization", std::string("Bearer ") + kToken}};
  httplib::Result res =
      c.Post("/v1/site-budget", headers, R"({"site_budget_w": 1200})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 202) << res->body;
  ASSERT_TRUE(clock_.WaitForSleeps(2)) << "the loop was not woken";
  EXPECT_EQ(clock_.now_s(), 0.0);
  std::optional<coord::Ledger> after = StoredLedger();
  ASSERT_TRUE(after);
  EXPECT_GT(after->target_revision, 0) << "the woken period applied the target";
  EXPECT_DOUBLE_EQ(after->target_site_budget_w, 1200.0);
  EXPECT_DOUBLE_EQ(after->site_budget_w, 1200.0);
}

TEST_F(CoordinatorDaemonTest, EveryPeriodOnTheClockAMissedOneSkipped) {
  Start();
  ASSERT_TRUE(clock_.WaitForSleeps(1));
  clock_.Advance(1.0);  // 1 s: on time
  ASSERT_TRUE(clock_.WaitForSleeps(2));
  clock_.Advance(3.5);  // 4.5 s: the periods at 2, 3 and 4 s missed (a slow store), one Step
  ASSERT_TRUE(clock_.WaitForSleeps(3));
  ASSERT_EQ(clock_.deadlines(), (std::vector<double>{1.0, 2.0, 5.0}));
  clock_.Advance(0.5);  // 5 s: on time again
  ASSERT_TRUE(clock_.WaitForSleeps(4));
  EXPECT_EQ(clock_.deadlines(), (std::vector<double>{1.0, 2.0, 5.0, 6.0}));
}

TEST_F(CoordinatorDaemonTest, TheSuspendersActionsAreAppliedToTheBatchScheduler) {
  slurm::FakeBatchScheduler slurm;
  slurm.Add("12");
  // A guaranteed job that wants every watt, and an opportunistic worker run by Slurm.
  PutMember("g", 500, 900, coord::JobClass::kGuaranteed);
  PutMember("w", 0, 100, coord::JobClass::kOpportunistic, "12");
  Start(nullptr, SlurmParts{&slurm, {.suspend_after_s = 2.0}});
  ASSERT_TRUE(clock_.WaitForSleeps(1));
  // Granted nothing for 2 s: suspended.
  EXPECT_TRUE(RunPeriodsUntil(
      [&] { return slurm.state("12") == slurm::FakeBatchScheduler::State::kSuspended; }, 10));
  // The guaranteed job leaves: watts return to the worker, resumed.
  ASSERT_TRUE(store_.LeaseRevoke(leases_.at("g")).ok());
  leases_.erase("g");
  EXPECT_TRUE(RunPeriodsUntil(
      [&] { return slurm.state("12") == slurm::FakeBatchScheduler::State::kRunning; }, 10));
  EXPECT_EQ(slurm.calls(), (std::vector<std::string>{"suspend 12", "resume 12"}));
  clock_.Stop();
  thread_.join();
  const std::vector<std::string> log = Log();
  auto logged = [&](const std::string& line) {
    return std::find(log.begin(), log.end(), line) != log.end();
  };
  EXPECT_TRUE(logged("w: slurm job 12 suspended (no watts granted)"));
  EXPECT_TRUE(logged("w: slurm job 12 resumed (watts back)"));
}

// Issue 55: at a domain the parent membership runs on a thread of its own beside the loop and the
// API: the domain registers at its parent site, its grant from there becomes its budget, and at
// the stop it leaves (its parent lease revoked) once its own lead is resigned.
TEST_F(CoordinatorDaemonTest, ADomainJoinsItsParentOnAThreadOfItsOwnAndLeavesAtTheStop) {
  coord::MemoryStore parent([this] { return clock_.now_s(); });
  coord::CoordinatorConfig top;
  top.site = "top";
  top.site_budget_w = 5000;
  top.id = "top-1";
  coord::Coordinator site(
      parent, top, [this] { return clock_.now_s(); }, [](const LogEvent&) {});
  PutMember("a", 100, 500, coord::JobClass::kGuaranteed);
  // A long parent lease: the member's renewals need no particular pace of the test's clock.
  Start(nullptr, std::nullopt,
        ParentParts{&parent,
                    {.parent_site = "top",
                     .parent_etcd = "memory",
                     .domain = "s",
                     .lease_ttl_s = 60,
                     .period_s = 0.05,
                     .holder = ""}});
  const auto member_at_parent = [&] {
    Result<coord::RangeResult> r = parent.Get(coord::Keys("top").member("s"), false);
    return r.ok() && !r->kvs.empty();
  };
  // Until the site has lowered its grant to the domain's demand (its job's 500 W and its
  // reserve: the whole chain, the domain granted, its sums declared, a lower grant made its
  // budget) -- by a deadline: the membership's thread runs on its own time.
  double grant_w = 0.0;
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  const auto until = [&](const std::function<bool()>& done) {
    while (std::chrono::steady_clock::now() < deadline) {
      const int slept = clock_.sleeps();
      if (done()) return true;
      AckGrants();
      clock_.Advance(0.1);
      if (!clock_.WaitForSleeps(slept + 1)) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the thread's turn, not a wait
    }
    return done();
  };
  ASSERT_TRUE(until([&] {
    site.Step();
    Result<coord::RangeResult> r = parent.Get(coord::Keys("top").grant("s"), false);
    if (!r.ok() || r->kvs.empty()) return false;
    Result<coord::Grant> g = coord::GrantFromJson(r->kvs[0].value, "grant");
    if (!g.ok()) return false;
    grant_w = g->job_budget_w;
    const std::optional<coord::Ledger> l = StoredLedger();
    return member_at_parent() && l && grant_w < 999.0 &&
           std::abs(l->site_budget_w - grant_w) < 1e-6;
  })) << ::testing::PrintToString(Log());
  EXPECT_NEAR(grant_w, 500 + kReserveW, 1e-6);
  clock_.Stop();
  thread_.join();
  EXPECT_FALSE(member_at_parent());  // left: its lease revoked
}

}  // namespace
}  // namespace headroom::coord_server
