// coord::Lease, the one renewal rule under the member, the coordinator, LeaseKeeper and the
// DiLoCo worker: when a renewal is due, what an answer, a lease gone and no answer each leave
// behind, on a MemoryStore whose leases expire on the same fake time the test passes in.
#include "coord/lease.h"

#include <gtest/gtest.h>

#include "coord/counting_store.h"
#include "coord/memory_store.h"

namespace headroom::coord {
namespace {

struct Fixture {
  double t = 100.0;
  MemoryStore memory{[this] { return t; }};
  CountingStore store{memory};  // counts the requests, to see none is sent before it is due
};

TEST(Lease, GrantedThenRenewedEveryThirdOfItsTtlFromWhenTheRenewalWasSent) {
  Fixture f;
  Lease lease(f.store, 3);
  EXPECT_FALSE(lease.held());
  EXPECT_FALSE(lease.Due(f.t));  // nothing held: nothing to renew
  ASSERT_TRUE(lease.Grant(f.t).ok());
  ASSERT_TRUE(lease.held());
  EXPECT_EQ(lease.ttl_s(), 3);
  EXPECT_EQ(lease.renewed_s(), 100.0);
  EXPECT_EQ(lease.renew_after_s(), 1.0);
  const uint64_t after_grant = f.store.requests();

  // Due once a third of the TTL has passed since the grant was sent, not before.
  f.t = 100.999;
  EXPECT_FALSE(lease.Due(f.t));
  ASSERT_TRUE(lease.RenewIfDue(f.t).ok());
  EXPECT_EQ(f.store.requests(), after_grant);  // not due: the store not asked
  f.t = 101.0;
  EXPECT_TRUE(lease.Due(f.t));
  ASSERT_TRUE(lease.RenewIfDue(f.t).ok());
  EXPECT_EQ(f.store.requests(), after_grant + 1);
  EXPECT_EQ(lease.renewed_s(), 101.0);
  EXPECT_FALSE(lease.Due(101.5));
  EXPECT_TRUE(lease.Due(102.0));

  // A renewal counts from when it was sent (the caller's time), not when it was answered.
  f.t = 102.4;
  ASSERT_TRUE(lease.Renew(/*sent_s=*/102.0).ok());
  EXPECT_EQ(lease.renewed_s(), 102.0);
  EXPECT_TRUE(lease.Due(103.0));

  // Renewed every third of the TTL, the store keeps it alive however long it is held.
  for (int i = 0; i < 30; ++i) {
    f.t += 1.0;
    ASSERT_TRUE(lease.RenewIfDue(f.t).ok()) << i;
  }
  EXPECT_TRUE(lease.held());
}

TEST(Lease, ARenewalPeriodOfItsOwn) {
  Fixture f;
  Lease lease(f.store, 6, /*renew_after_s=*/0.5);
  ASSERT_TRUE(lease.Grant(f.t).ok());
  EXPECT_FALSE(lease.Due(100.49));
  EXPECT_TRUE(lease.Due(100.5));
}

TEST(Lease, GoneIsForgottenAndSaidOnceThenAGrantStartsAgain) {
  Fixture f;
  Lease lease(f.store, 3);
  ASSERT_TRUE(lease.Grant(f.t).ok());
  const LeaseId first = lease.id();

  // Not renewed for longer than its TTL: the store expired it.
  f.t = 103.5;
  const Status renewed = lease.RenewIfDue(f.t);
  ASSERT_FALSE(renewed.ok());
  EXPECT_TRUE(IsLeaseGone(renewed.error()));
  EXPECT_FALSE(lease.held());
  EXPECT_EQ(lease.id(), 0);
  EXPECT_EQ(lease.renewed_s(), 100.0);  // when it was last known to live
  EXPECT_FALSE(lease.Due(f.t));         // nothing to renew

  // Renewing nothing is "gone" again, the store not asked.
  const uint64_t before = f.store.requests();
  const Status again = lease.Renew(f.t);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(IsLeaseGone(again.error()));
  EXPECT_EQ(f.store.requests(), before);

  ASSERT_TRUE(lease.Grant(f.t).ok());
  EXPECT_NE(lease.id(), first);
  EXPECT_EQ(lease.renewed_s(), 103.5);

  // Revoked by someone else (an operator, a successor): gone at the next renewal.
  ASSERT_TRUE(f.memory.LeaseRevoke(lease.id()).ok());
  f.t = 104.5;
  const Status revoked = lease.RenewIfDue(f.t);
  ASSERT_FALSE(revoked.ok());
  EXPECT_TRUE(IsLeaseGone(revoked.error()));
  EXPECT_FALSE(lease.held());
}

TEST(Lease, NoAnswerKeepsTheLeaseAndWhenItWasLastKnownToLive) {
  Fixture f;
  Lease lease(f.store, 3);
  ASSERT_TRUE(lease.Grant(f.t).ok());
  const LeaseId id = lease.id();

  // The store unreachable: the outcome is unknown, the lease kept, still due.
  f.memory.SetUnavailable(true);
  f.t = 101.0;
  const Status renewed = lease.RenewIfDue(f.t);
  ASSERT_FALSE(renewed.ok());
  EXPECT_FALSE(IsLeaseGone(renewed.error()));
  EXPECT_EQ(renewed.error().kind(), ErrorKind::kIo);  // the memory store's "unavailable"
  EXPECT_TRUE(lease.held());
  EXPECT_EQ(lease.id(), id);
  EXPECT_EQ(lease.renewed_s(), 100.0);
  EXPECT_TRUE(lease.Due(f.t));  // tried again at the next chance

  // Back within the TTL: the same lease renewed, counted from this renewal.
  f.memory.SetUnavailable(false);
  f.t = 102.5;
  ASSERT_TRUE(lease.RenewIfDue(f.t).ok());
  EXPECT_EQ(lease.id(), id);
  EXPECT_EQ(lease.renewed_s(), 102.5);

  // A grant without an answer: no lease held (whatever the store made expires on its own).
  Lease other(f.store, 3);
  f.memory.SetUnavailable(true);
  const Status granted = other.Grant(f.t);
  ASSERT_FALSE(granted.ok());
  EXPECT_EQ(granted.error().kind(), ErrorKind::kIo);
  EXPECT_FALSE(other.held());
}

TEST(Lease, TheTtlAsAnsweredAtMostTheOneAskedFor) {
  Fixture f;
  Lease adopted(f.store, /*ttl_s=*/0, /*renew_after_s=*/1.0);  // TTL unknown: LeaseKeeper's
  auto id = f.memory.LeaseGrant(5);
  ASSERT_TRUE(id.ok());
  adopted.Adopt(*id, f.t);
  EXPECT_EQ(adopted.id(), *id);
  EXPECT_TRUE(adopted.Due(101.0));
  ASSERT_TRUE(adopted.Renew(101.0).ok());
  EXPECT_EQ(adopted.ttl_s(), 5);  // as answered

  Lease asked(f.store, 3);
  auto longer = f.memory.LeaseGrant(10);  // a store that grants more than asked (etcd's minimum)
  ASSERT_TRUE(longer.ok());
  asked.Adopt(*longer, f.t);
  ASSERT_TRUE(asked.Renew(f.t).ok());
  EXPECT_EQ(asked.ttl_s(), 3);  // never more than asked for: deadlines stay early
}

TEST(Lease, RevokeEndsItInTheStoreAndForgetsIt) {
  Fixture f;
  Lease lease(f.store, 3);
  EXPECT_TRUE(lease.Revoke().ok());  // none held: nothing to do
  ASSERT_TRUE(lease.Grant(f.t).ok());
  const LeaseId id = lease.id();
  ASSERT_TRUE(lease.Revoke().ok());
  EXPECT_FALSE(lease.held());
  const auto kept = f.memory.LeaseKeepAlive(id);
  ASSERT_FALSE(kept.ok());
  EXPECT_TRUE(IsLeaseGone(kept.error()));

  // Forgotten whatever the store answers.
  ASSERT_TRUE(lease.Grant(f.t).ok());
  f.memory.SetUnavailable(true);
  EXPECT_FALSE(lease.Revoke().ok());
  EXPECT_FALSE(lease.held());
  f.memory.SetUnavailable(false);

  // Forget: the store not told; the lease expires on its own.
  ASSERT_TRUE(lease.Grant(f.t).ok());
  const LeaseId forgotten = lease.id();
  lease.Forget();
  EXPECT_FALSE(lease.held());
  EXPECT_TRUE(f.memory.LeaseKeepAlive(forgotten).ok());
}

}  // namespace
}  // namespace headroom::coord
