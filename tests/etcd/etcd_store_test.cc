// EtcdStore against real etcd processes (tests/support/etcd_cluster.h): one single-member cluster
// shared by the suite, each test under its own key prefix; a three-member cluster for failover.
// Skipped without /usr/bin/etcd.
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>
#include <fstream>

#include "common/free_port.h"
#include "support/etcd_cluster.h"
#include "support/etcd_suite.h"
#include "support/silent_listener.h"
#include "support/trickling_server.h"

namespace headroom::etcd {
namespace {

using etcd_test::EtcdCluster;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class EtcdStoreTest : public etcd_test::OneEtcdPerSuite {
 protected:
  void SetUp() override {
    OneEtcdPerSuite::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    Result<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(cluster_->endpoints());
    ASSERT_TRUE(store.ok()) << store.error().message();
    store_ = std::move(*store);
    prefix_ = std::string("/test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  int64_t Revision() {
    Result<coord::RangeResult> r = store_->Get(prefix_ + "none");
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? r->revision : 0;
  }

  std::unique_ptr<EtcdStore> store_;
  std::string prefix_;
};

TEST_F(EtcdStoreTest, PutGetDeleteAndRevisions) {
  const std::string a = prefix_ + "a";
  Result<int64_t> r1 = store_->Put(a, "one");
  ASSERT_TRUE(r1.ok()) << r1.error().message();
  Result<coord::RangeResult> got = store_->Get(a);
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, a);
  EXPECT_EQ(got->kvs[0].value, "one");
  EXPECT_EQ(got->kvs[0].create_revision, *r1);
  EXPECT_EQ(got->kvs[0].mod_revision, *r1);
  EXPECT_EQ(got->kvs[0].version, 1);
  EXPECT_EQ(got->kvs[0].lease, 0);
  EXPECT_EQ(got->revision, *r1);

  Result<int64_t> r2 = store_->Put(a, "two");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, *r1 + 1);
  got = store_->Get(a);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].create_revision, *r1);
  EXPECT_EQ(got->kvs[0].mod_revision, *r2);
  EXPECT_EQ(got->kvs[0].version, 2);

  // Bytes, not text; and an empty value, which the gateway leaves out.
  std::string binary;
  for (int b = 0; b < 256; ++b) binary += static_cast<char>(b);
  ASSERT_TRUE(store_->Put(prefix_ + "binary\xff", binary).ok());
  ASSERT_TRUE(store_->Put(prefix_ + "empty", "").ok());
  got = store_->Get(prefix_ + "binary\xff");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, binary);
  got = store_->Get(prefix_ + "empty");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "");

  got = store_->Get(prefix_ + "missing");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());
  EXPECT_GE(got->revision, *r2);

  Result<int64_t> r3 = store_->Delete(a);
  ASSERT_TRUE(r3.ok()) << r3.error().message();
  EXPECT_GT(*r3, *r2);
  got = store_->Get(a);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());
  // Nothing to delete: no write, the current revision.
  Result<int64_t> r4 = store_->Delete(a);
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(*r4, *r3);
}

TEST_F(EtcdStoreTest, Prefixes) {
  for (const char* k : {"p/a", "p/b", "p/c/d", "q",
                        "p\xff"
                        "a",
                        "p\xff\xff", "p\xff"}) {
    ASSERT_TRUE(store_->Put(prefix_ + k, k).ok());
  }
  Result<coord::RangeResult> got = store_->Get(prefix_ + "p/", /*prefix=*/true);
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 3u);
  EXPECT_EQ(got->kvs[0].key, prefix_ + "p/a");
  EXPECT_EQ(got->kvs[1].key, prefix_ + "p/b");
  EXPECT_EQ(got->kvs[2].key, prefix_ + "p/c/d");

  // A prefix ending in 0xff: the range ends at the byte before it incremented.
  got = store_->Get(prefix_ + "p\xff", /*prefix=*/true);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 3u);
  EXPECT_EQ(got->kvs[0].key, prefix_ + "p\xff");
  EXPECT_EQ(got->kvs[1].key, prefix_ +
                                 "p\xff"
                                 "a");
  EXPECT_EQ(got->kvs[2].key, prefix_ + "p\xff\xff");

  Result<int64_t> deleted = store_->Delete(prefix_ + "p/", /*prefix=*/true);
  ASSERT_TRUE(deleted.ok());
  got = store_->Get(prefix_, /*prefix=*/true);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs.size(), 4u);  // q and the three under p\xff

  // The empty prefix is every key.
  got = store_->Get("", /*prefix=*/true);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_GE(got->kvs.size(), 4u);
}

TEST_F(EtcdStoreTest, TxnCreateIfAbsent) {
  const std::string k = prefix_ + "k";
  const auto create = [&](const std::string& value) {
    coord::TxnRequest t;
    t.compare = {coord::Compare::CreateRevision(k, coord::Compare::Result::kEqual, 0)};
    t.success = {coord::Op::Put(k, value)};
    t.failure = {coord::Op::Get(k)};
    return store_->Txn(t);
  };
  Result<coord::TxnResult> first = create("first");
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_TRUE(first->succeeded);
  ASSERT_EQ(first->responses.size(), 1u);
  EXPECT_TRUE(first->responses[0].empty());

  Result<coord::TxnResult> second = create("second");
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_FALSE(second->succeeded);
  EXPECT_EQ(second->revision, first->revision);  // nothing written
  ASSERT_EQ(second->responses.size(), 1u);
  ASSERT_EQ(second->responses[0].size(), 1u);
  EXPECT_EQ(second->responses[0][0].value, "first");
  EXPECT_EQ(second->responses[0][0].create_revision, first->revision);
}

