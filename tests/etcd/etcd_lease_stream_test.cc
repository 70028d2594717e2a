// Lease renewals on one gRPC stream (etcd/etcd_lease_stream.h) against real etcd processes
// (tests/support/etcd_cluster.h), through EtcdStore as the site uses it and through LeaseStream
// alone. etcd's own /metrics count the streams it started: one for every renewal of a store.
// Skipped without /usr/bin/etcd.
#include "etcd/etcd_lease_stream.h"
#include "etcd/etcd_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/etcd_cluster.h"
#include "support/etcd_suite.h"
#include "support/silent_listener.h"

// A namespace of its own: etcd_store_test.cc shares a unity build's translation unit.
namespace headroom::etcd::lease_stream_test {
namespace {

using etcd_test::EtcdCluster;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A counter of member i's /metrics for the LeaseKeepAlive method, summed over its series (the
// values of its other labels); -1 when it cannot be read.
double LeaseKeepAliveMetric(const EtcdCluster& cluster, int i, const std::string& name) {
  const std::optional<EtcdCluster::Reply> r = cluster.Post(i, "/metrics", "");
  if (!r || r->status != 200) return -1;
  double sum = 0;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0 ||
        line.find("grpc_method=\"LeaseKeepAlive\"") == std::string::npos) {
      continue;
    }
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}
double StreamsStarted(const EtcdCluster& c, int i = 0) {
  return LeaseKeepAliveMetric(c, i, "grpc_server_started_total");
}
double MessagesReceived(const EtcdCluster& c, int i = 0) {
  return LeaseKeepAliveMetric(c, i, "grpc_server_msg_received_total");
}

class LeaseStreamTest : public etcd_test::OneEtcdPerSuite {
 protected:
  static std::unique_ptr<EtcdStore> OpenStore(EtcdKeepAlive keepalive) {
    Result<std::unique_ptr<EtcdStore>> store =
        EtcdStore::Open(cluster_->endpoints(), 2.0, {}, {}, keepalive);
    EXPECT_TRUE(store.ok()) << store.error().message();
    return store.ok() ? std::move(*store) : nullptr;
  }
};

TEST(EtcdKeepAliveOption, NamesBothWaysAndRefusesOthers) {
  EXPECT_EQ(*ParseEtcdKeepAlive("grpc"), EtcdKeepAlive::kGrpcStream);
  EXPECT_EQ(*ParseEtcdKeepAlive("http"), EtcdKeepAlive::kHttpPost);
  EXPECT_STREQ(EtcdKeepAliveName(EtcdKeepAlive::kGrpcStream), "grpc");
  EXPECT_STREQ(EtcdKeepAliveName(EtcdKeepAlive::kHttpPost), "http");
  Result<EtcdKeepAlive> other = ParseEtcdKeepAlive("websocket");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().kind(), ErrorKind::kUsage);
  EXPECT_EQ(kDefaultEtcdKeepAlive, EtcdKeepAlive::kGrpcStream);
}

// Many renewals, one stream: etcd starts one LeaseKeepAlive call and receives one message per
// renewal. Over HTTP, each renewal is a call of its own.
TEST_F(LeaseStreamTest, ManyRenewalsOfAStoreAreOneStream) {
  std::unique_ptr<EtcdStore> store = OpenStore(EtcdKeepAlive::kGrpcStream);
  ASSERT_NE(store, nullptr);
  Result<coord::LeaseId> a = store->LeaseGrant(30);
  Result<coord::LeaseId> b = store->LeaseGrant(60);
  ASSERT_TRUE(a.ok() && b.ok());
  const double started = StreamsStarted(*cluster_);
  const double received = MessagesReceived(*cluster_);
  ASSERT_GE(started, 0);
  constexpr int kRenewals = 20;
  for (int i = 0; i < kRenewals; ++i) {
    Result<int64_t> ttl_a = store->LeaseKeepAlive(*a);
    ASSERT_TRUE(ttl_a.ok()) << ttl_a.error().message();
    EXPECT_EQ(*ttl_a, 30);
    Result<int64_t> ttl_b = store->LeaseKeepAlive(*b);
    ASSERT_TRUE(ttl_b.ok()) << ttl_b.error().message();
    EXPECT_EQ(*ttl_b, 60);
  }
  EXPECT_EQ(StreamsStarted(*cluster_) - started, 1);
  EXPECT_EQ(MessagesReceived(*cluster_) - received, 2 * kRenewals);

  std::unique_ptr<EtcdStore> http = OpenStore(EtcdKeepAlive::kHttpPost);
  ASSERT_NE(http, nullptr);
  const double started_http = StreamsStarted(*cluster_);
  for (int i = 0; i < kRenewals; ++i) ASSERT_TRUE(http->LeaseKeepAlive(*a).ok());
  EXPECT_EQ(StreamsStarted(*cluster_) - started_http, kRenewals);
}

