// The float32 kernels (both builds) against double-precision references computed here, and the
// float PPO loss and update against the double reference (rl_train/ppo.h).
#include "rl_train/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "rl_train/float_mlp.h"
#include "rl_train/ppo.h"

namespace headroom::rl {
namespace {

std::vector<const kernels::Set*> Sets() { return kernels::Available(); }

TEST(Kernels, BestIsTheWidestBuildTheCpuRuns) {
  const kernels::Set* want = kernels::Avx512() != nullptr ? kernels::Avx512()
                             : kernels::Avx2() != nullptr ? kernels::Avx2()
                                                          : &kernels::Portable();
  if (std::getenv("HEADROOM_KERNELS") == nullptr) {
    EXPECT_EQ(&kernels::Best(), want);
  }
  EXPECT_EQ(kernels::Available().front(), &kernels::Portable());
}

TEST(Kernels, GemmMatchesADoubleProductForEveryShape) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const kernels::Set* k : Sets()) {
    for (int m : {1, 3, 4, 7, 64, 130}) {
      for (int n : {1, 2, 10, 15, 16, 17, 33, 64}) {
        for (int kk : {0, 1, 17, 64, 513}) {
          for (bool acc : {false, true}) {
            // Strides wider than the rows, to check that only the m x n block is touched.
            const int lda = kk + 2, ldb = n == 1 ? 1 : n + 3, ldc = n + 1;
            std::vector<float> a(static_cast<size_t>(m * lda)),
                b(static_cast<size_t>(kk * ldb + 1));
            std::vector<float> c(static_cast<size_t>(m * ldc));
            for (float& v : a) v = normal(rng);
            for (float& v : b) v = normal(rng);
            for (float& v : c) v = normal(rng);
            const std::vector<float> c0 = c;
            k->gemm(m, n, kk, a.data(), lda, b.data(), ldb, c.data(), ldc, acc);
            // A^T B with A stored k x m: the same product from A's transpose.
            std::vector<float> a_t(static_cast<size_t>((kk + 1) * (m + 2)));
            for (int i = 0; i < m; ++i) {
              for (int p = 0; p < kk; ++p) {
                a_t[static_cast<size_t>(p * (m + 2) + i)] = a[static_cast<size_t>(i * lda + p)];
              }
            }
            std::vector<float> ct = c0;
            k->gemm_tn(m, n, kk, a_t.data(), m + 2, b.data(), ldb, ct.data(), ldc, acc);
            for (int i = 0; i < m; ++i) {
              for (int j = 0; j < ldc; ++j) {
                const size_t at = static_cast<size_t>(i * ldc + j);
                if (j >= n) {
                  ASSERT_EQ(c[at], c0[at]) << "outside the block";
                  ASSERT_EQ(ct[at], c0[at]) << "outside the block";
                  continue;
                }
                double want = acc ? c0[at] : 0.0;
                for (int p = 0; p < kk; ++p) {
                  want += static_cast<double>(a[static_cast<size_t>(i * lda + p)]) *
                          b[static_cast<size_t>(p * ldb + j)];
                }
                ASSERT_NEAR(c[at], want, 1e-5 * (1.0 + std::sqrt(kk)) * 4)
                    << k->name << " m" << m << " n" << n << " k" << kk << " at " << i << "," << j;
                ASSERT_NEAR(ct[at], want, 1e-5 * (1.0 + std::sqrt(kk)) * 4)
                    << k->name << " tn m" << m << " n" << n << " k" << kk;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, TanhIsWithinAFewUlpOfTheDoubleTanhEverywhere) {
  for (const kernels::Set* k : Sets()) {
    std::vector<float> z;
    for (float x = -20.0f; x <= 20.0f; x += 0.00037f) z.push_back(x);
    for (float x : {0.0f, 1e-30f, -1e-8f, 1e-4f, 0.3465f, 0.3467f, 8.99f, 9.0f, 100.0f, -1e30f}) {
      z.push_back(x);
    }
    const std::vector<float> x = z;
    const std::vector<float> bias(z.size(), 0.0f);
    k->bias_tanh(1, static_cast<int>(z.size()), z.data(), static_cast<int>(z.size()), bias.data(),
                 true);
    double worst = 0.0;
    for (size_t i = 0; i < z.size(); ++i) {
      const double want = std::tanh(static_cast<double>(x[i]));
      worst = std::max(worst, std::abs(z[i] - want) / std::max(std::abs(want), 1e-30));
    }
    EXPECT_LT(worst, 4e-7) << k->name;  // float's epsilon is 1.19e-7
  }
}

TEST(Kernels, ExpIsWithinAFewUlpOfTheDoubleExpOverItsRange) {
  for (const kernels::Set* k : Sets()) {
    std::vector<float> x;
    for (float v = -40.0f; v <= 40.0f; v += 0.0013f) x.push_back(v);
    x.push_back(-0.0f);
    std::vector<float> y(x.size());
    k->exp(static_cast<long>(x.size()), x.data(), y.data());
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::abs(y[i] - want) / want);
    }
    EXPECT_LT(worst, 4e-7) << k->name;
    float big[3] = {100.0f, -100.0f, 0.0f};
    k->exp(3, big, big);  // in place; clamped at +-40
    EXPECT_NEAR(big[0], std::exp(40.0), 1e-6 * std::exp(40.0));
    EXPECT_GT(big[1], 0.0f);
    EXPECT_LT(big[1], 1e-17f);
    EXPECT_EQ(big[2], 1.0f);
  }
}

TEST(Kernels, BiasWithoutTanhTheTanhGradientAndColumnSums) {
  for (const kernels::Set* k : Sets()) {
    const float m23[6] = {1, 2, 3, 10, 20, 30};
    float sums[3] = {0.5f, 0, 0};
    k->column_sums(2, 2, m23, 3, sums);  // the 2 x 2 block of a 2 x 3 matrix
    EXPECT_EQ(sums[0], 11.5f);
    EXPECT_EQ(sums[1], 22.0f);
    EXPECT_EQ(sums[2], 0.0f);
    std::vector<float> z{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
    const std::vector<float> bias{0.5f, -1, 2, 0, 0, 0, 0, 0, 1};
    k->bias_tanh(2, 9, z.data(), 9, bias.data(), false);
    EXPECT_EQ(z[0], 1.5f);
    EXPECT_EQ(z[8], 10.0f);
    EXPECT_EQ(z[9], 10.5f);
    EXPECT_EQ(z[17], 19.0f);
    std::vector<float> back(11), a(11), delta(11);
    for (int i = 0; i < 11; ++i) {
      back[static_cast<size_t>(i)] = static_cast<float>(i) - 3.0f;
      a[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i) - 0.5f;
    }
    k->tanh_backward(11, back.data(), a.data(), delta.data());
    for (size_t i = 0; i < 11; ++i) {
      EXPECT_NEAR(delta[i], back[i] * (1.0 - static_cast<double>(a[i]) * a[i]), 1e-6);
    }
  }
}

// The fused passes are there for speed only: the update's results (and the policies trained on
// them) must not change, so they give the bits of the gemm followed by the separate pass.
TEST(Kernels, FusedPassesGiveTheBitsOfTheSeparateOnes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const kernels::Set* k : Sets()) {
    for (int m : {1, 5, 8, 17, 130}) {
      for (int n : {1, 3, 15, 16, 17, 22, 33, 64}) {
        for (int kk : {0, 1, 15, 22, 64}) {
          const int lda = kk + 1, ldb = n == 1 ? 1 : n + 2, ldc = n + 3;
          const size_t mn = static_cast<size_t>(m * n);
          std::vector<float> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(kk * ldb + 1));
          std::vector<float> bias(static_cast<size_t>(n)), y(mn);
          for (std::vector<float>* v : {&a, &b, &bias, &y}) {
            for (float& x : *v) x = uniform(rng);
          }
          for (bool tanh : {false, true}) {
            std::vector<float> want(mn), got(static_cast<size_t>(m * ldc), 7.0f);
            k->gemm(m, n, kk, a.data(), lda, b.data(), ldb, want.data(), n, false);
            k->bias_tanh(m, n, want.data(), n, bias.data(), tanh);
            k->gemm_bias_tanh(m, n, kk, a.data(), lda, b.data(), ldb, got.data(), ldc, bias.data(),
                              tanh);
            for (int i = 0; i < m; ++i) {
              for (int j = 0; j < ldc; ++j) {
                const float g = got[static_cast<size_t>(i * ldc + j)];
                ASSERT_EQ(g, j < n ? want[static_cast<size_t>(i * n + j)] : 7.0f)
                    << k->name << " m" << m << " n" << n << " k" << kk << " tanh " << tanh << " at "
                    << i << "," << j;
              }
            }
          }
          std::vector<float> back(mn), want(mn), got(static_cast<size_t>(m * ldc), 7.0f);
          k->gemm(m, n, kk, a.data(), lda, b.data(), ldb, back.data(), n, false);
          k->tanh_backward(static_cast<long>(mn), back.data(), y.data(), want.data());
          k->gemm_tanh_backward(m, n, kk, a.data(), lda, b.data(), ldb, got.data(), ldc, y.data(),
                                n);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < ldc; ++j) {
              ASSERT_EQ(got[static_cast<size_t>(i * ldc + j)],
                        j < n ? want[static_cast<size_t>(i * n + j)] : 7.0f)
                  << k->name << " tanh_backward m" << m << " n" << n << " k" << kk;
            }
          }
        }
      }
    }
  }
}

// Column sums are taken row by row, in order, whatever the width: the same bits as that loop.
TEST(Kernels, ColumnSumsAddRowByRowAtEveryWidth) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const kernels::Set* k : Sets()) {
    for (int m : {1, 2, 37, 512}) {
      for (int n : {1, 3, 15, 16, 22, 64, 70}) {
        for (int lda : {n, n + 5}) {
          std::vector<float> a(static_cast<size_t>((m - 1) * lda + n));
          for (float& x : a) x = uniform(rng);
          std::vector<float> got(static_cast<size_t>(n) + 1, 0.25f), want = got;
          k->column_sums(m, n, a.data(), lda, got.data());
          for (int j = 0; j < n; ++j) {
            for (int i = 0; i < m; ++i)
              want[static_cast<size_t>(j)] += a[static_cast<size_t>(i * lda + j)];
          }
          for (size_t j = 0; j <= static_cast<size_t>(n); ++j) {
            ASSERT_EQ(got[j], want[j]) << k->name << " m" << m << " n" << n << " lda" << lda;
          }
        }
      }
    }
  }
}