TEST_F(EtcdStoreTest, TxnCompares) {
  const std::string k = prefix_ + "k";
  Result<int64_t> r = store_->Put(k, "v1");
  ASSERT_TRUE(r.ok());
  const auto txn = [&](coord::Compare c) {
    coord::TxnRequest t;
    t.compare = {std::move(c)};
    Result<coord::TxnResult> out = store_->Txn(t);
    EXPECT_TRUE(out.ok()) << out.error().message();
    return out.ok() && out->succeeded;
  };
  using R = coord::Compare::Result;
  EXPECT_TRUE(txn(coord::Compare::ModRevision(k, R::kEqual, *r)));
  EXPECT_FALSE(txn(coord::Compare::ModRevision(k, R::kEqual, *r - 1)));
  EXPECT_TRUE(txn(coord::Compare::ModRevision(k, R::kGreater, *r - 1)));
  EXPECT_TRUE(txn(coord::Compare::ModRevision(k, R::kLess, *r + 1)));
  EXPECT_TRUE(txn(coord::Compare::ModRevision(k, R::kNotEqual, 0)));
  EXPECT_TRUE(txn(coord::Compare::Value(k, R::kEqual, "v1")));
  EXPECT_FALSE(txn(coord::Compare::Value(k, R::kEqual, "v2")));
  EXPECT_TRUE(txn(coord::Compare::Value(k, R::kNotEqual, "v2")));
  EXPECT_TRUE(txn(coord::Compare{k, coord::Compare::Target::kVersion, R::kEqual, 1, {}}));
  EXPECT_FALSE(txn(coord::Compare{k, coord::Compare::Target::kVersion, R::kEqual, 0, {}}));
  EXPECT_TRUE(txn(coord::Compare{k, coord::Compare::Target::kLease, R::kEqual, 0, {}}));
  // A missing key: revisions and version 0; and etcd fails every value comparison, even
  // NOT_EQUAL (its applyCompare: "always fail if comparing a value on a key that doesn't exist").
  const std::string missing = prefix_ + "missing";
  EXPECT_TRUE(txn(coord::Compare::CreateRevision(missing, R::kEqual, 0)));
  EXPECT_TRUE(txn(coord::Compare{missing, coord::Compare::Target::kVersion, R::kEqual, 0, {}}));
  EXPECT_FALSE(txn(coord::Compare::Value(missing, R::kEqual, "")));
  EXPECT_FALSE(txn(coord::Compare::Value(missing, R::kNotEqual, "x")));

  // The modification-revision CAS, as the coordinator writes.
  coord::TxnRequest cas;
  cas.compare = {coord::Compare::ModRevision(k, R::kEqual, *r)};
  cas.success = {coord::Op::Put(k, "v2")};
  Result<coord::TxnResult> won = store_->Txn(cas);
  ASSERT_TRUE(won.ok());
  EXPECT_TRUE(won->succeeded);
  EXPECT_EQ(won->revision, *r + 1);
  Result<coord::TxnResult> lost = store_->Txn(cas);
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost->succeeded);
  EXPECT_TRUE(lost->responses.empty());
}

TEST_F(EtcdStoreTest, TxnEachAnswersEveryTransactionInItsPlace) {
  // Ten transactions, more than the store's lanes: each puts its own key, the odd ones only if
  // a key that does not exist has a value (they fail). Each answer is the one to its request.
  const std::string gate = prefix_ + "gate";
  std::vector<coord::TxnRequest> txns(10);
  for (size_t i = 0; i < txns.size(); ++i) {
    if (i % 2 == 1)
      txns[i].compare = {coord::Compare::Value(gate, coord::Compare::Result::kEqual, "open")};
    txns[i].success = {
        coord::Op::Put(prefix_ + "each/" + std::to_string(i), std::to_string(i * i))};
    txns[i].failure = {coord::Op::Get(prefix_ + "each/" + std::to_string(i))};
  }
  for (int round = 0; round < 2; ++round) {  // the second on the lanes the first opened
    const std::vector<Result<coord::TxnResult>> out = store_->TxnEach(txns);
    ASSERT_EQ(out.size(), txns.size());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(out[i].ok()) << out[i].error().message();
      EXPECT_EQ(out[i]->succeeded, i % 2 == 0) << i;
      ASSERT_EQ(out[i]->responses.size(), 1U) << i;
    }
  }
  Result<coord::RangeResult> all = store_->Get(prefix_ + "each/", true);
  ASSERT_TRUE(all.ok());
  std::map<std::string, std::string> got;
  for (const coord::KeyValue& kv : all->kvs) got[kv.key.substr(prefix_.size())] = kv.value;
  EXPECT_EQ(
      got,
      (std::map<std::string, std::string>{
          {"each/0", "0"}, {"each/2", "4"}, {"each/4", "16"}, {"each/6", "36"}, {"each/8", "64"}}));
  EXPECT_TRUE(store_->TxnEach({}).empty());
}

TEST_F(EtcdStoreTest, TxnOperations) {
  ASSERT_TRUE(store_->Put(prefix_ + "dir/a", "a").ok());
  ASSERT_TRUE(store_->Put(prefix_ + "dir/b", "b").ok());
  ASSERT_TRUE(store_->Put(prefix_ + "old", "old").ok());
  coord::TxnRequest t;
  t.success = {coord::Op::Get(prefix_ + "dir/", true), coord::Op::Put(prefix_ + "new", "new"),
               coord::Op::Delete(prefix_ + "old"), coord::Op::Get(prefix_ + "new")};
  Result<coord::TxnResult> out = store_->Txn(t);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_TRUE(out->succeeded);
  ASSERT_EQ(out->responses.size(), 4u);
  ASSERT_EQ(out->responses[0].size(), 2u);
  EXPECT_EQ(out->responses[0][0].value, "a");
  EXPECT_EQ(out->responses[0][1].value, "b");
  EXPECT_TRUE(out->responses[1].empty());
  EXPECT_TRUE(out->responses[2].empty());
  ASSERT_EQ(out->responses[3].size(), 1u);  // a get sees the transaction's own put
  EXPECT_EQ(out->responses[3][0].mod_revision, out->revision);
  Result<coord::RangeResult> old = store_->Get(prefix_ + "old");
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->kvs.empty());

  // etcd refuses two writes to one key in a transaction.
  coord::TxnRequest twice;
  twice.success = {coord::Op::Put(prefix_ + "x", "1"), coord::Op::Put(prefix_ + "x", "2")};
  Result<coord::TxnResult> refused = store_->Txn(twice);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("duplicate key"), std::string::npos)
      << refused.error().message();
  EXPECT_FALSE(coord::IsOutcomeUnknown(refused.error()));
}

TEST_F(EtcdStoreTest, Leases) {
  Result<coord::LeaseId> lease = store_->LeaseGrant(10);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  EXPECT_NE(*lease, 0);
  const std::string k = prefix_ + "held";
  ASSERT_TRUE(store_->Put(k, "v", *lease).ok());
  Result<coord::RangeResult> got = store_->Get(k);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].lease, *lease);

  coord::TxnRequest t;
  t.compare = {coord::Compare{
      k, coord::Compare::Target::kLease, coord::Compare::Result::kEqual, *lease, {}}};
  t.success = {coord::Op::Put(prefix_ + "also", "v", *lease)};
  Result<coord::TxnResult> out = store_->Txn(t);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_TRUE(out->succeeded);

  Result<int64_t> ttl_s = store_->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
  EXPECT_EQ(*ttl_s, 10);

  ASSERT_TRUE(store_->LeaseRevoke(*lease).ok());
  got = store_->Get(prefix_, /*prefix=*/true);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());

  ttl_s = store_->LeaseKeepAlive(*lease);
  ASSERT_FALSE(ttl_s.ok());
  EXPECT_TRUE(coord::IsLeaseGone(ttl_s.error())) << ttl_s.error().message();
  Status again = store_->LeaseRevoke(*lease);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(coord::IsLeaseGone(again.error())) << again.error().message();
  Result<int64_t> put = store_->Put(k, "v", *lease);
  ASSERT_FALSE(put.ok());
  EXPECT_TRUE(coord::IsLeaseGone(put.error())) << put.error().message();
  EXPECT_FALSE(coord::IsOutcomeUnknown(put.error()));
}

