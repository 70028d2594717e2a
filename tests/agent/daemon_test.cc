// The agent daemon's shutdown order (agent/daemon.h), against a fake source, a guard over fake
// GPUs and a member of an in-memory site: the power limits are put back while the member still
// holds its lease and while the API still answers; the member leaves and the server stops after.
#include "agent/daemon.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "agent/options.h"
#include "control/factory.h"
#include "coord/layout.h"
#include "coord/memory_store.h"

namespace headroom::agent {
namespace {

constexpr double kOriginalLimitW = 400.0;

double MonotonicS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Two GPUs drawing 300 W each under a 400 W limit. Before its first reading it waits (bounded)
// until `ready` says so: the site's member has registered.
class FakeGpus final : public telemetry::Source {
 public:
  explicit FakeGpus(std::function<bool()> ready) : ready_(std::move(ready)) {}
  std::string_view name() const override { return "fake"; }
  int gpus() const override { return 2; }
  Result<telemetry::Sample> Read(double t_s) override {
    const double deadline_s = MonotonicS() + 20.0;
    while (ready_ && !ready_() && MonotonicS() < deadline_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polls a condition
    }
    telemetry::Sample s;
    s.t_s = t_s;
    for (int g = 0; g < 2; ++g) {
      telemetry::GpuSample gpu;
      gpu.power_w = 300.0;
      gpu.power_limit_w = kOriginalLimitW;
      s.gpus.push_back(gpu);
    }
    return s;
  }

 private:
  std::function<bool()> ready_;
};

// What the fake GPUs saw when each limit was put back.
struct Restores {
  std::mutex mu;
  int lowered = 0;
  int restored = 0;
  int restored_with_lease = 0;  // the member's key still in the store
  int restored_serving = 0;     // the API still answering
};

bool MemberKeyPresent(coord::Store& store, const std::string& site, const std::string& job) {
  auto r = store.Get(coord::Keys(site).member(job));
  return r && !r->kvs.empty();
}

// One GET /v1/status over loopback: whether an HTTP answer came.
bool ApiAnswers(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  const std::string request =
      "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ok = ok && write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size());
  char buf[16] = {};
  ok = ok && read(fd, buf, 12) == 12 && std::string(buf, 9) == "HTTP/1.1 ";
  close(fd);
  return ok;
}

struct Fixture {
  coord::MemoryStore store{MonotonicS};
  Restores restores;
  std::optional<control::BuiltController> controller;
  AgentOptions options;
  std::function<int()> port = [] { return 0; };

  DaemonParts Parts() {
    options.source = std::string("nvml");
    options.controller = std::string("uncontrolled");
    options.budget_w = 100.0;  // in a site, at most the floor
    options.interval_s = 0.5;
    options.duration_s = 5.0;
    options.site_etcd = std::string("etcd://127.0.0.1:1");
    options.site = std::string("s");
    options.job = std::string("j");
    auto config = DeriveConfig(options, nullptr);
    EXPECT_TRUE(config.ok());
    auto spec = DeriveController(options, *config, nullptr, nullptr);
    EXPECT_TRUE(spec.ok());
    auto built = control::MakeController(*spec);
    EXPECT_TRUE(built.ok());
    controller.emplace(std::move(*built));
    DaemonParts parts;
    parts.config = *config;
    parts.controller = &controller->get();
    parts.source = std::make_unique<FakeGpus>([this] { return MemberKeyPresent(store, "s", "j"); });
    parts.speed = 0.0;
    parts.duration_s = options.duration_s;
    parts.guard = std::make_unique<PowerLimitGuard>(
        [this](int /*gpu*/, double w) {
          std::lock_guard lock(restores.mu);
          if (w < kOriginalLimitW) {
            ++restores.lowered;
            return OkStatus();
          }
          ++restores.restored;
          if (MemberKeyPresent(store, "s", "j")) ++restores.restored_with_lease;
          if (port() > 0 && ApiAnswers(port())) ++restores.restored_serving;
          return OkStatus();
        },
        200.0);
    SiteParts site;
    site.store = &store;
    MemberFacts f;
    f.gpus = 2;
    f.floor_w = 100.0;
    f.nameplate_w = 400.0;
    f.standby_w = 60.0;
    auto member = DeriveMember(options, f, Logger());
    EXPECT_TRUE(member.ok()) << member.error().message();
    site.member = *member;
    site.overhead_w = [](double) { return 0.0; };
    parts.site = std::move(site);
    return parts;
  }
};

DaemonClock Clock() {
  return {MonotonicS, [] { return 1.7e9; }, [](double) {}};
}

// The member's update watts (reservations before the update): --update-w per GPU, else the
// twin's; capped at the nameplate; with the node overhead, for the job's GPUs.
TEST(DeriveMember, TheUpdatesWattsFromTheOptionElseTheTwinsCappedAtTheNameplate) {
  AgentOptions o;
  o.site_etcd = "etcd://127.0.0.1:2379";
  o.site = "s";
  o.job = "j";
  o.floor_w = 100.0;
  MemberFacts f;
  f.gpus = 2;
  f.overhead_w = 50.0;
  f.nameplate_w = 400.0;
  f.standby_w = 60.0;
  auto m = DeriveMember(o, f, Logger());
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->update_w, 0.0);  // unknown: the coordinator takes the timeline's
  f.update_w = 380.0;
  m = DeriveMember(o, f, Logger());
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->update_w, 2 * 380.0 + 50.0);
  o.update_w = 900.0;  // above the nameplate: the nameplate
  m = DeriveMember(o, f, Logger());
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->update_w, 2 * 400.0 + 50.0);
  AgentOptions alone;
  alone.source = "twin";
  alone.update_w = 300.0;
  const Status refused = CheckAgentOptions(alone);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("--update-w"), std::string::npos);
}