// A minibatch with probabilities far from uniform and half the ratios outside the clip range.
struct Fixture {
  ActorCritic ac{6, {5, 3}, {32, 16}, 4};
  Batch b;
  std::vector<Eigen::Index> index;
  Eigen::VectorXd adv;
  explicit Fixture(Eigen::Index m) {
    std::mt19937_64 rng(5);
    std::normal_distribution<double> n(0.0, 1.0);
    Eigen::VectorXd pa = ac.actor().Parameters();
    for (Eigen::Index i = 0; i < pa.size(); ++i) pa(i) += 0.3 * n(rng);
    ac.actor().SetParameters(pa);
    b.obs.resize(6, m);
    b.actions.resize(2, m);
    b.logp_old.resize(m);
    b.returns.resize(m);
    b.advantages.resize(m);
    b.values_old.resize(m);
    for (Eigen::Index i = 0; i < b.obs.size(); ++i) b.obs.data()[i] = n(rng);
    Mlp::Cache c;
    ac.actor().Forward(b.obs, &c);
    for (Eigen::Index i = 0; i < m; ++i) {
      b.actions(0, i) = static_cast<int>(i % 5);
      b.actions(1, i) = static_cast<int>(i % 3);
      const int a[2] = {b.actions(0, i), b.actions(1, i)};
      const double shift = i % 2 == 0 ? 0.05 * n(rng) : (i % 4 == 1 ? 0.7 : -0.7);
      b.logp_old(i) = LogProb(ac.heads(), c.a.back().col(i).data(), a) + shift;
      b.returns(i) = n(rng);
      b.advantages(i) = n(rng);
      b.values_old(i) = 0.0;
    }
    index.resize(static_cast<size_t>(m));
    std::iota(index.begin(), index.end(), 0);
    adv = b.advantages;
  }
};

