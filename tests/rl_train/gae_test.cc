#include "rl_train/gae.h"

#include <gtest/gtest.h>

#include <vector>

namespace headroom::rl {
namespace {

// Worked by hand: gamma 0.9, lambda 0.8 (gamma lambda = 0.72).
//   delta2 = 2 + 0.9 x 2.0 - 1.5 = 2.3                     A2 = 2.3
//   delta1 = 0 + 0.9 x 1.5 - 1.0 = 0.35                    A1 = 0.35 + 0.72 x 2.3 = 2.006
//   delta0 = 1 + 0.9 x 1.0 - 0.5 = 1.4                     A0 = 1.4 + 0.72 x 2.006 = 2.84432
TEST(Gae, HandComputedWithBootstrapAtTheEnd) {
  const std::vector<double> r{1.0, 0.0, 2.0}, v{0.5, 1.0, 1.5}, next{0.0, 0.0, 2.0};
  const std::vector<unsigned char> cut{0, 0, 0};
  std::vector<double> a(3), ret(3);
  Gae(r, v, next, cut, 0.9, 0.8, a, ret);
  EXPECT_NEAR(a[2], 2.3, 1e-12);
  EXPECT_NEAR(a[1], 2.006, 1e-12);
  EXPECT_NEAR(a[0], 2.84432, 1e-12);
  EXPECT_NEAR(ret[0], 2.84432 + 0.5, 1e-12);
  EXPECT_NEAR(ret[2], 2.3 + 1.5, 1e-12);
}

// A cut after step 0 bootstraps V = 3.0 there and stops the recursion:
//   delta0 = 1 + 0.9 x 3.0 - 0.5 = 3.2 = A0.
TEST(Gae, CutBootstrapsAndDoesNotCarryAcross) {
  const std::vector<double> r{1.0, 0.0, 2.0}, v{0.5, 1.0, 1.5}, next{3.0, 0.0, 2.0};
  const std::vector<unsigned char> cut{1, 0, 0};
  std::vector<double> a(3), ret(3);
  Gae(r, v, next, cut, 0.9, 0.8, a, ret);
  EXPECT_NEAR(a[0], 3.2, 1e-12);
  EXPECT_NEAR(a[1], 2.006, 1e-12);
}

}  // namespace
}  // namespace headroom::rl