// etcd answers a revoked lease with TTL 0: the lease is gone (kNotFound, as over HTTP), and the
// stream stays open for the others.
TEST_F(LeaseStreamTest, ARevokedLeaseIsGoneAndTheStreamGoesOn) {
  std::unique_ptr<EtcdStore> store = OpenStore(EtcdKeepAlive::kGrpcStream);
  ASSERT_NE(store, nullptr);
  Result<coord::LeaseId> kept = store->LeaseGrant(30);
  Result<coord::LeaseId> revoked = store->LeaseGrant(30);
  ASSERT_TRUE(kept.ok() && revoked.ok());
  ASSERT_TRUE(store->LeaseKeepAlive(*revoked).ok());
  ASSERT_TRUE(store->LeaseRevoke(*revoked).ok());
  const double started = StreamsStarted(*cluster_);
  Result<int64_t> gone = store->LeaseKeepAlive(*revoked);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(coord::IsLeaseGone(gone.error())) << gone.error().message();
  EXPECT_NE(gone.error().message().find(std::string(coord::kLeaseGone)), std::string::npos);
  Result<int64_t> ttl_s = store->LeaseKeepAlive(*kept);
  ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
  EXPECT_EQ(*ttl_s, 30);
  // A lease etcd never granted: gone too.
  Result<int64_t> never = store->LeaseKeepAlive(0x7eadbeef);
  ASSERT_FALSE(never.ok());
  EXPECT_TRUE(coord::IsLeaseGone(never.error())) << never.error().message();
  EXPECT_EQ(StreamsStarted(*cluster_) - started, 0);
}

// The bench's shape: many members' threads renewing their own leases on one store at once, and
// a few on the same lease. Every renewal answered with its own lease's TTL, on one stream.
TEST_F(LeaseStreamTest, ManyThreadsRenewOnOneStoreAtOnce) {
  std::unique_ptr<EtcdStore> store = OpenStore(EtcdKeepAlive::kGrpcStream);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 16;
  constexpr int kRenewals = 50;
  std::vector<coord::LeaseId> leases;
  for (int t = 0; t < kThreads; ++t) {
    // TTLs tell the answers apart; threads 14 and 15 share thread 13's lease.
    Result<coord::LeaseId> lease =
        t < 14 ? store->LeaseGrant(10 + t) : Result<coord::LeaseId>(leases[13]);
    ASSERT_TRUE(lease.ok()) << lease.error().message();
    leases.push_back(*lease);
  }
  const double started = StreamsStarted(*cluster_);
  const double received = MessagesReceived(*cluster_);
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int64_t expected_ttl_s = 10 + std::min(t, 13);
      for (int i = 0; i < kRenewals; ++i) {
        Result<int64_t> ttl_s = store->LeaseKeepAlive(leases[t]);
        if (!ttl_s.ok()) {
          ++failed;
          ADD_FAILURE() << ttl_s.error().message();
        } else if (*ttl_s != expected_ttl_s) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(StreamsStarted(*cluster_) - started, 1);
  EXPECT_EQ(MessagesReceived(*cluster_) - received, kThreads * kRenewals);
}

// etcd killed under an open stream: the renewal fails (Io, or Unavailable once the stream is
// known broken and nothing answers), never as a lost lease; restarted, the next renewal opens a
// new stream and renews (etcd keeps leases over a restart).
TEST(LeaseStreamRestart, TheNextRenewalAfterARestartOpensANewStream) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(1, &why);
  ASSERT_TRUE(cluster) << why;
  Result<std::unique_ptr<EtcdStore>> opened =
      EtcdStore::Open(cluster->endpoints(), 1.0, {}, {}, EtcdKeepAlive::kGrpcStream);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EtcdStore& store = **opened;
  Result<coord::LeaseId> lease = store.LeaseGrant(60);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.LeaseKeepAlive(*lease).ok());

  cluster->Kill(0);
  for (int i = 0; i < 3; ++i) {
    const Clock::time_point start = Clock::now();
    Result<int64_t> down = store.LeaseKeepAlive(*lease);
    ASSERT_FALSE(down.ok());
    EXPECT_FALSE(coord::IsLeaseGone(down.error())) << down.error().message();
    EXPECT_TRUE(down.error().kind() == ErrorKind::kIo ||
                down.error().kind() == ErrorKind::kUnavailable)
        << down.error().message();
    EXPECT_NE(down.error().message().find(cluster->endpoint(0)), std::string::npos)
        << down.error().message();
    EXPECT_LT(SecondsSince(start), 2.5);  // an open's timeout, then an answer's
  }

  ASSERT_TRUE(cluster->Restart(0, &why)) << why;
  const double started = StreamsStarted(*cluster);
  Result<int64_t> ttl_s = store.LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
  EXPECT_EQ(*ttl_s, 60);
  ASSERT_TRUE(store.LeaseKeepAlive(*lease).ok());
  EXPECT_EQ(StreamsStarted(*cluster) - started, 1);
}