TEST_F(EtcdStoreTest, LeaseExpires) {
  constexpr int64_t kTtlS = 2;  // etcd's least is 1.5 s, rounded up
  constexpr double kDeadlineS = 10.0;
  Result<coord::LeaseId> lease = store_->LeaseGrant(kTtlS);
  ASSERT_TRUE(lease.ok());
  const Clock::time_point start = Clock::now();
  const std::string k = prefix_ + "ephemeral";
  ASSERT_TRUE(store_->Put(k, "v", *lease).ok());
  while (true) {
    Result<coord::RangeResult> got = store_->Get(k);
    ASSERT_TRUE(got.ok());
    if (got->kvs.empty()) break;
    ASSERT_LT(SecondsSince(start), kDeadlineS) << "the key outlived its lease";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(SecondsSince(start), 1.0);
  Result<int64_t> ttl_s = store_->LeaseKeepAlive(*lease);
  ASSERT_FALSE(ttl_s.ok());
  EXPECT_TRUE(coord::IsLeaseGone(ttl_s.error())) << ttl_s.error().message();
}

TEST_F(EtcdStoreTest, WatchHistory) {
  const std::string k = prefix_ + "w";
  Result<int64_t> r0 = store_->Put(k, "v1");
  Result<int64_t> r1 = store_->Put(k, "v2");
  Result<int64_t> other = store_->Put(prefix_ + "other", "o");
  Result<int64_t> r2 = store_->Delete(k);
  ASSERT_TRUE(r0.ok() && r1.ok() && other.ok() && r2.ok());

  Result<coord::WatchResult> w = store_->Watch(k, false, *r0, 5.0);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_FALSE(w->compacted);
  EXPECT_EQ(w->revision, *r2);
  ASSERT_EQ(w->events.size(), 2u);
  EXPECT_EQ(w->events[0].type, coord::WatchEvent::Type::kPut);
  EXPECT_EQ(w->events[0].kv.key, k);
  EXPECT_EQ(w->events[0].kv.value, "v2");
  EXPECT_EQ(w->events[0].kv.mod_revision, *r1);
  EXPECT_EQ(w->events[0].kv.create_revision, *r0);
  EXPECT_EQ(w->events[0].kv.version, 2);
  EXPECT_EQ(w->events[1].type, coord::WatchEvent::Type::kDelete);
  EXPECT_EQ(w->events[1].kv.key, k);
  EXPECT_EQ(w->events[1].kv.mod_revision, *r2);

  w = store_->Watch(prefix_, /*prefix=*/true, *r0, 5.0);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->events.size(), 3u);
  EXPECT_EQ(w->events[1].kv.key, prefix_ + "other");
}

// etcd sends a history of more than 1000 revisions in parts; resuming from each answer's
// revision reads every event once.
TEST_F(EtcdStoreTest, WatchResumesThroughALongHistory) {
  constexpr int kPuts = 1100;
  const std::string k = prefix_ + "long";
  const int64_t start = Revision();
  for (int i = 0; i < kPuts; ++i) ASSERT_TRUE(store_->Put(k, std::to_string(i)).ok());
  int64_t after = start;
  int seen = 0;
  int answers = 0;
  while (seen < kPuts) {
    Result<coord::WatchResult> w = store_->Watch(k, false, after, 5.0);
    ASSERT_TRUE(w.ok()) << w.error().message();
    ASSERT_FALSE(w->events.empty());
    ++answers;
    for (const coord::WatchEvent& e : w->events) {
      ASSERT_EQ(e.kv.value, std::to_string(seen));
      ASSERT_GT(e.kv.mod_revision, after);
      ++seen;
    }
    after = w->revision;
  }
  EXPECT_EQ(seen, kPuts);
  std::printf("a history of %d revisions came in %d answers\n", kPuts, answers);
}

TEST_F(EtcdStoreTest, WatchWaitsForAPutFromAnotherThread) {
  const std::string k = prefix_ + "w";
  const int64_t after = Revision();
  // The put may land before the watch starts or while it waits: either way it is the event.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Result<int64_t> put = store_->Put(k, "late");
    EXPECT_TRUE(put.ok()) << put.error().message();
  });
  const Clock::time_point start = Clock::now();
  Result<coord::WatchResult> w = store_->Watch(k, false, after, 10.0);
  const double waited_s = SecondsSince(start);
  writer.join();
  ASSERT_TRUE(w.ok()) << w.error().message();
  ASSERT_EQ(w->events.size(), 1u);
  EXPECT_EQ(w->events[0].kv.value, "late");
  EXPECT_EQ(w->events[0].kv.mod_revision, w->revision);
  EXPECT_LT(waited_s, 10.0);  // the put did not wait for the watch to give up
}

TEST_F(EtcdStoreTest, WatchTimesOutQuietly) {
  const int64_t now = Revision();
  const Clock::time_point start = Clock::now();
  Result<coord::WatchResult> w = store_->Watch(prefix_ + "quiet", true, now, 0.5);
  const double waited_s = SecondsSince(start);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_TRUE(w->events.empty());
  EXPECT_FALSE(w->compacted);
  EXPECT_GE(w->revision, now);
  EXPECT_GE(waited_s, 0.4);
  EXPECT_LT(waited_s, 5.0);
}

TEST_F(EtcdStoreTest, WatchReportsCompaction) {
  Result<int64_t> r0 = store_->Put(prefix_ + "c", "1");
  Result<int64_t> r1 = store_->Put(prefix_ + "c", "2");
  ASSERT_TRUE(r0.ok() && r1.ok());
  std::optional<EtcdCluster::Reply> compacted = cluster_->Post(
      0, "/v3/kv/compaction", etcd_test::Cat("{\"revision\":\"", std::to_string(*r1), "\"}"));
  ASSERT_TRUE(compacted && compacted->status == 200) << (compacted ? compacted->body : "");
  Result<coord::WatchResult> w = store_->Watch(prefix_ + "c", false, *r0 - 1, 5.0);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_TRUE(w->compacted);
  EXPECT_TRUE(w->events.empty());
  EXPECT_GE(w->revision, *r1);
}