// Issue 53, item 10: --standby-w above the nameplate is refused in one line naming both (before:
// taken, and silently counted at the floor).
TEST(DeriveMember, AStandbyAboveTheNameplateIsRefused) {
  AgentOptions o;
  o.site_etcd = "etcd://127.0.0.1:2379";
  o.site = "s";
  o.job = "j";
  o.floor_w = 100.0;
  MemberFacts f;
  f.gpus = 2;
  f.nameplate_w = 400.0;
  o.standby_w = 400.0;  // at the nameplate: taken (counted at the floor, as before)
  auto m = DeriveMember(o, f, Logger());
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_DOUBLE_EQ(m->standby_w, 2 * 100.0);
  o.standby_w = 401.0;
  m = DeriveMember(o, f, Logger());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().kind(), ErrorKind::kUsage);
  EXPECT_EQ(m.error().message(),
            "--standby-w 401 W per GPU is above the nameplate 400 W per GPU (standby is the GPUs "
            "idle with the model loaded)");
}

TEST(Daemon, PutsTheLimitsBackBeforeTheMemberLeaves) {
  Fixture fx;
  AgentDaemon daemon(fx.Parts(), Clock(), Logger());
  std::atomic<bool> stop{false};
  const AgentDaemon::Stopped stopped = daemon.Run(stop);
  EXPECT_TRUE(stopped.restored.ok());
  EXPECT_EQ(stopped.summary.intervals, 11u);  // t = 0, 0.5, ..., 5 s
  // The guard lowered both GPUs (300 W against a budget of at most the floor) and put both back.
  EXPECT_EQ(fx.restores.lowered, 2);
  EXPECT_EQ(fx.restores.restored, 2);
  // Each while the member still held its lease; after the run, it has left.
  EXPECT_EQ(fx.restores.restored_with_lease, 2);
  EXPECT_FALSE(MemberKeyPresent(fx.store, "s", "j"));
}

TEST(DaemonServer, PutsTheLimitsBackWhileTheApiStillAnswersThenStopsIt) {
  Fixture fx;
  AgentDaemon daemon(fx.Parts(), Clock(), Logger());
  fx.port = [&daemon] { return daemon.port(); };
  ASSERT_TRUE(daemon.Listen("127.0.0.1", 0, ApiConfig{}, net::ServerLimits{}).ok());
  const int port = daemon.port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(ApiAnswers(port));
  std::atomic<bool> stop{false};
  const AgentDaemon::Stopped stopped = daemon.Run(stop);
  EXPECT_TRUE(stopped.restored.ok());
  EXPECT_EQ(fx.restores.restored, 2);
  EXPECT_EQ(fx.restores.restored_serving, 2);
  EXPECT_EQ(fx.restores.restored_with_lease, 2);
  EXPECT_FALSE(ApiAnswers(port));
  EXPECT_FALSE(MemberKeyPresent(fx.store, "s", "j"));
}

}  // namespace
}  // namespace headroom::agent