// Eight threads renewing their leases on one store while etcd is killed and restarted: every
// failure meanwhile is one of transport (never a lost lease, never a hang past the timeouts),
// and every thread renews again once etcd is back. (Each thread renews every 10 ms: a pace, as
// a member's period is, not a synchronisation.)
TEST(LeaseStreamRestart, ManyThreadsRenewThroughARestart) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(1, &why);
  ASSERT_TRUE(cluster) << why;
  Result<std::unique_ptr<EtcdStore>> opened =
      EtcdStore::Open(cluster->endpoints(), 1.0, {}, {}, EtcdKeepAlive::kGrpcStream);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EtcdStore& store = **opened;
  constexpr int kThreads = 8;
  constexpr double kSlowestRenewalS = 2.5;  // an open's timeout, then an answer's
  std::vector<coord::LeaseId> leases;
  for (int t = 0; t < kThreads; ++t) {
    Result<coord::LeaseId> lease = store.LeaseGrant(60);
    ASSERT_TRUE(lease.ok()) << lease.error().message();
    leases.push_back(*lease);
  }
  std::mutex mu;
  std::condition_variable renewed;
  int epoch = 0;                           // 1 once etcd is back
  std::vector<int> last_ok(kThreads, -1);  // the epoch of each thread's last renewal
  std::atomic<int> gone{0}, slow{0}, wrong_ttl{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!stop) {
        const Clock::time_point start = Clock::now();
        Result<int64_t> ttl_s = store.LeaseKeepAlive(leases[t]);
        if (SecondsSince(start) > kSlowestRenewalS) ++slow;
        if (ttl_s.ok()) {
          if (*ttl_s != 60) ++wrong_ttl;
          std::lock_guard<std::mutex> lock(mu);
          last_ok[t] = epoch;
          renewed.notify_all();
        } else if (coord::IsLeaseGone(ttl_s.error())) {
          ++gone;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  const auto all_renewed_in = [&](int e) {
    std::unique_lock<std::mutex> lock(mu);
    return renewed.wait_for(lock, std::chrono::seconds(20), [&] {
      return std::all_of(last_ok.begin(), last_ok.end(), [e](int v) { return v == e; });
    });
  };
  EXPECT_TRUE(all_renewed_in(0));
  cluster->Kill(0);
  const bool restarted = cluster->Restart(0, &why);
  {
    std::lock_guard<std::mutex> lock(mu);
    epoch = 1;
  }
  EXPECT_TRUE(restarted) << why;
  EXPECT_TRUE(restarted && all_renewed_in(1));
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(gone, 0);
  EXPECT_EQ(slow, 0);
  EXPECT_EQ(wrong_ttl, 0);
}

// Three members, the stream on the leader: the leader killed, the renewals that fail move the
// stream on to the other members, where renewals go on (etcd forwards them to its new leader).
// Until one is elected, etcd ends the stream at each failed renewal: those fail too, never as a
// lost lease, and the stream moves on again.
TEST(LeaseStreamRestart, AStreamWhoseMemberDiesMovesToTheOthers) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(3, &why);
  ASSERT_TRUE(cluster) << why;
  const int leader = cluster->LeaderIndex();
  ASSERT_GE(leader, 0);
  const int second = (leader + 1) % 3, third = (leader + 2) % 3;
  const std::string endpoints =
      cluster->endpoint(leader) + "," + cluster->endpoint(second) + "," + cluster->endpoint(third);
  Result<std::unique_ptr<EtcdStore>> opened =
      EtcdStore::Open(endpoints, 1.0, {}, {}, EtcdKeepAlive::kGrpcStream);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EtcdStore& store = **opened;
  Result<coord::LeaseId> lease = store.LeaseGrant(60);
  ASSERT_TRUE(lease.ok());
  const double on_leader = StreamsStarted(*cluster, leader);
  ASSERT_TRUE(store.LeaseKeepAlive(*lease).ok());
  EXPECT_EQ(StreamsStarted(*cluster, leader) - on_leader, 1);  // the first endpoint's

  const auto on_others = [&] {
    return StreamsStarted(*cluster, second) + StreamsStarted(*cluster, third);
  };
  const double before = on_others();
  cluster->Kill(leader);
  constexpr double kElectionDeadlineS = 15.0;
  const Clock::time_point killed = Clock::now();
  int failures = 0;
  Result<int64_t> ttl_s = store.LeaseKeepAlive(*lease);
  while (!ttl_s.ok()) {
    ++failures;
    EXPECT_FALSE(coord::IsLeaseGone(ttl_s.error())) << ttl_s.error().message();
    ASSERT_LT(SecondsSince(killed), kElectionDeadlineS) << ttl_s.error().message();
    ttl_s = store.LeaseKeepAlive(*lease);
  }
  std::printf(
      "renewals after the leader under the stream was killed: first success after "
      "%.2f s, %d failed\n",
      SecondsSince(killed), failures);
  EXPECT_EQ(*ttl_s, 60);
  const double streams = on_others();
  EXPECT_GE(streams - before, 1);
  // Settled: the renewals stay on that stream.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.LeaseKeepAlive(*lease).ok());
  EXPECT_EQ(on_others(), streams);
}