// A follow is one stream: created once, then each change as it comes. Each put here is made
// from the callback, after the stream has told what came before it.
TEST_F(EtcdStoreTest, FollowCarriesEveryChangeOnOneStream) {
  const std::string k = prefix_ + "f";
  const int64_t from = Revision();
  int created = 0;
  std::vector<std::string> values;
  std::vector<int64_t> revisions;
  Result<int64_t> end = store_->Follow(k, false, from, 10.0, [&](const coord::WatchResult& w) {
    EXPECT_FALSE(w.compacted);
    if (w.events.empty()) {
      ++created;
      EXPECT_GE(w.revision, from);
    }
    for (const coord::WatchEvent& e : w.events) {
      values.push_back(e.kv.value);
      revisions.push_back(e.kv.mod_revision);
    }
    if (values.size() == 3) return false;
    Result<int64_t> put = store_->Put(k, std::to_string(values.size()));
    EXPECT_TRUE(put.ok()) << put.error().message();
    return put.ok();
  });
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(created, 1);
  EXPECT_EQ(values, (std::vector<std::string>{"0", "1", "2"}));
  ASSERT_EQ(revisions.size(), 3u);
  EXPECT_EQ(*end, revisions.back());  // where the next follow resumes
}

TEST_F(EtcdStoreTest, FollowEndsQuietlyWithWhereToResume) {
  const int64_t from = Revision();
  const Clock::time_point start = Clock::now();
  int told = 0;
  Result<int64_t> end =
      store_->Follow(prefix_ + "quiet", true, from, 0.5, [&](const coord::WatchResult&) {
        ++told;
        return true;
      });
  const double waited_s = SecondsSince(start);
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(told, 1);  // created, nothing else
  EXPECT_GE(*end, from);
  EXPECT_GE(waited_s, 0.4);
  EXPECT_LT(waited_s, 5.0);
}

// CancelFollows ends a follow that would wait a minute, at once, and every later one.
TEST_F(EtcdStoreTest, CancelFollowsEndsThemAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  bool created = false;
  Result<int64_t> end = 0;
  std::thread follower([&] {
    end = store_->Follow(prefix_ + "c", false, Revision(), 60.0, [&](const coord::WatchResult&) {
      std::lock_guard lock(mu);
      created = true;
      cv.notify_all();
      return true;
    });
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return created; }));
  }
  const Clock::time_point start = Clock::now();
  store_->CancelFollows();
  follower.join();
  EXPECT_LT(SecondsSince(start), 5.0);
  ASSERT_FALSE(end.ok());
  EXPECT_NE(end.error().message().find("canceled"), std::string::npos) << end.error().message();
  Result<int64_t> later = store_->Follow(prefix_ + "c", false, Revision(), 60.0,
                                         [](const coord::WatchResult&) { return true; });
  ASSERT_FALSE(later.ok());
  // The other calls are not affected.
  EXPECT_TRUE(store_->Put(prefix_ + "c", "still").ok());
}

TEST_F(EtcdStoreTest, CompactsThroughTheStore) {
  Result<int64_t> r0 = store_->Put(prefix_ + "d", "1");
  Result<int64_t> r1 = store_->Put(prefix_ + "d", "2");
  ASSERT_TRUE(r0.ok() && r1.ok());
  ASSERT_TRUE(store_->Compact(*r1).ok());
  ASSERT_TRUE(store_->Compact(*r1).ok());  // again: already compacted, not an error
  Result<coord::WatchResult> w = store_->Watch(prefix_ + "d", false, *r0 - 1, 5.0);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_TRUE(w->compacted);
  Result<coord::RangeResult> g = store_->Get(prefix_ + "d");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->kvs.at(0).value, "2");
}

// Threads sharing one store: every increment is a CAS on the counter's mod revision, retried
// when another thread won; none is lost or doubled.
TEST_F(EtcdStoreTest, ConcurrentCasIncrements) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 25;
  const std::string k = prefix_ + "counter";
  ASSERT_TRUE(store_->Put(k, "0").ok());
  std::vector<std::thread> threads;
  for (int n = 0; n < kThreads; ++n) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements;) {
        Result<coord::RangeResult> got = store_->Get(k);
        ASSERT_TRUE(got.ok()) << got.error().message();
        ASSERT_EQ(got->kvs.size(), 1u);
        coord::TxnRequest t;
        t.compare = {coord::Compare::ModRevision(k, coord::Compare::Result::kEqual,
                                                 got->kvs[0].mod_revision)};
        t.success = {coord::Op::Put(k, std::to_string(std::stoi(got->kvs[0].value) + 1))};
        Result<coord::TxnResult> out = store_->Txn(t);
        ASSERT_TRUE(out.ok()) << out.error().message();
        i += out->succeeded ? 1 : 0;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  Result<coord::RangeResult> got = store_->Get(k);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, std::to_string(kThreads * kIncrements));
  EXPECT_EQ(got->kvs[0].version, kThreads * kIncrements + 1);
}

TEST_F(EtcdStoreTest, CasTxnLatency) {
  constexpr int kRounds = 200;
  const std::string k = prefix_ + "cas";
  Result<int64_t> last = store_->Put(k, "0");
  ASSERT_TRUE(last.ok());
  std::vector<double> ms;
  for (int i = 1; i <= kRounds; ++i) {
    coord::TxnRequest t;
    t.compare = {coord::Compare::ModRevision(k, coord::Compare::Result::kEqual, *last)};
    t.success = {coord::Op::Put(k, std::to_string(i))};
    const Clock::time_point start = Clock::now();
    Result<coord::TxnResult> out = store_->Txn(t);
    ms.push_back(SecondsSince(start) * 1e3);
    ASSERT_TRUE(out.ok()) << out.error().message();
    ASSERT_TRUE(out->succeeded);
    last = out->revision;
  }
  std::sort(ms.begin(), ms.end());
  const auto at = [&](double q) { return ms[static_cast<size_t>(q * (ms.size() - 1))]; };
  std::printf("CAS txn latency, single-member etcd, %d rounds: p50 %.2f ms, p99 %.2f ms\n", kRounds,
              at(0.5), at(0.99));
}

// A stand-in for the gateway that answers each path with a canned body (or never answers it),
// one connection at a time, closing each: for the answers etcd should not give.
class FakeGateway {
 public:
  FakeGateway() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        listen(listen_fd_, 16) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    Answer("/v3/maintenance/status", "{}");
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeGateway() {
    shutdown(listen_fd_, SHUT_RDWR);  // wakes accept
    thread_.join();
    close(listen_fd_);
  }
  std::string endpoint() const { return etcd_test::Cat("127.0.0.1:", std::to_string(port_)); }
  // nullopt: read the request, then hold the connection until the client gives up.
  void Answer(const std::string& path, std::optional<std::string> body) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[path] = std::move(body);
  }

 private:
  void Serve() {
    while (true) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::string request;
      char buffer[4096];
      size_t head_end = std::string::npos;
      size_t length = 0;
      while (head_end == std::string::npos || request.size() < head_end + 4 + length) {
        const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
        if (head_end == std::string::npos &&
            (head_end = request.find("\r\n\r\n")) != request.npos) {
          const size_t at = request.find("Content-Length: ");
          if (at < head_end) length = std::stoul(request.substr(at + 16));
        }
      }
      const size_t path_start = request.find(' ') + 1;
      const std::string path =
          request.substr(path_start, request.find(' ', path_start) - path_start);
      std::optional<std::string> body;
      {
        std::lock_guard<std::mutex> lock(mu_);
        body = answers_.count(path) ? answers_[path] : std::optional<std::string>("{}");
      }
      if (body) {
        const std::string response = etcd_test::Cat(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n",
            "Content-Length: ", std::to_string(body->size()), "\r\n\r\n", *body);
        send(fd, response.data(), response.size(), MSG_NOSIGNAL);
      } else {
        pollfd p{fd, POLLIN, 0};
        poll(&p, 1, /*timeout_ms=*/10000);  // until the client closes
      }
      close(fd);
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, std::optional<std::string>> answers_;
};

