#include "rl_train/ppo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

namespace headroom::rl {
namespace {

TEST(Categorical, LogProbAndArgmaxByHand) {
  const std::vector<int> heads{3, 2};
  const double logits[5] = {0.0, std::log(2.0), 0.0, 1.0, 1.0};
  // Head 0: softmax (1, 2, 1) / 4; head 1: (1/2, 1/2).
  const int actions[2] = {1, 0};
  EXPECT_NEAR(LogProb(heads, logits, actions), std::log(0.5) + std::log(0.5), 1e-12);
  int best[2];
  Argmax(heads, logits, best);
  EXPECT_EQ(best[0], 1);
  EXPECT_EQ(best[1], 0);
}

TEST(Categorical, SampleFrequenciesFollowTheProbabilities) {
  const std::vector<int> heads{3};
  const double logits[3] = {0.0, std::log(2.0), std::log(5.0)};  // (1, 2, 5) / 8
  std::mt19937_64 rng(11);
  int counts[3] = {0, 0, 0};
  const int n = 80000;
  for (int i = 0; i < n; ++i) {
    int a;
    const double lp = Sample(heads, logits, rng, &a);
    EXPECT_NEAR(lp, LogProb(heads, logits, &a), 1e-12);
    ++counts[a];
  }
  EXPECT_NEAR(counts[0] / double(n), 1.0 / 8, 0.006);
  EXPECT_NEAR(counts[2] / double(n), 5.0 / 8, 0.006);
}

TEST(PpoLoss, GradientMatchesFiniteDifferences) {
  ActorCritic ac(3, {3, 2}, {5}, 4);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> n(0.0, 1.0);
  // Larger output weights than the 0.01 init so that probabilities are far from uniform.
  Eigen::VectorXd pa = ac.actor().Parameters();
  for (Eigen::Index i = 0; i < pa.size(); ++i) pa(i) += 0.5 * n(rng);
  ac.actor().SetParameters(pa);
  const Eigen::Index m = 8;
  Batch b;
  b.obs.resize(3, m);
  b.actions.resize(2, m);
  b.logp_old.resize(m);
  b.returns.resize(m);
  b.advantages.resize(m);
  b.values_old.resize(m);
  Mlp::Cache c;
  for (Eigen::Index i = 0; i < b.obs.size(); ++i) b.obs.data()[i] = n(rng);
  ac.actor().Forward(b.obs, &c);
  for (Eigen::Index i = 0; i < m; ++i) {
    b.actions(0, i) = static_cast<int>(i % 3);
    b.actions(1, i) = static_cast<int>(i % 2);
    const int a[2] = {b.actions(0, i), b.actions(1, i)};
    // Half of the ratios inside the clip range, half far outside (zero policy gradient there).
    const double shift = i % 2 == 0 ? 0.05 * n(rng) : (i % 4 == 1 ? 0.7 : -0.7);
    b.logp_old(i) = LogProb(ac.heads(), c.a.back().col(i).data(), a) + shift;
    b.returns(i) = n(rng);
    b.advantages(i) = n(rng);
  }
  std::vector<Eigen::Index> index(static_cast<size_t>(m));
  std::iota(index.begin(), index.end(), 0);
  PpoConfig cfg;
  cfg.entropy_coef = 0.05;
  const Eigen::VectorXd adv = b.advantages;
  Eigen::VectorXd ga = Eigen::VectorXd::Zero(ac.actor().ParameterCount());
  Eigen::VectorXd gc = Eigen::VectorXd::Zero(ac.critic().ParameterCount());
  PpoLoss(ac, b, index, adv, cfg, &ga, &gc);
  auto total = [&](const ActorCritic& net) {
    Eigen::VectorXd a0 = Eigen::VectorXd::Zero(net.actor().ParameterCount());
    Eigen::VectorXd c0 = Eigen::VectorXd::Zero(net.critic().ParameterCount());
    return PpoLoss(net, b, index, adv, cfg, &a0, &c0).total;
  };
  const double eps = 1e-6;
  for (Eigen::Index i = 0; i < pa.size(); ++i) {
    ActorCritic hi = ac, lo = ac;
    Eigen::VectorXd p = pa;
    p(i) += eps;
    hi.actor().SetParameters(p);
    p(i) -= 2 * eps;
    lo.actor().SetParameters(p);
    const double fd = (total(hi) - total(lo)) / (2 * eps);
    EXPECT_NEAR(ga(i), fd, 1e-6) << "actor parameter " << i;
  }
  const Eigen::VectorXd pc = ac.critic().Parameters();
  for (Eigen::Index i = 0; i < pc.size(); ++i) {
    ActorCritic hi = ac, lo = ac;
    Eigen::VectorXd p = pc;
    p(i) += eps;
    hi.critic().SetParameters(p);
    p(i) -= 2 * eps;
    lo.critic().SetParameters(p);
    const double fd = (total(hi) - total(lo)) / (2 * eps);
    EXPECT_NEAR(gc(i), fd, 1e-6) << "critic parameter " << i;
  }
}

TEST(Adam, FirstStepMovesEachParameterByTheLearningRate) {
  // With bias correction the first step is lr x g / (|g| + eps) ~ lr x sign(g).
  Adam adam(2, 1e-8);
  Eigen::VectorXf p(2), g(2);
  p << 1.0, 1.0;
  g << 4.0, -0.5;
  adam.Step(g, 0.1, p);
  EXPECT_NEAR(p(0), 0.9, 1e-6);
  EXPECT_NEAR(p(1), 1.1, 1e-6);
}

TEST(ExplainedVariance, ByHand) {
  Eigen::VectorXd v(4), r(4);
  r << 1.0, 2.0, 3.0, 4.0;  // variance 1.25
  v << 1.0, 2.0, 3.0, 5.0;  // residuals 0 0 0 -1: variance 0.1875
  EXPECT_NEAR(ExplainedVariance(v, r), 1.0 - 0.1875 / 1.25, 1e-12);
}

}  // namespace
}  // namespace headroom::rl