// An endpoint that takes the connection and never speaks: the open fails within its timeout,
// naming the endpoint.
TEST(LeaseStreamAlone, ASilentEndpointFailsWithinTheTimeout) {
  test_support::SilentListener silent;
  ASSERT_GT(silent.port(), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(silent.port());
  LeaseStream stream({url}, 0.3, {}, nullptr);
  const Clock::time_point start = Clock::now();
  Result<int64_t> kept = stream.KeepAlive(42);
  ASSERT_FALSE(kept.ok());
  EXPECT_LT(SecondsSince(start), 1.5);
  EXPECT_NE(kept.error().message().find(url), std::string::npos) << kept.error().message();
  EXPECT_NE(kept.error().message().find("no connection within 0.3 s"), std::string::npos)
      << kept.error().message();
  EXPECT_EQ(stream.streams_opened(), 0);
}

// Nothing listens: the open fails at once, saying so.
TEST(LeaseStreamAlone, NoMemberIsUnavailableAtOnce) {
  const std::string url = "http://127.0.0.1:1";
  LeaseStream stream({url}, 2.0, {}, nullptr);
  const Clock::time_point start = Clock::now();
  Result<int64_t> kept = stream.KeepAlive(42);
  ASSERT_FALSE(kept.ok());
  EXPECT_EQ(kept.error().kind(), ErrorKind::kUnavailable) << kept.error().message();
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_NE(kept.error().message().find("etcd at " + url + ": gRPC Lease/LeaseKeepAlive: " + url),
            std::string::npos)
      << kept.error().message();
  EXPECT_EQ(stream.streams_opened(), 0);
}

// With etcd's auth on: the stream carries the store's token and renews the user's leases.
TEST(LeaseStreamAuth, RenewsWithTheStoresToken) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(1, &why);
  ASSERT_TRUE(cluster) << why;
  const std::string failed = cluster->EnableAuth("alice", "alicepw", "L3Qv", "L3Qw");
  ASSERT_TRUE(failed.empty()) << failed;
  Result<std::unique_ptr<EtcdStore>> alice =
      EtcdStore::Open(cluster->endpoints(), 2.0, EtcdCredentials{"alice", "alicepw"}, {},
                      EtcdKeepAlive::kGrpcStream);
  ASSERT_TRUE(alice.ok()) << alice.error().message();
  EtcdStore& store = **alice;
  Result<coord::LeaseId> lease = store.LeaseGrant(20);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  ASSERT_TRUE(store.Put("/t/k", "v", *lease).ok());
  for (int i = 0; i < 3; ++i) {
    Result<int64_t> ttl_s = store.LeaseKeepAlive(*lease);
    ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
    EXPECT_EQ(*ttl_s, 20);
  }
  ASSERT_TRUE(store.LeaseRevoke(*lease).ok());
  Result<int64_t> gone = store.LeaseKeepAlive(*lease);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(coord::IsLeaseGone(gone.error())) << gone.error().message();
}

