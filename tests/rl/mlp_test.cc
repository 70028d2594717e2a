#include "rl/mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "rl/normalizer.h"

namespace headroom::rl {
namespace {

TEST(Mlp, ForwardMatchesHandComputation) {
  Mlp m({2, 2, 1});
  m.weights()[0] << 1.0, -1.0, 0.5, 2.0;
  m.biases()[0] << 0.1, -0.2;
  m.weights()[1] << 3.0, -1.0;
  m.biases()[1] << 0.5;
  Eigen::MatrixXd x(2, 1);
  x << 0.3, 0.7;
  Mlp::Cache c;
  m.Forward(x, &c);
  // h = tanh([0.3 - 0.7 + 0.1, 0.15 + 1.4 - 0.2]) = tanh([-0.3, 1.35])
  const double y = 3.0 * std::tanh(-0.3) - std::tanh(1.35) + 0.5;
  EXPECT_NEAR(c.a.back()(0, 0), y, 1e-12);
  Eigen::VectorXd one, out;
  std::vector<Eigen::VectorXd> scratch;
  one = x.col(0);
  m.ForwardOne(one, &out, &scratch);
  EXPECT_NEAR(out(0), y, 1e-12);
}

TEST(Mlp, BackwardMatchesFiniteDifferences) {
  Mlp m({3, 5, 4, 2});
  std::mt19937_64 rng(7);
  m.InitOrthogonal(rng, std::sqrt(2.0), 1.0);
  std::normal_distribution<double> n(0.0, 1.0);
  Eigen::VectorXd p = m.Parameters();
  for (Eigen::Index i = 0; i < p.size(); ++i) p(i) += 0.1 * n(rng);  // non-zero biases too
  m.SetParameters(p);
  Eigen::MatrixXd x(3, 6), w(2, 6);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = n(rng);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = n(rng);
  // Loss = sum(w .* Y): dL/dY = w.
  auto loss = [&](const Eigen::VectorXd& params) {
    Mlp copy = m;
    copy.SetParameters(params);
    Mlp::Cache c;
    copy.Forward(x, &c);
    return (c.a.back().array() * w.array()).sum();
  };
  Mlp::Cache c;
  m.Forward(x, &c);
  Eigen::VectorXd g = Eigen::VectorXd::Zero(m.ParameterCount());
  m.Backward(c, w, &g);
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    Eigen::VectorXd hi = p, lo = p;
    hi(i) += 1e-6;
    lo(i) -= 1e-6;
    const double fd = (loss(hi) - loss(lo)) / 2e-6;
    EXPECT_NEAR(g(i), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "parameter " << i;
  }
}

TEST(Mlp, OrthogonalInitHasOrthonormalRowsOrColumns) {
  Mlp m({6, 4, 8});
  std::mt19937_64 rng(3);
  m.InitOrthogonal(rng, 1.0, 1.0);
  const Eigen::MatrixXd& w0 = m.weights()[0];  // 4 x 6: orthonormal rows
  EXPECT_TRUE((w0 * w0.transpose()).isApprox(Eigen::MatrixXd::Identity(4, 4), 1e-10));
  const Eigen::MatrixXd& w1 = m.weights()[1];  // 8 x 4: orthonormal columns
  EXPECT_TRUE((w1.transpose() * w1).isApprox(Eigen::MatrixXd::Identity(4, 4), 1e-10));
}

TEST(Normalizer, TwoBatchesGiveTheMomentsOfTheirUnion) {
  Normalizer n(1);
  Eigen::MatrixXd a(1, 3), b(1, 2);
  a << 1.0, 2.0, 3.0;
  b << 10.0, 20.0;
  n.Update(a);
  n.Update(b);
  // Union {1, 2, 3, 10, 20}: mean 7.2, population variance (sum x^2)/5 - 7.2^2 = 102.8 - 51.84.
  EXPECT_NEAR(n.mean()(0), 7.2, 1e-3);
  EXPECT_NEAR(n.var()(0), 50.96, 1e-2);  // the 1e-4 prior count moves it by ~1e-4 relative
  Eigen::VectorXd x(1);
  x << 7.2;
  EXPECT_NEAR(n.Apply(x)(0), 0.0, 1e-3);
  x << 1e9;
  EXPECT_EQ(n.Apply(x)(0), Normalizer::kClip);
}

}  // namespace
}  // namespace headroom::rl
