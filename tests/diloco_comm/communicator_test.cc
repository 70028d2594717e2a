// The Communicator's two implementations: LocalGroup (threads; the unit tier) and Gloo (threads
// of this process over an in-memory store, a real etcd, and a child process that dies; the
// integration tier, built with HEADROOM_WITH_DILOCO). Sums are checked against
// an independent computation in rank order, and across members byte for byte.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coord/memory_store.h"
#include "diloco_comm/local_communicator.h"
#if HEADROOM_WITH_GLOO
#include "diloco_gloo/gloo_communicator.h"
#include "etcd/etcd_store.h"
#include "support/etcd_cluster.h"
#endif

namespace headroom::diloco {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Member `rank`'s contribution: distinct per rank and element, of mixed magnitudes so that the
// order of the terms shows in the bits.
std::vector<float> Values(int rank, size_t n) {
  std::mt19937 rng(static_cast<unsigned>(1000 + rank));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

std::vector<float> SumInRankOrder(int size, size_t n) {
  std::vector<float> sum = Values(0, n);
  for (int r = 1; r < size; ++r) {
    const std::vector<float> term = Values(r, n);
    for (size_t i = 0; i < n; ++i) sum[i] += term[i];
  }
  return sum;
}

Bytes BytesOf(const std::vector<float>& v) {
  Bytes b(v.size() * sizeof(float));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Bytes Payload(int rank, size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(rank * 37 + i * 11 + 5);
  return b;
}

// Runs body(comm) for every member on its own thread; the members' results by rank.
template <class T>
std::vector<T> OnEveryMember(std::vector<std::unique_ptr<Communicator>>& members,
                             const std::function<T(Communicator&)>& body) {
  std::vector<T> results(members.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < members.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = body(*members[r]); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// What one member saw of the three collectives.
struct Seen {
  std::string error;  // empty when all succeeded
  std::vector<Bytes> gathered;
  std::vector<Bytes> scattered;  // the all-to-all's result
  Bytes summed;                  // the all-reduce's result, as bytes
  Bytes received;                // the broadcast's result
  TrafficCounters traffic;
};

constexpr size_t kGatherBytes = 13;
constexpr size_t kChunkBytes = 7;    // of the all-to-all
constexpr size_t kSumFloats = 1001;  // not a multiple of 3 or 4
constexpr size_t kBroadcastBytes = 29;
constexpr int kRoot = 1;  // of the broadcast (0 when the group has one member)

Seen RunCollectives(Communicator& c) {
  Seen seen;
  const int root = c.size() > 1 ? kRoot : 0;
  Result<std::vector<Bytes>> gathered = c.AllGather(Payload(c.rank(), kGatherBytes));
  if (!gathered.ok()) {
    seen.error = gathered.error().message();
    return seen;
  }
  seen.gathered = *gathered;
  // Chunk j of member r is Payload(10 r + j): member j must get Payload(10 r + j) from each r.
  Bytes chunks;
  for (int j = 0; j < c.size(); ++j) {
    const Bytes p = Payload(10 * c.rank() + j, kChunkBytes);
    chunks.insert(chunks.end(), p.begin(), p.end());
  }
  Result<std::vector<Bytes>> scattered = c.AllToAll(chunks, kChunkBytes);
  if (!scattered.ok()) {
    seen.error = scattered.error().message();
    return seen;
  }
  seen.scattered = *scattered;
  std::vector<float> values = Values(c.rank(), kSumFloats);
  if (Status s = c.AllReduceSum(values); !s.ok()) {
    seen.error = s.error().message();
    return seen;
  }
  seen.summed = BytesOf(values);
  Bytes b = c.rank() == root ? Payload(100, kBroadcastBytes) : Bytes(kBroadcastBytes, 0);
  if (Status s = c.Broadcast(b, root); !s.ok()) {
    seen.error = s.error().message();
    return seen;
  }
  seen.received = b;
  seen.traffic = c.traffic();
  return seen;
}

// The three collectives' results and traffic on every member, checked by hand. `rank_order`:
// the sum must be the rank-order sum's bits (the local group); else equal across members and
// close to it (Gloo sums in ring order).
void CheckCollectives(const std::vector<Seen>& seen, bool rank_order) {
  const int k = static_cast<int>(seen.size());
  const int root = k > 1 ? kRoot : 0;
  const std::vector<float> expected_sum = SumInRankOrder(k, kSumFloats);
  for (int r = 0; r < k; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Seen& s = seen[r];
    ASSERT_EQ(s.error, "");
    ASSERT_EQ(s.gathered.size(), static_cast<size_t>(k));
    for (int q = 0; q < k; ++q) EXPECT_EQ(s.gathered[q], Payload(q, kGatherBytes)) << "from " << q;
    ASSERT_EQ(s.scattered.size(), static_cast<size_t>(k));
    for (int q = 0; q < k; ++q) {
      EXPECT_EQ(s.scattered[q], Payload(10 * q + r, kChunkBytes)) << "chunk from " << q;
    }
    EXPECT_EQ(s.summed, seen[0].summed) << "the sum's bits differ from rank 0's";
    if (rank_order) {
      EXPECT_EQ(s.summed, BytesOf(expected_sum));
    } else {
      std::vector<float> got(kSumFloats);
      std::memcpy(got.data(), s.summed.data(), s.summed.size());
      for (size_t i = 0; i < kSumFloats; ++i) {
        // Three or four terms up to 2^20 each: a few ulps of the largest.
        EXPECT_NEAR(got[i], expected_sum[i], 1e-6 * std::ldexp(1.0, 21)) << i;
      }
    }
    EXPECT_EQ(s.received, Payload(100, kBroadcastBytes));

    // By hand: (k - 1) n for the gather, (k - 1) c for the all-to-all, 2 (k - 1) ceil(m / k) 4 for
    // the sum, the tree for the broadcast.
    const std::uint64_t km1 = static_cast<std::uint64_t>(k - 1);
    const std::uint64_t chunk = (kSumFloats + k - 1) / k;
    std::uint64_t bsent = 0;
    std::uint64_t breceived = r == root ? 0 : kBroadcastBytes;
    const int v = (r - root + k) % k;                   // rank relative to the root
    if (k == 3 && v == 0) bsent = 2 * kBroadcastBytes;  // to v = 1 and v = 2
    if (k == 4 && v == 0) bsent = 2 * kBroadcastBytes;  // to v = 1 and v = 2
    if (k == 4 && v == 1) bsent = kBroadcastBytes;      // to v = 3
    if (k == 2 && v == 0) bsent = kBroadcastBytes;
    EXPECT_EQ(s.traffic.bytes_sent,
              km1 * kGatherBytes + km1 * kChunkBytes + 2 * km1 * chunk * 4 + bsent);
    EXPECT_EQ(s.traffic.bytes_received,
              km1 * kGatherBytes + km1 * kChunkBytes + 2 * km1 * chunk * 4 + breceived);
  }
}

// ---------------------------------------------------------------------------------------------
// The formulas.

TEST(TrafficFormulas, MatchTheAlgorithms) {
  EXPECT_EQ(AllGatherTraffic(10, 1).bytes_sent, 0u);
  EXPECT_EQ(AllGatherTraffic(10, 4).bytes_sent, 30u);
  EXPECT_EQ(AllGatherTraffic(10, 4).bytes_received, 30u);
  EXPECT_EQ(AllReduceTraffic(10, 1).bytes_sent, 0u);
  EXPECT_EQ(AllReduceTraffic(12, 4).bytes_sent, 2u * 3 * 3 * 4);  // chunks of 3 floats
  EXPECT_EQ(AllReduceTraffic(10, 4).bytes_sent, 2u * 3 * 3 * 4);  // rounded up to 3
  EXPECT_EQ(AllReduceTraffic(10, 4).bytes_received, 2u * 3 * 3 * 4);
  EXPECT_EQ(AllReduceTraffic(0, 4).bytes_sent, 0u);
  // Broadcast over 8 from root 2: v = 0 sends to 1, 2, 4; v = 1 to 3, 5; v = 2 to 6; v = 3 to 7.
  const int sends[8] = {3, 2, 1, 1, 0, 0, 0, 0};
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  for (int rank = 0; rank < 8; ++rank) {
    const int v = (rank - 2 + 8) % 8;
    const TrafficCounters t = BroadcastTraffic(5, 8, rank, 2);
    EXPECT_EQ(t.bytes_sent, 5u * sends[v]) << rank;
    EXPECT_EQ(t.bytes_received, v == 0 ? 0u : 5u) << rank;
    sent += t.bytes_sent;
    received += t.bytes_received;
  }
  EXPECT_EQ(sent, 7u * 5);
  EXPECT_EQ(received, 7u * 5);
  EXPECT_EQ(BroadcastTraffic(5, 1, 0, 0).bytes_sent, 0u);
  EXPECT_EQ(AllToAllTraffic(10, 1).bytes_sent, 0u);
  EXPECT_EQ(AllToAllTraffic(10, 4).bytes_sent, 30u);
  EXPECT_EQ(AllToAllTraffic(10, 4).bytes_received, 30u);
}

// ---------------------------------------------------------------------------------------------
// LocalGroup.

std::vector<std::unique_ptr<Communicator>> LocalMembers(LocalGroup& group) {
  std::vector<std::unique_ptr<Communicator>> members;
  for (int r = 0; r < group.size(); ++r) members.push_back(group.Member(r));
  return members;
}

class LocalCollectives : public ::testing::TestWithParam<int> {};

TEST_P(LocalCollectives, GatherSumBroadcastAndTraffic) {
  LocalGroup group(GetParam(), /*timeout_s=*/30.0);
  std::vector<std::unique_ptr<Communicator>> members = LocalMembers(group);
  for (int r = 0; r < group.size(); ++r) {
    EXPECT_EQ(members[r]->rank(), r);
    EXPECT_EQ(members[r]->size(), GetParam());
  }
  const std::vector<Seen> seen =
      OnEveryMember<Seen>(members, [](Communicator& c) { return RunCollectives(c); });
  CheckCollectives(seen, /*rank_order=*/true);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LocalCollectives, ::testing::Values(1, 3, 4));

TEST(LocalGroup, OneMemberIsTheIdentityWithNoTraffic) {
  LocalGroup group(1, 1.0);
  std::unique_ptr<Communicator> c = group.Member(0);
  const Bytes mine = Payload(0, 7);
  Result<std::vector<Bytes>> gathered = c->AllGather(mine);
  ASSERT_TRUE(gathered.ok());
  ASSERT_EQ(gathered->size(), 1u);
  EXPECT_EQ((*gathered)[0], mine);
  std::vector<float> v = Values(0, 5);
  const Bytes before = BytesOf(v);
  ASSERT_TRUE(c->AllReduceSum(v).ok());
  EXPECT_EQ(BytesOf(v), before);
  Bytes b = Payload(3, 4);
  ASSERT_TRUE(c->Broadcast(b, 0).ok());
  EXPECT_EQ(b, Payload(3, 4));
  EXPECT_EQ(c->traffic().bytes_sent, 0u);
  EXPECT_EQ(c->traffic().bytes_received, 0u);
}

TEST(LocalGroup, ManyRoundsInOrder) {
  LocalGroup group(3, 30.0);
  std::vector<std::unique_ptr<Communicator>> members = LocalMembers(group);
  constexpr int kRounds = 200;
  const std::vector<std::string> errors = OnEveryMember<std::string>(members, [](Communicator& c) {
    for (int i = 0; i < kRounds; ++i) {
      std::vector<float> v = {static_cast<float>(i), static_cast<float>(c.rank())};
      if (Status s = c.AllReduceSum(v); !s.ok()) return s.error().message();
      if (v[0] != 3.0f * static_cast<float>(i) || v[1] != 3.0f) return std::string("bad sum");
    }
    return std::string();
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(LocalGroup, KilledMemberMakesPendingAndLaterCallsFail) {
  LocalGroup group(3, /*timeout_s=*/60.0);  // far longer than the test: no timeout involved
  std::vector<std::unique_ptr<Communicator>> members = LocalMembers(group);
  // Ranks 0 and 1 call; rank 2 never does and is killed. Whether the kill comes before or after
  // they wait, their call fails naming rank 2.
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> v(4, 1.0f);
      Status s = members[r]->AllReduceSum(v);
      errors[r] = s.ok() ? "" : s.error().message();
    });
  }
  group.Kill(2);
  for (std::thread& t : threads) t.join();
  EXPECT_LT(SecondsSince(start), 10.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank 2 is gone (killed)"), std::string::npos) << errors[r];
  }
  // Later calls fail at once too, and the killed member's own.
  Result<std::vector<Bytes>> later = members[0]->AllGather(Payload(0, 3));
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.error().message().find("rank 2 is gone"), std::string::npos);
  std::vector<float> v(4, 1.0f);
  Status own = members[2]->AllReduceSum(v);
  ASSERT_FALSE(own.ok());
  EXPECT_NE(own.error().message().find("this member is gone (killed)"), std::string::npos);
  // Failed calls count no traffic.
  EXPECT_EQ(members[0]->traffic().bytes_sent, 0u);
}

TEST(LocalGroup, StalledMemberTimesOutAndTheTimedOutOneIsGone) {
  LocalGroup group(3, /*timeout_s=*/0.3);
  std::vector<std::unique_ptr<Communicator>> members = LocalMembers(group);
  // Rank 2 never calls: rank 0 (alone first) times out; then rank 1 fails at once, naming rank
  // 0 as gone, or times out itself if it was already waiting.
  const Clock::time_point start = Clock::now();
  Bytes b(8, 0);
  Status s0 = members[0]->Broadcast(b, 0);
  ASSERT_FALSE(s0.ok());
  EXPECT_NE(s0.error().message().find("timed out after 0.3 s waiting for rank(s) 1, 2"),
            std::string::npos)
      << s0.error().message();
  EXPECT_GE(SecondsSince(start), 0.3);
  Status s1 = members[1]->Broadcast(b, 0);
  ASSERT_FALSE(s1.ok());
  EXPECT_NE(s1.error().message().find("rank 0 is gone (timed out)"), std::string::npos)
      << s1.error().message();
}

TEST(LocalGroup, MismatchedCallsFail) {
  LocalGroup group(2, 30.0);
  std::vector<std::unique_ptr<Communicator>> members = LocalMembers(group);
  const std::vector<std::string> errors = OnEveryMember<std::string>(members, [](Communicator& c) {
    std::vector<float> v(c.rank() == 0 ? 3 : 4, 1.0f);
    Status s = c.AllReduceSum(v);
    return s.ok() ? std::string() : s.error().message();
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("mismatched calls"), std::string::npos) << e;
  }
}

TEST(LocalGroup, BroadcastRootOutOfRangeIsAUsageError) {
  LocalGroup group(2, 30.0);
  std::unique_ptr<Communicator> c = group.Member(0);
  Bytes b(4, 0);
  Status s = c->Broadcast(b, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind(), ErrorKind::kUsage);
}

// ---------------------------------------------------------------------------------------------
// Gloo, members on threads of this process, over a MemoryStore (thread-safe).
#if HEADROOM_WITH_GLOO

std::string TestPrefix() {
  return std::string("/headroom-diloco/test/gloo/") +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
}

// Connects `size` members from their own threads; the errors by rank (empty: connected).
std::vector<std::string> ConnectAll(coord::Store& store, const std::string& prefix, int size,
                                    double timeout_s,
                                    std::vector<std::unique_ptr<Communicator>>* members) {
  members->clear();
  members->resize(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.prefix = prefix;
      o.rank = r;
      o.size = size;
      o.timeout_s = timeout_s;
      Result<std::unique_ptr<Communicator>> c = ConnectGloo(store, o);
      if (c.ok()) {
        (*members)[r] = std::move(*c);
      } else {
        errors[r] = c.error().message();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, GatherSumBroadcastAndTrafficOverMemoryStore) {
  coord::MemoryStore store([] { return 0.0; });
  std::vector<std::unique_ptr<Communicator>> members;
  const std::string prefix = TestPrefix() + std::to_string(GetParam()) + "/";
  for (const std::string& e : ConnectAll(store, prefix, GetParam(), 20.0, &members)) {
    ASSERT_EQ(e, "");
  }
  for (int r = 0; r < GetParam(); ++r) {
    EXPECT_EQ(members[r]->rank(), r);
    EXPECT_EQ(members[r]->size(), GetParam());
  }
  // The addresses are in the store, under the prefix.
  Result<coord::RangeResult> keys = store.Get(prefix, /*prefix=*/true);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->kvs.size(), 2u * GetParam());  // rank_<r> and <r> for each member
  const std::vector<Seen> seen =
      OnEveryMember<Seen>(members, [](Communicator& c) { return RunCollectives(c); });
  CheckCollectives(seen, /*rank_order=*/false);
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooCollectives, ::testing::Values(1, 3, 4));

TEST(Gloo, AllReduceOfIntegersIsExactAndLargeBuffersAgreeBitForBit) {
  coord::MemoryStore store([] { return 0.0; });
  std::vector<std::unique_ptr<Communicator>> members;
  for (const std::string& e : ConnectAll(store, TestPrefix(), 3, 20.0, &members)) {
    ASSERT_EQ(e, "");
  }
  // 3 M floats (12 MB): several of Gloo's 1 MiB segments per chunk.
  constexpr size_t kLarge = 3 * 1000 * 1000 + 7;
  const std::vector<Bytes> sums = OnEveryMember<Bytes>(members, [](Communicator& c) {
    std::vector<float> exact(1000);
    for (size_t i = 0; i < exact.size(); ++i) {
      exact[i] = static_cast<float>((c.rank() + 1) * 1000 + static_cast<int>(i));
    }
    if (!c.AllReduceSum(exact).ok()) return Bytes();
    for (size_t i = 0; i < exact.size(); ++i) {
      if (exact[i] != static_cast<float>(6000 + 3 * static_cast<int>(i))) return Bytes();
    }
    std::vector<float> large = Values(c.rank(), kLarge);
    if (!c.AllReduceSum(large).ok()) return Bytes();
    return BytesOf(large);
  });
  ASSERT_EQ(sums[0].size(), kLarge * sizeof(float));
  EXPECT_TRUE(sums[1] == sums[0]);
  EXPECT_TRUE(sums[2] == sums[0]);
  const std::vector<float> expected = SumInRankOrder(3, kLarge);
  std::vector<float> got(kLarge);
  std::memcpy(got.data(), sums[0].data(), sums[0].size());
  size_t far = 0;
  for (size_t i = 0; i < kLarge; ++i) {
    if (std::fabs(got[i] - expected[i]) > 1e-6 * std::ldexp(1.0, 21)) ++far;
  }
  EXPECT_EQ(far, 0u);
}

TEST(Gloo, EmptyBuffersAndManyCallsInOrder) {
  coord::MemoryStore store([] { return 0.0; });
  std::vector<std::unique_ptr<Communicator>> members;
  for (const std::string& e : ConnectAll(store, TestPrefix(), 2, 20.0, &members)) {
    ASSERT_EQ(e, "");
  }
  const std::vector<std::string> errors = OnEveryMember<std::string>(members, [](Communicator& c) {
    std::vector<float> none;
    if (Status s = c.AllReduceSum(none); !s.ok()) return s.error().message();
    Result<std::vector<Bytes>> g = c.AllGather(Bytes());
    if (!g.ok()) return g.error().message();
    if (g->size() != 2 || !(*g)[0].empty()) return std::string("bad empty gather");
    for (int i = 0; i < 100; ++i) {
      Bytes b = c.rank() == i % 2 ? Payload(i, 3) : Bytes(3, 0);
      if (Status s = c.Broadcast(b, i % 2); !s.ok()) return s.error().message();
      if (b != Payload(i, 3)) return std::string("bad broadcast");
    }
    return std::string();
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(Gloo, BadOptionsAreUsageErrors) {
  coord::MemoryStore store([] { return 0.0; });
  GlooOptions o;
  o.prefix = TestPrefix();
  o.size = 2;
  o.rank = 2;
  Result<std::unique_ptr<Communicator>> c = ConnectGloo(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind(), ErrorKind::kUsage);
  o.rank = 0;
  o.timeout_s = 0.0;
  c = ConnectGloo(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind(), ErrorKind::kUsage);
  o.timeout_s = 1.0;
  o.host = "no-such-host.invalid";
  c = ConnectGloo(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind(), ErrorKind::kUsage) << c.error().message();
  o.host = "127.0.0.1";
  o.prefix = "";
  c = ConnectGloo(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind(), ErrorKind::kUsage);
}

TEST(Gloo, MemberThatNeverJoinsFailsConnectWithinTheTimeout) {
  coord::MemoryStore store([] { return 0.0; });
  constexpr double kTimeoutS = 2.0;
  for (int present : {0, 1}) {
    SCOPED_TRACE("present: rank " + std::to_string(present));
    GlooOptions o;
    o.prefix = TestPrefix() + std::to_string(present) + "/";
    o.rank = present;
    o.size = 2;
    o.timeout_s = kTimeoutS;
    const Clock::time_point start = Clock::now();
    Result<std::unique_ptr<Communicator>> c = ConnectGloo(store, o);
    const double took = SecondsSince(start);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().kind(), ErrorKind::kIo);
    EXPECT_NE(c.error().message().find("timed out after 2 s"), std::string::npos)
        << c.error().message();
    EXPECT_GE(took, kTimeoutS - 0.01);
    EXPECT_LT(took, kTimeoutS + 3.0);
  }
}

TEST(Gloo, PeerThatClosedItsConnectionsMakesTheCallFailAtOnce) {
  coord::MemoryStore store([] { return 0.0; });
  std::vector<std::unique_ptr<Communicator>> members;
  constexpr double kTimeoutS = 20.0;
  for (const std::string& e : ConnectAll(store, TestPrefix(), 2, kTimeoutS, &members)) {
    ASSERT_EQ(e, "");
  }
  members[1].reset();  // closes its sockets, as a process that dies
  const Clock::time_point start = Clock::now();
  std::vector<float> v(1000, 1.0f);
  Status s = members[0]->AllReduceSum(v);
  ASSERT_FALSE(s.ok());
  EXPECT_LT(SecondsSince(start), kTimeoutS / 2);
  EXPECT_NE(s.error().message().find("gloo allreduce (rank 0 of 2)"), std::string::npos)
      << s.error().message();
  // The group is broken from then on.
  Result<std::vector<Bytes>> later = members[0]->AllGather(Payload(0, 3));
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.error().message().find("failed earlier"), std::string::npos)
      << later.error().message();
  EXPECT_EQ(members[0]->traffic().bytes_sent, 0u);
}

TEST(Gloo, StalledPeerMakesTheCallTimeOut) {
  coord::MemoryStore store([] { return 0.0; });
  std::vector<std::unique_ptr<Communicator>> members;
  constexpr double kTimeoutS = 1.0;
  for (const std::string& e : ConnectAll(store, TestPrefix(), 2, kTimeoutS, &members)) {
    ASSERT_EQ(e, "");
  }
  // Rank 1 stays connected and never calls.
  const Clock::time_point start = Clock::now();
  std::vector<float> v(1000, 1.0f);
  Status s = members[0]->AllReduceSum(v);
  const double took = SecondsSince(start);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("Timed out"), std::string::npos) << s.error().message();
  EXPECT_GE(took, kTimeoutS - 0.01);
  EXPECT_LT(took, kTimeoutS + 3.0);
  // The member that timed out closed its connections: the stalled one fails at once when it
  // finally calls.
  std::vector<float> w(1000, 1.0f);
  const Clock::time_point late = Clock::now();
  Status s1 = members[1]->AllReduceSum(w);
  ASSERT_FALSE(s1.ok());
  EXPECT_LT(SecondsSince(late), kTimeoutS / 2) << s1.error().message();
}

// ---------------------------------------------------------------------------------------------
// Gloo over a real etcd (skipped without /usr/bin/etcd).

class GlooEtcd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (etcd_test::EtcdCluster::Available()) {
      cluster_ = etcd_test::EtcdCluster::Start(1, &why_);
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    if (!etcd_test::EtcdCluster::Available()) {
      GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
    }
    ASSERT_TRUE(cluster_) << why_;
  }

  static std::unique_ptr<etcd::EtcdStore> Open() {
    Result<std::unique_ptr<etcd::EtcdStore>> store = etcd::EtcdStore::Open(cluster_->endpoints());
    EXPECT_TRUE(store.ok()) << store.error().message();
    return store.ok() ? std::move(*store) : nullptr;
  }

  static inline std::optional<etcd_test::EtcdCluster> cluster_;
  static inline std::string why_;
};

TEST_F(GlooEtcd, TwoMembersAllReduceThroughEtcd) {
  std::vector<std::unique_ptr<etcd::EtcdStore>> stores;
  for (int r = 0; r < 2; ++r) {
    stores.push_back(Open());
    ASSERT_TRUE(stores.back());
  }
  const std::string prefix = TestPrefix();
  std::vector<Bytes> sums(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.prefix = prefix;
      o.rank = r;
      o.size = 2;
      o.timeout_s = 20.0;
      Result<std::unique_ptr<Communicator>> c = ConnectGloo(*stores[r], o);
      if (!c.ok()) {
        errors[r] = c.error().message();
        return;
      }
      std::vector<float> v = Values(r, 777);
      if (Status s = (*c)->AllReduceSum(v); !s.ok()) {
        errors[r] = s.error().message();
        return;
      }
      sums[r] = BytesOf(v);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  // Two terms: a + b == b + a exactly, so the ring's order gives the rank-order bits.
  EXPECT_EQ(sums[0], BytesOf(SumInRankOrder(2, 777)));
  EXPECT_EQ(sums[1], sums[0]);
  // The addresses went through etcd, binary and all.
  Result<coord::RangeResult> keys = stores[0]->Get(prefix, /*prefix=*/true);
  ASSERT_TRUE(keys.ok()) << keys.error().message();
  EXPECT_EQ(keys->kvs.size(), 4u);
}

// A child process joins, then exits (its sockets closed by the kernel) while the parent is in
// its all-reduce or about to be: the parent's call fails well within the timeout.
TEST_F(GlooEtcd, PeerProcessThatExitsMakesTheAllReduceFail) {
  const std::string prefix = TestPrefix();
  const std::string go_key = prefix + "parent-connected";
  const std::string endpoints = cluster_->endpoints();
  constexpr double kTimeoutS = 20.0;
  // Forked from this (single) thread, before this process starts any Gloo thread for the test.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    Result<std::unique_ptr<etcd::EtcdStore>> store = etcd::EtcdStore::Open(endpoints);
    if (!store.ok()) _exit(2);
    GlooOptions o;
    o.prefix = prefix;
    o.rank = 1;
    o.size = 2;
    o.timeout_s = kTimeoutS;
    Result<std::unique_ptr<Communicator>> c = ConnectGloo(**store, o);
    if (!c.ok()) _exit(3);
    // Wait until the parent is connected too, then die without a word.
    const Clock::time_point start = Clock::now();
    while (SecondsSince(start) < kTimeoutS) {
      Result<coord::RangeResult> got = (*store)->Get(go_key);
      if (got.ok() && !got->kvs.empty()) _exit(0);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    _exit(4);
  }
  std::unique_ptr<etcd::EtcdStore> store = Open();
  ASSERT_TRUE(store);
  GlooOptions o;
  o.prefix = prefix;
  o.rank = 0;
  o.size = 2;
  o.timeout_s = kTimeoutS;
  Result<std::unique_ptr<Communicator>> c = ConnectGloo(*store, o);
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_TRUE(store->Put(go_key, "1").ok());
  const Clock::time_point start = Clock::now();
  std::vector<float> v(100000, 1.0f);
  Status s = (*c)->AllReduceSum(v);
  const double took = SecondsSince(start);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_LT(took, kTimeoutS / 2) << s.error().message();
  EXPECT_NE(s.error().message().find("gloo allreduce (rank 0 of 2)"), std::string::npos)
      << s.error().message();
}

#endif  // HEADROOM_WITH_GLOO

}  // namespace
}  // namespace headroom::diloco
