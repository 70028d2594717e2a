// The coordinator's history (coord_server/site_history.h): an hour at its period, searched by time,
// sorted however the wall clock moves; each point read from a status as /v1/status reads it;
// stored compactly within a bound, and answered in pages of bounded size.
#include "coord_server/site_history.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace headroom::coord_server {
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
  const auto all = h.AfterDecoded(-1.0);
  ASSERT_EQ(all.size(), 18000u);
  EXPECT_DOUBLE_EQ(all.front().unix_s, 1000.0 + 0.2 * 5);  // the five oldest dropped
  const auto tail = h.AfterDecoded(1000.0 + 0.2 * 18002);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_DOUBLE_EQ(tail[0].unix_s, 1000.0 + 0.2 * 18003);
  EXPECT_TRUE(h.AfterDecoded(1e12).empty());
  EXPECT_EQ(h.After(-1.0, 7).size(), 7u);
  EXPECT_EQ(SiteHistory(1e9, 0.01).capacity(), SiteHistory::kMaxPoints);
}

TEST(SiteHistory, AClockSteppedBackKeepsThePointsSorted) {
  SiteHistory h(60.0, 1.0);
  h.Add(At(100.0));
  h.Add(At(101.0));
  h.Add(At(99.5));  // NTP stepped the clock back
  h.Add(At(101.0));
  const auto all = h.AfterDecoded(-1.0);
  ASSERT_EQ(all.size(), 4u);
  // Strictly increasing, each the next double after the one before: a page that ends between
  // two points loses neither.
  EXPECT_DOUBLE_EQ(all[1].unix_s, 101.0);
  EXPECT_EQ(all[2].unix_s, std::nextafter(101.0, 1e9));
  EXPECT_EQ(all[3].unix_s, std::nextafter(all[2].unix_s, 1e9));
  EXPECT_EQ(h.AfterDecoded(100.5).size(), 3u);
  EXPECT_EQ(h.AfterDecoded(all[2].unix_s).size(), 1u);
}

SiteHistoryPoint WithJobs(double unix_s, int jobs, double scale = 1.0) {
  SiteHistoryPoint p = At(unix_s);
  p.role = "leader";
  p.site_budget_w = 1.5e6;
  p.held_w = 1234567.891;  // site-wide numbers stay doubles: exact
  for (int j = 0; j < jobs; ++j) {
    SiteHistoryJob& job = p.jobs["job-" + std::to_string(j)];
    if (j % 3 != 0) job.grant_w = 1000.0 + j * scale;
    job.power_w = 900.25 + j;
  }
  return p;
}

// Issue 53: the store is compact and bounded: a one-hour 1,000-job history (3,600 points at
// 1 s, 7.2 M job values) fits the cap; beyond it the oldest points go, and the newest stay.
TEST(SiteHistory, StoresCompactlyWithinItsBoundAndDropsTheOldestBeyond) {
  static_assert(3600 * 1000 * 2 <= SiteHistory::kMaxStoredJobValues);
  static_assert(SiteHistory::kMaxStoredJobValues * sizeof(float) <= 32u << 20);
  SiteHistory hour(3600.0, 1.0);
  for (int i = 0; i < 3600; ++i) hour.Add(WithJobs(1000.0 + i, 50));
  EXPECT_EQ(hour.size(), 3600u);
  EXPECT_EQ(hour.stored_job_values(), 3600u * 50u * 2u);
  // Shared names: every point of an unchanged set holds the same one.
  const auto two = hour.After(-1.0, 2);
  EXPECT_EQ(two[0]->jobs.get(), two[1]->jobs.get());

  // A cap of 1,000 values, 48 jobs a point (96 values): 10 points stay, the newest.
  SiteHistory big(3600.0, 1.0, 1000);
  for (int i = 0; i < 200; ++i) big.Add(WithJobs(1000.0 + i, 48));
  EXPECT_EQ(big.size(), 10u);
  EXPECT_EQ(big.stored_job_values(), 960u);
  EXPECT_DOUBLE_EQ(big.AfterDecoded(-1.0).front().unix_s, 1000.0 + 190);
  EXPECT_DOUBLE_EQ(big.AfterDecoded(-1.0).back().unix_s, 1000.0 + 199);
  // One point over the cap on its own stays: the newest is always there.
  SiteHistory tiny(3600.0, 1.0, 10);
  tiny.Add(WithJobs(1.0, 48));
  tiny.Add(WithJobs(2.0, 48));
  EXPECT_EQ(tiny.size(), 1u);

  // Decoded as added: the site's numbers exactly, a job's to a float's 7 digits, none as none.
  SiteHistory one(60.0, 1.0);
  const SiteHistoryPoint p = WithJobs(5.0, 5, 0.001);
  one.Add(p);
  const SiteHistoryPoint d = one.AfterDecoded(-1.0).at(0);
  EXPECT_EQ(*d.held_w, 1234567.891);
  EXPECT_FALSE(d.target_site_budget_w.has_value());
  for (const auto& [name, job] : p.jobs) {
    EXPECT_EQ(job.grant_w.has_value(), d.jobs.at(name).grant_w.has_value()) << name;
    if (job.grant_w) {
      EXPECT_NEAR(*d.jobs.at(name).grant_w, *job.grant_w, 1e-7 * *job.grant_w);
    }
    EXPECT_NEAR(*d.jobs.at(name).power_w, *job.power_w, 1e-7 * *job.power_w);
  }
  // A job joining shares nothing with the set before.
  one.Add(WithJobs(6.0, 6));
  const auto both = one.After(-1.0, 2);
  EXPECT_NE(both[0]->jobs.get(), both[1]->jobs.get());
  EXPECT_EQ(both[1]->jobs->names.size(), 6u);
}