TEST(EtcdStoreAnswers, MalformedAnswersAreErrors) {
  FakeGateway gateway;
  // Keep-alives through the gateway too (the fake speaks no gRPC).
  Result<std::unique_ptr<EtcdStore>> opened =
      EtcdStore::Open(gateway.endpoint(), 0.5, {}, {}, EtcdKeepAlive::kHttpPost);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EtcdStore& store = **opened;
  for (const char* body : {
           "not json",
           "[1, 2]",
           "{}",
           R"({"header": {"revision": "x"}})",
           R"({"header": {"revision": "99999999999999999999"}})",
           R"({"header": {"revision": 1.5}})",
           R"({"header": {"revision": "1"}, "kvs": {}})",
           R"({"header": {"revision": "1"}, "kvs": [{"value": "eA=="}]})",
           R"({"header": {"revision": "1"}, "kvs": [{"key": "!!!"}]})",
           R"({"header": {"revision": "1"}, "kvs": [{"key": "eA==", "version": true}]})",
           R"({"header": {"revision": "1"}, "kvs": [7]})",
       }) {
    gateway.Answer("/v3/kv/range", body);
    Result<coord::RangeResult> got = store.Get("x");
    ASSERT_FALSE(got.ok()) << body;
    EXPECT_EQ(got.error().kind(), ErrorKind::kIo);
    EXPECT_NE(got.error().message().find("malformed"), std::string::npos)
        << body << ": " << got.error().message();
  }
  gateway.Answer("/v3/kv/range", R"({"header": {"revision": "3"}, "kvs": [{"key": "eA=="}]})");
  Result<coord::RangeResult> got = store.Get("x");
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, "x");
  EXPECT_EQ(got->kvs[0].value, "");

  coord::TxnRequest t;
  t.success = {coord::Op::Get("x")};
  gateway.Answer("/v3/kv/txn", R"({"header": {"revision": "3"}, "succeeded": true})");
  Result<coord::TxnResult> txn = store.Txn(t);
  ASSERT_FALSE(txn.ok());
  gateway.Answer("/v3/kv/txn", R"({"header": {"revision": "3"}, "succeeded": true,
                                   "responses": [{"response_put": {}}]})");
  txn = store.Txn(t);
  ASSERT_FALSE(txn.ok());
  gateway.Answer("/v3/kv/txn", R"({"header": {"revision": "3"}})");  // failed, no failure ops
  txn = store.Txn(t);
  ASSERT_TRUE(txn.ok()) << txn.error().message();
  EXPECT_FALSE(txn->succeeded);

  gateway.Answer("/v3/lease/keepalive", "{\"result\": {\"ID\": \"7\", \"TTL\": \"5\"}}\n\n");
  Result<int64_t> ttl_s = store.LeaseKeepAlive(7);
  ASSERT_TRUE(ttl_s.ok()) << ttl_s.error().message();
  EXPECT_EQ(*ttl_s, 5);
  gateway.Answer("/v3/lease/keepalive", R"({"error": {"grpc_code": 9, "message": "nope"}})");
  ttl_s = store.LeaseKeepAlive(7);
  ASSERT_FALSE(ttl_s.ok());
  EXPECT_NE(ttl_s.error().message().find("nope"), std::string::npos);
  gateway.Answer("/v3/lease/grant", R"({"header": {"revision": "3"}, "TTL": "5"})");
  EXPECT_FALSE(store.LeaseGrant(5).ok());

  gateway.Answer("/v3/watch", "{\"result\": {\"created\": true}}\n{\"result\": {\"events\": 3}}\n");
  EXPECT_FALSE(store.Watch("x", false, 0, 1.0).ok());
  gateway.Answer("/v3/watch", "{\"result\": {\"canceled\": true, \"cancel_reason\": \"why\"}}\n");
  Result<coord::WatchResult> w = store.Watch("x", false, 0, 1.0);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message().find("why"), std::string::npos) << w.error().message();
}

TEST(EtcdStoreAnswers, NoAnswerToAWriteIsAnUnknownOutcome) {
  FakeGateway gateway;
  Result<std::unique_ptr<EtcdStore>> opened = EtcdStore::Open(gateway.endpoint(), 0.3);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  gateway.Answer("/v3/kv/put", std::nullopt);
  gateway.Answer("/v3/kv/range", std::nullopt);
  Result<int64_t> put = (*opened)->Put("k", "v");
  ASSERT_FALSE(put.ok());
  EXPECT_TRUE(coord::IsOutcomeUnknown(put.error())) << put.error().message();
  Result<coord::RangeResult> got = (*opened)->Get("k");
  ASSERT_FALSE(got.ok());
  EXPECT_FALSE(coord::IsOutcomeUnknown(got.error())) << got.error().message();
}

TEST(EtcdStoreOpen, ReportsUnreachableEndpointsAndBadOnes) {
  // A port nothing listens on: bound and closed again.
  auto free_port = FreeLoopbackPort();
  ASSERT_TRUE(free_port.ok()) << free_port.error().message();
  const std::string port = std::to_string(*free_port);

  Result<std::unique_ptr<EtcdStore>> store = EtcdStore::Open("127.0.0.1:" + port, 0.5);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().kind(), ErrorKind::kUnavailable);  // no member answered
  EXPECT_NE(store.error().message().find("http://127.0.0.1:" + port), std::string::npos)
      << store.error().message();

  for (const char* bad :
       {"", "localhost", "ftp://127.0.0.1:2379", "127.0.0.1:0", "127.0.0.1:2379,", "127.0.0.1:x",
        "http://127.0.0.1:2379,https://127.0.0.1:2380", "etcd://a b:2379", "etcd://user@host:2379",
        "etcd://h/x:2379", "etcd://[::1:2379"}) {
    store = EtcdStore::Open(bad);
    ASSERT_FALSE(store.ok()) << bad;
    EXPECT_EQ(store.error().kind(), ErrorKind::kUsage) << bad << ": " << store.error().message();
  }
}