TEST(PpoLossF, LossAndGradientMatchTheDoubleReference) {
  const Eigen::Index m = 37;
  Fixture f(m);
  PpoConfig cfg;
  cfg.entropy_coef = 0.05;
  Eigen::VectorXd ga = Eigen::VectorXd::Zero(f.ac.actor().ParameterCount());
  Eigen::VectorXd gc = Eigen::VectorXd::Zero(f.ac.critic().ParameterCount());
  const LossParts want = PpoLoss(f.ac, f.b, f.index, f.adv, cfg, &ga, &gc);
  std::vector<float> obs, logp_old, advs, rets;
  std::vector<int> acts;
  for (Eigen::Index i = 0; i < m; ++i) {
    for (int d = 0; d < 6; ++d) obs.push_back(static_cast<float>(f.b.obs(d, i)));
    acts.push_back(f.b.actions(0, i));
    acts.push_back(f.b.actions(1, i));
    logp_old.push_back(static_cast<float>(f.b.logp_old(i)));
    advs.push_back(static_cast<float>(f.adv(i)));
    rets.push_back(static_cast<float>(f.b.returns(i)));
  }
  MinibatchF view{static_cast<int>(m), obs.data(),  acts.data(),
                  logp_old.data(),     advs.data(), rets.data()};
  for (const kernels::Set* k : Sets()) {
    const FloatMlp actor(f.ac.actor()), critic(f.ac.critic());
    std::vector<float> fa(actor.params().size(), 0.0f), fc(critic.params().size(), 0.0f);
    PpoWork work;
    const LossParts got =
        PpoLossF(*k, actor, critic, f.ac.heads(), view, cfg, &work, fa.data(), fc.data());
    EXPECT_NEAR(got.total, want.total, 1e-5) << k->name;
    EXPECT_NEAR(got.entropy, want.entropy, 1e-5) << k->name;
    EXPECT_NEAR(got.approx_kl, want.approx_kl, 1e-5) << k->name;
    EXPECT_EQ(got.clip_fraction, want.clip_fraction) << k->name;
    const double scale_a = ga.cwiseAbs().maxCoeff(), scale_c = gc.cwiseAbs().maxCoeff();
    for (Eigen::Index i = 0; i < ga.size(); ++i) {
      ASSERT_NEAR(fa[static_cast<size_t>(i)], ga(i), 1e-5 * scale_a) << k->name << " actor " << i;
    }
    for (Eigen::Index i = 0; i < gc.size(); ++i) {
      ASSERT_NEAR(fc[static_cast<size_t>(i)], gc(i), 1e-5 * scale_c) << k->name << " critic " << i;
    }
  }
}

