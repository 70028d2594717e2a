// SiteView (coord/site_view.h): a view kept from one list and a watch answers as a read of the
// prefix at its revision would, whatever the writes (puts, deletes, transactions, leases that
// lapse), and says when it must be listed again.
#include "coord/site_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "coord/coord_test_util.h"
#include "coord/memory_store.h"

namespace headroom::coord {
namespace {

const std::string kPrefix = "/headroom/s/";

// The view's keys are the read's, each as the read has it, and the view's revision is one at
// which the prefix was as the read has it: at or after its latest change, at most the read's
// (a watch that brought changes resumes from its last one; writes beyond the prefix since then
// moved the store's revision, not the prefix).
bool SameAsRead(const RangeResult& view, const RangeResult& read) {
  int64_t latest = 0;
  for (const KeyValue& kv : read.kvs) latest = std::max(latest, kv.mod_revision);
  if (view.revision > read.revision || view.revision < latest) return false;
  if (view.kvs.size() != read.kvs.size()) return false;
  for (size_t i = 0; i < view.kvs.size(); ++i) {
    const KeyValue& a = view.kvs[i];
    const KeyValue& b = read.kvs[i];
    if (a.key != b.key || a.value != b.value || a.create_revision != b.create_revision ||
        a.mod_revision != b.mod_revision || a.version != b.version || a.lease != b.lease) {
      return false;
    }
  }
  return true;
}

// One random write under the prefix (or beside it: the view must not see those).
void RandomWrite(MemoryStore& store, std::mt19937_64& rng, LeaseId* lease) {
  const std::string key = kPrefix + "members/job" + std::to_string(rng() % 12);
  switch (rng() % 6) {
    case 0:
      ASSERT_TRUE(store.Delete(key, false));
      break;
    case 1: {  // a transaction of several keys at one revision
      TxnRequest t;
      t.success.push_back(Op::Put(kPrefix + "ledger", std::to_string(rng())));
      t.success.push_back(Op::Put(kPrefix + "grants/job" + std::to_string(rng() % 12), "g"));
      t.success.push_back(Op::Delete(kPrefix + "grants/job" + std::to_string(12 + rng() % 3)));
      ASSERT_TRUE(store.Txn(t));
      break;
    }
    case 2:
      ASSERT_TRUE(store.Put("/elsewhere/" + std::to_string(rng() % 3), "x", 0));
      break;
    case 3:
      if (!store.Put(key, std::to_string(rng()), *lease)) {  // lapsed: a new one
        auto granted = store.LeaseGrant(3);
        ASSERT_TRUE(granted);
        *lease = *granted;
        ASSERT_TRUE(store.Put(key, std::to_string(rng()), *lease));
      }
      break;
    default:
      ASSERT_TRUE(store.Put(key, std::to_string(rng()), 0));
  }
}

TEST(SiteView, AListAndItsWatchAnswerAsAReadAtTheSameRevision) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  std::mt19937_64 rng(1);
  auto granted = store.LeaseGrant(3);
  ASSERT_TRUE(granted);
  LeaseId lease = *granted;
  for (int i = 0; i < 30; ++i) RandomWrite(store, rng, &lease);
  SiteView view;
  auto list = store.Get(kPrefix, true);
  ASSERT_TRUE(list);
  view.Reset(*list);
  for (int period = 0; period < 200; ++period) {
    const int writes = static_cast<int>(rng() % 8);
    for (int i = 0; i < writes; ++i) RandomWrite(store, rng, &lease);
    if (period % 50 == 49) clock.t += 10.0;  // the lease lapses: its keys go at the next call
    auto changes = store.Watch(kPrefix, true, view.revision(), 0.0);
    ASSERT_TRUE(changes);
    ASSERT_TRUE(view.Apply(*changes));
    auto read = store.Get(kPrefix, true);
    ASSERT_TRUE(read);
    ASSERT_TRUE(SameAsRead(view.Snapshot(), *read)) << "period " << period;
  }
}

TEST(SiteView, ABatchSentAgainChangesNothing) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  ASSERT_TRUE(store.Put(kPrefix + "a", "1", 0));
  SiteView view;
  view.Reset(*store.Get(kPrefix, true));
  const int64_t from = view.revision();
  ASSERT_TRUE(store.Put(kPrefix + "a", "2", 0));
  ASSERT_TRUE(store.Delete(kPrefix + "a", false));
  auto changes = store.Watch(kPrefix, true, from, 0.0);
  ASSERT_TRUE(changes);
  ASSERT_TRUE(view.Apply(*changes));
  ASSERT_TRUE(view.Apply(*changes));  // a watch resumed from `from` sends both again
  EXPECT_EQ(view.size(), 0u);
  EXPECT_TRUE(SameAsRead(view.Snapshot(), *store.Get(kPrefix, true)));
}

TEST(SiteView, ACompactedHistoryOrOneThatGoesBackMeansListAgain) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  ASSERT_TRUE(store.Put(kPrefix + "a", "1", 0));
  SiteView view;
  EXPECT_FALSE(view.Apply(WatchResult{}));  // nothing listed yet
  view.Reset(*store.Get(kPrefix, true));
  const int64_t from = view.revision();
  ASSERT_TRUE(store.Put(kPrefix + "a", "2", 0));
  ASSERT_TRUE(store.Put(kPrefix + "a", "3", 0));
  auto now = store.Get(kPrefix, true);
  ASSERT_TRUE(store.Compact(now->revision));
  auto changes = store.Watch(kPrefix, true, from, 0.0);
  ASSERT_TRUE(changes);
  ASSERT_TRUE(changes->compacted);
  EXPECT_FALSE(view.Apply(*changes));
  EXPECT_FALSE(view.listed());
  view.Reset(*store.Get(kPrefix, true));
  EXPECT_TRUE(SameAsRead(view.Snapshot(), *store.Get(kPrefix, true)));
  // The store's revision going back (its state lost): list again.
  store.LoseState();
  auto after = store.Watch(kPrefix, true, view.revision(), 0.0);
  ASSERT_TRUE(after);
  EXPECT_FALSE(view.Apply(*after));
  EXPECT_FALSE(view.listed());
}

}  // namespace
}  // namespace headroom::coord