// Issue 53, item 9: etcd:// and etcds:// name the scheme of the whole list; a member with a scheme
// of its own is refused in one line (before: "etcds://http://h:p" connected over plain HTTP).
TEST(EtcdEndpoints, ASchemeInsideEtcdUrlsIsRefused) {
  EXPECT_EQ(*ParseEndpoints("etcds://a:2379,b:2379"),
            (std::vector<std::string>{"https://a:2379", "https://b:2379"}));
  EXPECT_EQ(*ParseEndpoints("etcd://a:2379"), (std::vector<std::string>{"http://a:2379"}));
  EXPECT_EQ(*ParseEndpoints("https://a:2379,https://b:2379"),
            (std::vector<std::string>{"https://a:2379", "https://b:2379"}));
  for (const char* bad :
       {"etcds://http://127.0.0.1:2379", "etcds://https://127.0.0.1:2379",
        "etcd://http://127.0.0.1:2379", "etcds://a:2379,http://b:2379", "etcd://etcds://a:2379"}) {
    Result<std::vector<std::string>> urls = ParseEndpoints(bad);
    ASSERT_FALSE(urls.ok()) << bad;
    EXPECT_EQ(urls.error().kind(), ErrorKind::kUsage) << bad;
    EXPECT_NE(urls.error().message().find("names the scheme of the whole list"), std::string::npos)
        << urls.error().message();
    EXPECT_EQ(urls.error().message().find('\n'), std::string::npos);
  }
}

// A member that trickles its answer a byte at a time passes every read timeout; the request's
// whole deadline (twice the timeout) cuts it. Before: the request, and the store's lock, were
// held for as long as the member went on.
TEST(EtcdStoreOpen, AMemberTricklingItsAnswerIsCutAtTheWholeDeadline) {
  test_support::TricklingServer member;
  ASSERT_GT(member.port(), 0);
  Result<std::unique_ptr<EtcdStore>> store =
      EtcdStore::Open("127.0.0.1:" + std::to_string(member.port()), 0.3);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().kind(), ErrorKind::kUnavailable);  // no member answered
  EXPECT_NE(store.error().message().find("no whole answer within 0.6 s"), std::string::npos)
      << store.error().message();
}

// Writes go on through a follower's SIGKILL at once, and through the leader's after an
// election; the restarted member catches up.
TEST(EtcdStoreCluster, SurvivesKilledMembers) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(3, &why);
  ASSERT_TRUE(cluster) << why;
  int leader = cluster->LeaderIndex();
  ASSERT_GE(leader, 0);
  const int follower = (leader + 1) % 3;
  // The follower first: the store starts on it and must move on when it dies.
  const std::string endpoints = "etcd://" + cluster->endpoint(follower).substr(7) + "," +
                                cluster->endpoint(leader).substr(7) + "," +
                                cluster->endpoint((leader + 2) % 3).substr(7);
  Result<std::unique_ptr<EtcdStore>> opened = EtcdStore::Open(endpoints);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EtcdStore& store = **opened;
  ASSERT_TRUE(store.Put("k", "0").ok());

  cluster->Kill(follower);
  Result<int64_t> put = store.Put("k", "1");
  ASSERT_TRUE(put.ok()) << put.error().message();
  Result<coord::RangeResult> got = store.Get("k");
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "1");
  // Opening with the dead member first still works.
  ASSERT_TRUE(EtcdStore::Open(endpoints).ok());
  ASSERT_TRUE(cluster->Restart(follower, &why)) << why;

  // Until a new leader is elected writes fail, some with an unknown outcome (sent, then timed
  // out): Put is idempotent here, so retrying is the resolution.
  constexpr double kElectionDeadlineS = 20.0;
  leader = cluster->LeaderIndex();
  ASSERT_GE(leader, 0);
  cluster->Kill(leader);
  const Clock::time_point killed = Clock::now();
  int failures = 0;
  int unknown = 0;
  std::string last_error;
  while (true) {
    put = store.Put("k", "2");
    if (put.ok()) break;
    ++failures;
    unknown += coord::IsOutcomeUnknown(put.error()) ? 1 : 0;
    last_error = put.error().message();
    ASSERT_LT(SecondsSince(killed), kElectionDeadlineS) << last_error;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf(
      "writes after the leader's SIGKILL: first success after %.2f s, %d failed (%d "
      "outcome unknown)%s%s\n",
      SecondsSince(killed), failures, unknown, failures > 0 ? "; last: " : "", last_error.c_str());
  got = store.Get("k");
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "2");

  // The old leader, restarted, serves the latest value (a linearizable read).
  ASSERT_TRUE(cluster->Restart(leader, &why)) << why;
  Result<std::unique_ptr<EtcdStore>> on_old_leader = EtcdStore::Open(cluster->endpoint(leader));
  ASSERT_TRUE(on_old_leader.ok()) << on_old_leader.error().message();
  got = (*on_old_leader)->Get("k");
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "2");
}

// etcd's v3 auth: a user and password, a token on every request, permissions enforced by etcd.
TEST(EtcdStoreAuth, AUserAndPasswordOrNothing) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
  std::string why;
  std::optional<EtcdCluster> cluster = EtcdCluster::Start(1, &why);
  ASSERT_TRUE(cluster) << why;
  // alice may read and write "/t/" up to "/t0" only (base64).
  const std::string failed = cluster->EnableAuth("alice", "alicepw", "L3Qv", "L3Qw");
  ASSERT_TRUE(failed.empty()) << failed;

  Result<std::unique_ptr<EtcdStore>> anonymous = EtcdStore::Open(cluster->endpoints());
  ASSERT_TRUE(anonymous.ok()) << anonymous.error().message();  // status needs no user
  Result<coord::RangeResult> refused = (*anonymous)->Get("/t/k");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("user name is empty"), std::string::npos)
      << refused.error().message();

  Result<std::unique_ptr<EtcdStore>> wrong =
      EtcdStore::Open(cluster->endpoints(), 2.0, EtcdCredentials{"alice", "nope"});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message().find("authenticate as 'alice'"), std::string::npos)
      << wrong.error().message();

  Result<std::unique_ptr<EtcdStore>> alice =
      EtcdStore::Open(cluster->endpoints(), 2.0, EtcdCredentials{"alice", "alicepw"});
  ASSERT_TRUE(alice.ok()) << alice.error().message();
  EtcdStore& store = **alice;
  ASSERT_TRUE(store.Put("/t/k", "v").ok());
  Result<coord::RangeResult> got = store.Get("/t/k");
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "v");
  Result<coord::LeaseId> lease = store.LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  EXPECT_TRUE(store.LeaseKeepAlive(*lease).ok());
  Result<coord::WatchResult> watched = store.Watch("/t/", true, got->revision - 1, 1.0);
  ASSERT_TRUE(watched.ok()) << watched.error().message();
  EXPECT_EQ(watched->events.size(), 1u);
  // TxnEach's other connections carry the token too.
  std::vector<coord::TxnRequest> txns(3);
  for (size_t i = 0; i < txns.size(); ++i)
    txns[i].success = {coord::Op::Put("/t/" + std::to_string(i), "v")};
  for (const Result<coord::TxnResult>& r : store.TxnEach(txns)) {
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_TRUE(r->succeeded);
  }
  Result<int64_t> outside = store.Put("/elsewhere", "v");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.error().message().find("permission denied"), std::string::npos);
}

