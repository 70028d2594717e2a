// The coordinator's history (coord_server/site_history.h): an hour at its period, searched by time,
// sorted however the wall clock moves; each point read from a status as /v1/status reads it.
#include "coord_server/site_history.h"

#include <gtest/gtest.h>

namespace headroom::coord {
namespace {

SiteHistoryPoint At(double unix_s) {
  SiteHistoryPoint p;
  p.unix_s = unix_s;
  return p;
}

TEST(SiteHistory, KeepsAnHourAtThePeriodAndAnswersWhatCameAfter) {
  SiteHistory h(3600.0, 0.2);
  EXPECT_EQ(h.capacity(), 18000u);  // 3600 / 0.2
  for (int i = 0; i < 18005; ++i) h.Add(At(1000.0 + 0.2 * i));
  const auto all = h.After(-1.0);
  ASSERT_EQ(all.size(), 18000u);
  EXPECT_DOUBLE_EQ(all.front().unix_s, 1000.0 + 0.2 * 5);  // the five oldest dropped
  const auto tail = h.After(1000.0 + 0.2 * 18002);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_DOUBLE_EQ(tail[0].unix_s, 1000.0 + 0.2 * 18003);
  EXPECT_TRUE(h.After(1e12).empty());
  EXPECT_EQ(SiteHistory(1e9, 0.01).capacity(), SiteHistory::kMaxPoints);
}

TEST(SiteHistory, AClockSteppedBackKeepsThePointsSorted) {
  SiteHistory h(60.0, 1.0);
  h.Add(At(100.0));
  h.Add(At(101.0));
  h.Add(At(99.5));  // NTP stepped the clock back
  const auto all = h.After(-1.0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_DOUBLE_EQ(all[2].unix_s, 101.0);
  EXPECT_EQ(h.After(100.5).size(), 2u);
}

TEST(SiteHistory, APointCarriesTheLedgerWhileLeadingAndTheMembersPower) {
  CoordinatorStatus s;
  s.role = "leader";
  s.term = 4;
  Ledger l;
  l.site_budget_w = 1000.0;
  l.target_site_budget_w = 900.0;
  l.reserve_w = 50.0;
  LedgerJob a;
  a.grant_w = 400.0;
  a.held_w = 400.0;
  a.floor_w = 100.0;
  l.jobs["a"] = a;
  l.standby["c"] = StandbyJob{};
  s.ledger = l;
  Member ma;
  ma.job = "a";
  ma.power_w = 380.0;
  Member mb;  // registered, not counted yet
  mb.job = "b";
  mb.power_w = 120.0;
  s.members = {{"a", ma}, {"b", mb}};
  const SiteHistoryPoint p = PointOf(s, 1796521800.5);
  EXPECT_DOUBLE_EQ(p.unix_s, 1796521800.5);
  EXPECT_EQ(p.term, 4);
  EXPECT_DOUBLE_EQ(*p.site_budget_w, 1000.0);
  EXPECT_DOUBLE_EQ(*p.target_site_budget_w, 900.0);
  EXPECT_DOUBLE_EQ(*p.reserve_w, 50.0);
  EXPECT_DOUBLE_EQ(*p.held_w, l.HeldW());
  EXPECT_DOUBLE_EQ(*p.power_w, 380.0 + 120.0);
  ASSERT_EQ(p.jobs.size(), 3u);
  EXPECT_DOUBLE_EQ(*p.jobs.at("a").grant_w, 400.0);
  EXPECT_FALSE(p.jobs.at("b").grant_w.has_value());
  EXPECT_FALSE(p.jobs.at("c").grant_w.has_value());
  EXPECT_FALSE(p.jobs.at("c").power_w.has_value());
  // A replica that does not lead has no current ledger: no budget, only what members say.
  s.role = "follower";
  const SiteHistoryPoint f = PointOf(s, 1.0);
  EXPECT_FALSE(f.site_budget_w.has_value());
  EXPECT_FALSE(f.held_w.has_value());
  EXPECT_DOUBLE_EQ(*f.power_w, 500.0);
}

}  // namespace
}  // namespace headroom::coord
