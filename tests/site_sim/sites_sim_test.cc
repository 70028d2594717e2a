// headroom sites-sim: the signals files, and placement across sites against numbers computed
// here from the signals.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

#include "site_sim/site_signals.h"
#include "site_sim/sites_sim.h"
#include "site_sim/sites_sim_report.h"

namespace headroom::site_sim {
namespace {

TEST(SiteSignals, ParsesRowsThatHoldUntilTheNext) {
  auto s = site_sim::ParseSiteSignals(
      "# a comment\nt_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh\n0,100,97,56\n60,50.5,-3,"
      "713\r\n",
      "f.csv");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->points().size(), 2u);
  EXPECT_DOUBLE_EQ(s->At(0).spare_w, 100);
  EXPECT_DOUBLE_EQ(s->At(59.9).spare_w, 100);
  EXPECT_DOUBLE_EQ(s->At(60).spare_w, 50.5);
  EXPECT_DOUBLE_EQ(s->At(1e6).carbon_g_per_kwh, 713);  // the last row holds
  EXPECT_DOUBLE_EQ(s->At(61).price_eur_per_mwh, -3);   // negative prices happen
}

TEST(SiteSignals, BadInputNamesFileLineAndField) {
  const std::string h = "t_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh\n";
  const std::pair<std::string, std::string> cases[] = {
      {"t_s,spare_w\n0,1\n", "f.csv:1: expected the header"},
      {h + "0,1,2\n", "f.csv:2: expected four fields"},
      {h + "0,1,2,3,4\n", "f.csv:2: expected four fields"},
      {h + "5,1,2,3\n", "f.csv:2: field 't_s': expected 0 on the first row"},
      {h + "0,1,2,3\n0,1,2,3\n", "f.csv:3: field 't_s': expected a time after"},
      {h + "0,-1,2,3\n", "f.csv:2: field 'spare_w'"},
      {h + "0,1,x,3\n", "f.csv:2: field 'price_eur_per_mwh': expected a number"},
      {h + "0,1,2,9999\n", "f.csv:2: field 'carbon_g_per_kwh'"},
      {h, "f.csv: no rows"},
  };
  for (const auto& [text, want] : cases) {
    auto s = site_sim::ParseSiteSignals(text, "f.csv");
    ASSERT_FALSE(s) << text;
    EXPECT_NE(s.error().message().find(want), std::string::npos) << s.error().message();
  }
  auto missing = site_sim::ReadSiteSignals("/nonexistent/site.csv");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("/nonexistent/site.csv: cannot open"),
            std::string::npos);
}

// Two sites, constant signals: clean with room for 2 workers of 80 W (200 W x 0.9 / 80 = 2),
// dirty with room for 8 (800 W).
site_sim::SitesSimConfig TwoSites() {
  site_sim::SitesSimConfig c;
  const std::string h = "t_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh\n";
  c.sites.push_back({"clean", *site_sim::ParseSiteSignals(h + "0,200,97,50\n", "clean"), 1000});
  c.sites.push_back({"dirty", *site_sim::ParseSiteSignals(h + "0,800,60,700\n", "dirty"), 1000});
  c.workers = 8;
  c.min_workers = 4;
  c.worker.threads = 8;  // 80 W
  c.worker.inner_steps = 20;
  c.duration_s = 1200;
  return c;
}