TEST(EtcdStoreAuth, CredentialsFromAFile) {
  const std::string dir = ::testing::TempDir() + "/headroom-etcd-credentials";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/pw") << "s3cret\n";
    std::ofstream(dir + "/empty") << "\n";
  }
  Result<EtcdCredentials> c = ReadEtcdCredentials("alice", dir + "/pw");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->user, "alice");
  EXPECT_EQ(c->password, "s3cret");
  EXPECT_TRUE(ReadEtcdCredentials("", "").ok());  // none
  EXPECT_FALSE(ReadEtcdCredentials("alice", "").ok());
  Result<EtcdCredentials> missing = ReadEtcdCredentials("alice", dir + "/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("--etcd-password-file " + dir + "/missing: cannot open"),
            std::string::npos)
      << missing.error().message();
  EXPECT_FALSE(ReadEtcdCredentials("alice", dir + "/empty").ok());
  // Only the first line is the password; a file stops at the bound (before: getline read
  // until memory ran out); a device or a FIFO is not read at all (issue 53, item 8).
  { std::ofstream(dir + "/two") << "s3cret\nsecond line\n"; }
  EXPECT_EQ(ReadEtcdCredentials("alice", dir + "/two")->password, "s3cret");
  { std::ofstream(dir + "/big") << "s3cret\n"; }
  std::filesystem::resize_file(dir + "/big", 1 << 20);  // sparse
  Result<EtcdCredentials> big = ReadEtcdCredentials("alice", dir + "/big");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().message(), "--etcd-password-file " + dir + "/big: larger than 65536 bytes");
  Result<EtcdCredentials> zero = ReadEtcdCredentials("alice", "/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message(),
            "--etcd-password-file /dev/zero: is a character device, not a regular file");
  std::filesystem::remove_all(dir);
}

// Issue 53, item 8: each TLS failure named, in one line with the endpoint and the file. Before, a
// key that was not its certificate's said "HTTP client error Success", and the other failures
// "HTTP client error SSLServerVerification" (or SSLConnection, or a lost connection). Against
// real etcds with TLS: one with a good certificate (--client-cert-auth; its plain port too), one
// with an expired certificate and one with another host's, all of one CA, each started when a
// test first needs it; the certificates made by openssl in the suite's temporary directory.
class EtcdTlsFailures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!EtcdCluster::Available() || access("/usr/bin/openssl", X_OK) != 0) return;
    char pattern[] = "/tmp/headroom-etcd-tls-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      files_why_ = "mkdtemp failed";
      return;
    }
    dir_ = pattern;
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string sign = "-CAkey ca.key -CAcreateserial";
    const std::vector<std::string> steps = {
        "openssl req -x509 " + key + " -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca",
        "openssl req -x509 " + key +
            " -keyout other-ca.key -out other-ca.pem -days 1 -subj /CN=another-ca",
        // serverAuth and clientAuth: etcd's gateway dials etcd with the server's certificate.
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,"
        "clientAuth\n' > server.ext",
        "printf 'subjectAltName=DNS:etcd.elsewhere.example\nextendedKeyUsage=serverAuth,"
        "clientAuth\n' > elsewhere.ext",
        "printf 'extendedKeyUsage=clientAuth\n' > client.ext",
        "openssl req " + key + " -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        "openssl x509 -req -in server.csr -CA ca.pem " + sign +
            " -days 1 -extfile server.ext -out server.pem",
        // Valid until a day before it was made: expired.
        "openssl x509 -req -in server.csr -CA ca.pem " + sign +
            " -days -1 -extfile server.ext -out expired.pem",
        // Its common name too: httplib accepts a certificate whose common name is the host.
        "openssl req -new -key server.key -out elsewhere.csr -subj /CN=etcd.elsewhere.example",
        "openssl x509 -req -in elsewhere.csr -CA ca.pem " + sign +
            " -days 1 -extfile elsewhere.ext -out elsewhere.pem",
        "openssl req " + key + " -keyout client.key -out client.csr -subj /O=headroom-client",
        "openssl x509 -req -in client.csr -CA ca.pem " + sign +
            " -days 1 -extfile client.ext -out client.pem",
        // The same client key, certified by a CA etcd does not trust.
        "openssl x509 -req -in client.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial "
        "-days 1 -extfile client.ext -out stranger.pem",
        "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out other.key",
        "printf 'not a certificate\n' > garbage.pem"};
    for (const std::string& step : steps) {
      // In a subshell: a step's own redirection (printf ... > F) is not overridden.
      const std::string command = "cd " + dir_ + " && (" + step + ") > /dev/null 2>&1";
      if (std::system(command.c_str()) != 0) {
        files_why_ = "failed: " + command;
        return;
      }
    }
    files_why_.clear();
  }
  static void TearDownTestSuite() {
    etcds_.clear();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  void SetUp() override {
    if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << etcd_test::kEtcdBinary;
    if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl";
    ASSERT_TRUE(files_why_.empty()) << files_why_;
  }

  static std::string File(const std::string& name) { return dir_ + "/" + name; }
  // The etcd serving the certificate `cert` (started at its first use, kept for the suite);
  // nullptr, and why_ says why, when it did not start.
  static EtcdCluster* Etcd(const std::string& cert) {
    std::optional<EtcdCluster>& etcd = etcds_[cert];
    if (!etcd) {
      etcd = EtcdCluster::Start(1, &why_,
                                EtcdCluster::Tls{File(cert), File("server.key"), File("ca.pem")});
    }
    return etcd ? &*etcd : nullptr;
  }
  // The CA file, this client's certificate and key.
  static EtcdTls Files(const std::string& ca, const std::string& cert = "client.pem",
                       const std::string& key = "client.key") {
    return EtcdTls{ca.empty() ? "" : File(ca), cert.empty() ? "" : File(cert),
                   key.empty() ? "" : File(key)};
  }
  // What Open says when the one member `url` fails with `cause` (the first request's path).
  static std::string Failed(const std::string& url, const std::string& cause) {
    return "etcd at " + url + ": /v3/maintenance/status: " + url + ": " + cause;
  }
  // Open's error for `endpoint` with `tls` ("" when it opened).
  static std::string OpenError(const std::string& endpoint, const EtcdTls& tls) {
    Result<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(endpoint, 2.0, {}, tls);
    return store.ok() ? "" : store.error().message();
  }

  static inline std::string dir_;
  static inline std::string files_why_ = "the certificates were not made";
  static inline std::string why_;
  static inline std::map<std::string, std::optional<EtcdCluster>> etcds_;  // by certificate
};