TEST(PpoTrainer, EveryKernelBuildTakesTheSameUpdate) {
  if (Sets().size() < 2) GTEST_SKIP() << "this CPU runs the portable build only";
  PpoConfig cfg;
  cfg.minibatch = 64;
  cfg.epochs = 2;
  Fixture f0(256);
  const Eigen::VectorXd before = f0.ac.actor().Parameters();
  PpoTrainer portable(&f0.ac, cfg, 9, kernels::Portable());
  const UpdateStats s0 = portable.Update(f0.b);
  EXPECT_EQ(s0.minibatches, 8);
  const Eigen::VectorXd p0 = f0.ac.actor().Parameters();
  // 8 Adam steps move a parameter by at most 8 x lr = 2.4e-3; the builds agree far closer.
  EXPECT_GT((p0 - before).cwiseAbs().maxCoeff(), 1e-3);
  for (size_t i = 1; i < Sets().size(); ++i) {
    Fixture f1(256);
    PpoTrainer other(&f1.ac, cfg, 9, *Sets()[i]);
    const UpdateStats s1 = other.Update(f1.b);
    EXPECT_NEAR(s0.policy_loss, s1.policy_loss, 1e-5) << Sets()[i]->name;
    EXPECT_LT((p0 - f1.ac.actor().Parameters()).cwiseAbs().maxCoeff(), 2e-5) << Sets()[i]->name;
    EXPECT_LT((f0.ac.critic().Parameters() - f1.ac.critic().Parameters()).cwiseAbs().maxCoeff(),
              2e-5)
        << Sets()[i]->name;
  }
}

}  // namespace
}  // namespace headroom::rl