TEST(SitesSim, CarbonAwarePlacementUsesTheDirtySiteOnlyForTheFloor) {
  const site_sim::SitesSimConfig c = TwoSites();
  auto r = site_sim::RunSitesSim(c, nullptr);
  ASSERT_TRUE(r) << r.error().message();
  const SitesSimRun* carbon = r->Find("carbon");
  const SitesSimRun* spare = r->Find("spare");
  const SitesSimRun* clean = r->Find("single:clean");
  const SitesSimRun* dirty = r->Find("single:dirty");
  const SitesSimRun* dedicated = r->Find("dedicated");
  ASSERT_TRUE(carbon && spare && clean && dirty && dedicated);
  // carbon: 2 at the clean site, 2 more at the dirty one for the floor of 4; spare: the dirty
  // site has the most spare watts: all 8 there.
  for (int m : carbon->round_members) EXPECT_EQ(m, 4);
  for (int m : spare->round_members) EXPECT_EQ(m, 8);
  EXPECT_NEAR(carbon->sites[0].worker_s, carbon->sites[1].worker_s, 2.0);
  EXPECT_DOUBLE_EQ(spare->sites[0].worker_s, 0.0);
  // The clean site alone never reaches the floor: no round, idle throughout.
  EXPECT_EQ(clean->rounds, 0);
  EXPECT_DOUBLE_EQ(clean->tokens, 0.0);
  EXPECT_NEAR(clean->idle_s, c.duration_s, 1.0);
  // Carbon from each site's energy at its intensity, computed here.
  for (const SitesSimRun* run : {carbon, spare, dirty}) {
    double g = 0.0;
    for (size_t i = 0; i < 2; ++i) {
      const double ci = i == 0 ? 50.0 : 700.0;
      g += run->sites[i].energy_j / 3.6e6 * ci;
    }
    EXPECT_NEAR(run->carbon_g, g, 1e-9 * g) << run->policy;
    double eur = 0.0;
    for (size_t i = 0; i < 2; ++i) eur += run->sites[i].energy_j / 3.6e9 * (i == 0 ? 97 : 60);
    EXPECT_NEAR(run->cost_eur, eur, 1e-9 * eur) << run->policy;
    // Tokens: each round's members x H x threads x 512.
    const double members = std::accumulate(run->round_members.begin(), run->round_members.end(), 0);
    EXPECT_DOUBLE_EQ(run->tokens, members * 20 * 8 * 512) << run->policy;
  }
  // Half the workers' energy at 50 g instead of 700 g: carbon per token (50 + 700) / 2 = 375
  // against 700 g/kWh, the same energy per token (-46 %), within the exchange's share.
  EXPECT_NEAR(carbon->carbon_g_per_mtoken() / spare->carbon_g_per_mtoken(), 375.0 / 700.0, 0.02);
  // Dedicated: all 8 workers every round at the first site's grid, never idle.
  for (int m : dedicated->round_members) EXPECT_EQ(m, 8);
  EXPECT_DOUBLE_EQ(dedicated->idle_s, 0.0);
  EXPECT_GT(dedicated->tokens, spare->tokens * 0.99);
  // The JSON the docs name.
  const auto j = site_sim::SitesSimToJson(*r);
  for (const char* key : {"runs", "carbon_per_token_vs_spare_pct", "carbon_per_token_vs_single_pct",
                          "tokens_vs_single_pct", "tokens_vs_dedicated_pct"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j["carbon_per_token_vs_single_pct"].contains("dirty"));
  for (const char* key :
       {"policy", "tokens", "rounds", "energy_kwh", "carbon_g", "carbon_g_per_mtoken", "cost_eur",
        "coordination_energy_fraction", "sites"}) {
    EXPECT_TRUE(j["runs"][0].contains(key)) << key;
  }
  const std::string html = site_sim::SitesSimReportHtml(*r, c);
  EXPECT_NE(html.find("clean"), std::string::npos);
  EXPECT_NE(html.find("opportunistic workers"), std::string::npos);
  EXPECT_NE(html.find("carbon intensity"), std::string::npos);
}

TEST(SitesSim, UnknownPoliciesAndFloorsAreRefused) {
  site_sim::SitesSimConfig c = TwoSites();
  c.policies = {"carbon", "greedy"};
  auto r = site_sim::RunSitesSim(c, nullptr);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("--policies: unknown 'greedy'"), std::string::npos);
  c.policies = {"single:elsewhere"};
  EXPECT_FALSE(site_sim::RunSitesSim(c, nullptr));
  c.policies = {};
  c.min_workers = 9;
  r = site_sim::RunSitesSim(c, nullptr);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("--min-workers 9"), std::string::npos);
}

}  // namespace
}  // namespace headroom::site_sim