TEST_F(EtcdTlsFailures, TheGoodFilesReachIt) {
  EtcdCluster* etcd = Etcd("server.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  Result<std::unique_ptr<EtcdStore>> store =
      EtcdStore::Open(etcd->tls_endpoints(), 2.0, {}, Files("ca.pem"));
  ASSERT_TRUE(store.ok()) << store.error().message();
  EXPECT_TRUE((*store)->Put("/tls/k", "v").ok());
}

TEST_F(EtcdTlsFailures, ACertificateOfAnotherCaIsNamed) {
  EtcdCluster* etcd = Etcd("server.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  const std::string url = etcd->tls_endpoints();
  EXPECT_EQ(
      OpenError(url, Files("other-ca.pem")),
      Failed(url, "etcd's certificate is not signed by the CA of --etcd-cacert " +
                      File("other-ca.pem") + " (OpenSSL: unable to get local issuer certificate)"));
  // Without --etcd-cacert: the system's CAs, which do not know ours either.
  EXPECT_EQ(OpenError(url, Files("")),
            Failed(url,
                   "etcd's certificate is not signed by a CA this system trusts: give its CA as "
                   "--etcd-cacert (OpenSSL: unable to get local issuer certificate)"));
}

TEST_F(EtcdTlsFailures, AnExpiredCertificateIsNamed) {
  EtcdCluster* etcd = Etcd("expired.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  const std::string url = etcd->tls_endpoints();
  EXPECT_EQ(OpenError(url, Files("ca.pem")),
            Failed(url, "etcd's certificate has expired (OpenSSL: certificate has expired)"));
}

TEST_F(EtcdTlsFailures, ACertificateForAnotherHostIsNamed) {
  EtcdCluster* etcd = Etcd("elsewhere.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  const std::string url = etcd->tls_endpoints();
  EXPECT_EQ(OpenError(url, Files("ca.pem")),
            Failed(url, "etcd's certificate is not for host 127.0.0.1 (none of its names is)"));
}

// etcd's alert names the cause after ours; which alert depends on its Go's TLS.
TEST_F(EtcdTlsFailures, AMissingOrStrangeClientCertificateIsNamed) {
  EtcdCluster* etcd = Etcd("server.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  const std::string url = etcd->tls_endpoints();
  EXPECT_THAT(OpenError(url, Files("ca.pem", "", "")),
              ::testing::StartsWith(Failed(url,
                                           "etcd asks for a client certificate: give --etcd-cert "
                                           "and --etcd-key (OpenSSL: ")));
  EXPECT_THAT(OpenError(url, Files("ca.pem", "stranger.pem")),
              ::testing::StartsWith(Failed(url,
                                           "etcd refuses this client's certificate, "
                                           "--etcd-cert " +
                                               File("stranger.pem") + " (OpenSSL: ")));
}

// Checked when loaded, before any connection: the endpoint is a port nobody listens on.
TEST_F(EtcdTlsFailures, AKeyNotTheCertificatesIsRefusedAtLoad) {
  const EtcdTls tls = Files("ca.pem", "client.pem", "other.key");
  const std::string expected = "--etcd-key " + File("other.key") +
                               " is not the key of --etcd-cert " + File("client.pem") +
                               " (OpenSSL: key values mismatch)";
  Status checked = CheckEtcdAccess("https://127.0.0.1:1", tls);
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.error().kind(), ErrorKind::kInput);
  EXPECT_EQ(checked.error().message(), expected);
  Result<std::unique_ptr<EtcdStore>> store = EtcdStore::Open("https://127.0.0.1:1", 2.0, {}, tls);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().kind(), ErrorKind::kInput);
  EXPECT_EQ(store.error().message(), expected);
}

TEST_F(EtcdTlsFailures, FilesThatAreNotPemAreRefusedAtLoad) {
  const std::string endpoint = "https://127.0.0.1:1";
  Status st = CheckEtcdAccess(endpoint, Files("garbage.pem"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind(), ErrorKind::kInput);
  EXPECT_EQ(st.error().message(),
            "--etcd-cacert " + File("garbage.pem") + ": no PEM certificate in it");
  st = CheckEtcdAccess(endpoint, Files("ca.pem", "garbage.pem"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message(), "--etcd-cert " + File("garbage.pem") +
                                      ": no PEM certificate in it (OpenSSL: no start line)");
  // A certificate where the key should be; a key with a passphrase, refused rather than asked
  // for on the terminal. OpenSSL's reason after ours (its decoders' words vary by version).
  const std::string command = "cd " + dir_ +
                              " && openssl pkey -in client.key -aes256 -passout pass:secret "
                              "-out locked.key > /dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  for (const char* key : {"client.pem", "locked.key"}) {
    st = CheckEtcdAccess(endpoint, Files("ca.pem", "client.pem", key));
    ASSERT_FALSE(st.ok()) << key;
    EXPECT_EQ(st.error().kind(), ErrorKind::kInput);
    EXPECT_THAT(st.error().message(),
                ::testing::StartsWith("--etcd-key " + File(key) +
                                      ": no PEM private key in it, or one with a passphrase "
                                      "(OpenSSL: "));
  }
}

TEST_F(EtcdTlsFailures, PlainHttpToTheTlsPortIsNamed) {
  EtcdCluster* etcd = Etcd("server.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  const std::string tls_url = etcd->tls_endpoints();
  const std::string url = "http://" + tls_url.substr(std::string("https://").size());
  EXPECT_EQ(OpenError(url, {}),
            Failed(url,
                   "it speaks TLS, not plain HTTP: use https:// or etcds:// endpoints (with "
                   "--etcd-cacert)"));
}

TEST_F(EtcdTlsFailures, TlsToThePlainPortIsNamed) {
  EtcdCluster* etcd = Etcd("server.pem");
  ASSERT_NE(etcd, nullptr) << why_;
  const std::string url = "https://" + etcd->endpoint(0).substr(std::string("http://").size());
  EXPECT_EQ(OpenError(url, Files("ca.pem")),
            Failed(url, "it speaks plain HTTP, not TLS: use http:// or etcd:// endpoints"));
}

// A port that takes the connection and never answers the handshake: the handshake's timeout.
TEST_F(EtcdTlsFailures, ASilentTlsEndpointIsNamed) {
  test_support::SilentListener silent;
  ASSERT_GT(silent.port(), 0);
  const std::string url = "https://127.0.0.1:" + std::to_string(silent.port());
  Result<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(url, 0.3, {}, Files("ca.pem"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().message(), Failed(url, "no TLS handshake within 0.3 s"));
}

}  // namespace
}  // namespace headroom::etcd