// Pages: oldest first after `after`, at most `limit` points and, past the first, at most
// max_bytes; `more` and `next_after` say where the next page starts, and walking the pages
// gives every point once.
TEST(SiteHistory, PagesWalkEveryPointOnceWithinTheirBounds) {
  SiteHistory h(3600.0, 1.0);
  for (int i = 0; i < 500; ++i) h.Add(WithJobs(2000.0 + i, 40));
  SiteHistoryQuery q;
  q.max_bytes = 64 * 1024;
  std::vector<double> seen;
  size_t pages = 0;
  for (;;) {
    const std::string body = SiteHistoryPageJson(h.After(q.after_unix_s, q.limit + 1), q, 1.0);
    const auto j = nlohmann::json::parse(body);
    ++pages;
    ASSERT_GE(j["points"].size(), 1u);
    if (j["points"].size() > 1) {
      EXPECT_LE(body.size(), q.max_bytes);
    }
    for (const auto& p : j["points"]) seen.push_back(p["unix_s"].get<double>());
    // The answer is what Decode reads: the same JSON a point always had.
    const auto& first = j["points"][0];
    EXPECT_EQ(first["role"], "leader");
    EXPECT_EQ(first["target_site_budget_w"], nullptr);
    EXPECT_EQ(first["jobs"]["job-0"]["grant_w"], nullptr);
    EXPECT_EQ(first["jobs"]["job-1"]["grant_w"].get<double>(), 1001.0);
    EXPECT_EQ(first["jobs"]["job-1"]["power_w"].get<double>(), 901.25);
    if (!j["more"].get<bool>()) {
      EXPECT_EQ(j["next_after"], nullptr);
      break;
    }
    EXPECT_EQ(j["next_after"].get<double>(), seen.back());
    q.after_unix_s = j["next_after"].get<double>();
  }
  ASSERT_EQ(seen.size(), 500u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 2000.0 + static_cast<double>(i));
  EXPECT_GT(pages, 5u);

  // ?limit=N: N points, more after them.
  q = {};
  q.limit = 3;
  const auto j = nlohmann::json::parse(SiteHistoryPageJson(h.After(-1.0, 4), q, 1.0));
  EXPECT_EQ(j["points"].size(), 3u);
  EXPECT_TRUE(j["more"].get<bool>());
  EXPECT_EQ(j["next_after"].get<double>(), 2002.0);
  // A point over the cap on its own is still given: an answer always moves the reader on.
  q = {};
  q.max_bytes = 10;
  const auto big = nlohmann::json::parse(SiteHistoryPageJson(h.After(-1.0, 3601), q, 1.0));
  EXPECT_EQ(big["points"].size(), 1u);
  EXPECT_TRUE(big["more"].get<bool>());
  // Nothing after: an empty page, no more.
  const auto none = nlohmann::json::parse(SiteHistoryPageJson(h.After(1e12, 3601), {}, 1.0));
  EXPECT_TRUE(none["points"].empty());
  EXPECT_FALSE(none["more"].get<bool>());
}

TEST(SiteHistory, APointCarriesTheLedgerWhileLeadingAndTheMembersPower) {
  coord::CoordinatorStatus s;
  s.role = "leader";
  s.term = 4;
  coord::Ledger l;
  l.site_budget_w = 1000.0;
  l.target_site_budget_w = 900.0;
  l.reserve_w = 50.0;
  coord::LedgerJob a;
  a.grant_w = 400.0;
  a.held_w = 400.0;
  a.floor_w = 100.0;
  l.jobs["a"] = a;
  l.standby["c"] = coord::StandbyJob{};
  s.ledger = l;
  coord::Member ma;
  ma.job = "a";
  ma.power_w = 380.0;
  coord::Member mb;  // registered, not counted yet
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
}  // namespace headroom::coord_server