// TLS with a client certificate (etcd's --client-cert-auth): the stream uses the store's CA,
// certificate and key. gRPC checks etcd's host name in the certificate's subjectAltName only
// (RFC 6125): one that names 127.0.0.1 in its common name alone is refused, which the gateway's
// client (httplib) accepts.
TEST(LeaseStreamTls, RenewsOverTlsWithTheClientCertificate) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl";
  char pattern[] = "/tmp/headroom-lease-tls-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  // clientAuth too: etcd's gateway speaks gRPC to etcd itself with the server's certificate.
  std::ofstream(dir + "/server.ext")
      << "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n";
  std::ofstream(dir + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string sign = "-CA ca.pem -CAkey ca.key -CAcreateserial -days 1";
  for (const std::string& step :
       {"openssl req -x509 " + key + " -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca",
        "openssl req " + key + " -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        "openssl x509 -req -in server.csr " + sign + " -extfile server.ext -out server.pem",
        "openssl x509 -req -in server.csr " + sign + " -out cn-only.pem",
        "openssl req " + key + " -keyout client.key -out client.csr -subj /O=headroom-client",
        "openssl x509 -req -in client.csr " + sign + " -extfile client.ext -out client.pem"}) {
    const std::string command = "cd " + dir + " && " + step + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  const auto files = [&](const std::string& cert) {
    return EtcdCluster::Tls{dir + "/" + cert, dir + "/server.key", dir + "/ca.pem"};
  };
  const EtcdTls tls{dir + "/ca.pem", dir + "/client.pem", dir + "/client.key"};
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(1, &why, files("server.pem"));
  ASSERT_TRUE(cluster) << why;
  Result<std::unique_ptr<EtcdStore>> store =
      EtcdStore::Open(cluster->tls_endpoints(), 2.0, {}, tls, EtcdKeepAlive::kGrpcStream);
  ASSERT_TRUE(store.ok()) << store.error().message();
  Result<coord::LeaseId> lease = (*store)->LeaseGrant(15);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  const double started = StreamsStarted(*cluster);
  for (int i = 0; i < 3; ++i) {
    Result<int64_t> ttl_s = (*store)->LeaseKeepAlive(*lease);
    ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
    EXPECT_EQ(*ttl_s, 15);
  }
  EXPECT_EQ(StreamsStarted(*cluster) - started, 1);

  // 127.0.0.1 in the common name alone: the gateway's client opens, the stream does not. The
  // renewals go by the gateway instead (one started call each), never failing for the stream.
  std::optional<EtcdCluster> cn_only = EtcdCluster::Start(1, &why, files("cn-only.pem"));
  ASSERT_TRUE(cn_only) << why;
  store = EtcdStore::Open(cn_only->tls_endpoints(), 2.0, {}, tls, EtcdKeepAlive::kGrpcStream);
  ASSERT_TRUE(store.ok()) << store.error().message();
  lease = (*store)->LeaseGrant(15);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  const double cn_started = StreamsStarted(*cn_only);
  for (int i = 0; i < 3; ++i) {
    Result<int64_t> ttl_s = (*store)->LeaseKeepAlive(*lease);
    ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
    EXPECT_EQ(*ttl_s, 15);
  }
  EXPECT_EQ(StreamsStarted(*cn_only) - cn_started, 3);  // by the gateway: a call each
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace headroom::etcd::lease_stream_test
