#include "twin/calibrate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

namespace headroom::twin {
namespace {

using ::testing::HasSubstr;

TEST(FitLogistic, RecoversKnownParameters) {
  const Logistic4 truth{430.0, 220.0, 6.9, 0.87};
  std::vector<double> x, y;
  for (double v = 3.0; v <= 10.0; v += 0.5) {
    x.push_back(v);
    y.push_back(truth(v));
  }
  auto fit = FitLogistic(x, y);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_NEAR(fit->curve.b0, truth.b0, 1e-4);
  EXPECT_NEAR(fit->curve.l, truth.l, 1e-4);
  EXPECT_NEAR(fit->curve.x0, truth.x0, 1e-6);
  EXPECT_NEAR(fit->curve.k, truth.k, 1e-6);
  EXPECT_LT(fit->rmse, 1e-6);
}

TEST(FitLogistic, NoisyPointsLeaveTheirNoiseAsError) {
  const Logistic4 truth{476.0, 217.0, 5.4, 1.2};
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0.0, 5.0);
  std::vector<double> x, y;
  for (int rep = 0; rep < 10; ++rep) {
    for (double v = 3.0; v <= 9.5; v += 0.5) {
      x.push_back(v);
      y.push_back(truth(v) + noise(rng));
    }
  }
  auto fit = FitLogistic(x, y);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->rmse, 5.0, 0.6);
  EXPECT_LT(Rmse(fit->curve, x, y), Rmse(truth, x, y) + 1e-9);  // least squares
}

TEST(FitLogistic, TooFewPointsOrNoConvergenceIsAnError) {
  std::vector<double> x = {1, 2, 3, 4}, y = {1, 2, 3, 4};
  EXPECT_THAT(FitLogistic(x, y).error().message(), HasSubstr("too few points"));
  x.push_back(5);
  y.push_back(std::numeric_limits<double>::quiet_NaN());
  EXPECT_THAT(FitLogistic(x, y).error().message(), HasSubstr("did not converge"));
}

TEST(CalibrateDecode, FitsOneModelAndScoresTheHeldOut) {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / "headroom_mlenergy_test.csv";
  {
    std::ofstream out(path);
    out << "task,model_id,gpu_model,num_gpus,tensor_parallel,avg_batch_size,"
           "avg_power_per_gpu_w,output_tok_per_s\n";
    const Logistic4 power{400.0, 200.0, 6.0, 1.0}, tokens{0.0, 8000.0, 7.0, 0.8};
    for (double b : {8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0}) {
      const double x = std::log2(b);
      out << "chat,m,H100,2,2," << b << "," << power(x) << "," << tokens(x) << "\n";
      out << "long,m,H100,2,2," << b << "," << power(x) + 50 << "," << tokens(x) << "\n";
      out << "chat,other,H100,2,2," << b << "," << power(x) + 10 << "," << tokens(x) << "\n";
    }
  }
  auto rows = ReadMlEnergyCsv(path.string());
  ASSERT_TRUE(rows.ok()) << rows.error().message();
  auto c = CalibrateDecode(*rows, "m", "H100", 2, "chat", {"other"});
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->power.points, 7u);
  EXPECT_LT(c->power.rmse, 1e-3);                      // the file holds 6 significant digits
  EXPECT_NEAR(*c->held_out_power_rmse_w, 50.0, 1e-2);  // the other task sits 50 W higher
  ASSERT_EQ(c->held_out_models.size(), 1u);
  EXPECT_NEAR(c->held_out_models[0].power_rmse_w, 10.0, 1e-2);
  EXPECT_NEAR(c->min_batch, 8.0, 1e-9);
  EXPECT_THAT(CalibrateDecode(*rows, "m", "H100", 4, "chat").error().message(),
              HasSubstr("too few ML.ENERGY rows"));
  fs::remove(path);
}

// A trace generated here, independently of the twin: levels per concurrency, first-order lag
// with separate up and down time constants, AR(1) noise.
TEST(FitDynamics, RecoversLagAndNoise) {
  const double dt = 0.1, tau_up = 0.8, tau_down = 0.3, sigma = 4.0, rho = 0.9;
  const std::map<double, double> level = {{8, 300}, {16, 380}, {64, 500}};
  const double schedule[] = {8, 64, 16, 64, 8, 16, 8, 64, 16, 8};
  std::mt19937_64 rng(2);
  std::normal_distribution<double> unit(0.0, 1.0);
  std::vector<double> t, p, c;
  double lagged = 300.0, noise = 0.0;
  for (int seg = 0; seg < 30; ++seg) {
    const double conc = schedule[seg % 10];
    for (int k = 0; k < 300; ++k) {  // 30 s each
      const double target = level.at(conc);
      const double tau = target > lagged ? tau_up : tau_down;
      lagged += (target - lagged) * (1.0 - std::exp(-dt / tau));
      noise = rho * noise + sigma * std::sqrt(1 - rho * rho) * unit(rng);
      t.push_back(static_cast<double>(t.size()) * dt);
      p.push_back(lagged + noise);
      c.push_back(conc);
    }
  }
  auto fit = FitDynamics(t, p, c);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_NEAR(fit->tau_up_s, tau_up, 0.12 * tau_up);
  EXPECT_NEAR(fit->tau_down_s, tau_down, 0.15 * tau_down);
  EXPECT_NEAR(fit->noise_w, sigma, 0.1 * sigma);
  EXPECT_NEAR(fit->noise_rho, rho, 0.05);
  EXPECT_NEAR(fit->sample_interval_s, 0.1, 1e-9);
  // Without changes there is nothing to fit.
  std::vector<double> flat(c.size(), 8.0);
  EXPECT_FALSE(FitDynamics(t, p, flat).ok());
}

}  // namespace
}  // namespace headroom::twin
