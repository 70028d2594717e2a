// PPO-clip (Schulman et al. 2017) for an actor-critic with factorised categorical action heads.
//
// The actor is an MLP whose outputs are the logits of every head side by side; the critic a
// separate MLP with one output. Loss per minibatch of m samples:
//   L = -1/m sum min(rho A, clip(rho, 1-eps, 1+eps) A)          rho = exp(logp - logp_old)
//       + vf/2 * 1/m sum (V - R)^2 - ent * 1/m sum_heads H
// with gradients derived by hand (d logp / d z = onehot(a) - softmax(z);
// dH / dz_j = -p_j (log p_j + H)) and checked against finite differences in the tests. Adam,
// global gradient-norm clipping, advantage normalisation per minibatch. Deterministic for a seed
// and a kernel set.
//
// PpoLoss (doubles, Eigen) is the reference; the update runs PpoLossF, the same loss in float32
// on rl_train/kernels.h (AVX2/FMA where the CPU has them), tested against the reference.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <random>
#include <vector>

#include "rl/actor_critic.h"
#include "rl/mlp.h"
#include "rl_train/float_mlp.h"
#include "rl_train/kernels.h"

namespace headroom::rl {

struct PpoConfig {
  double learning_rate = 3e-4;
  double clip = 0.2;
  double entropy_coef = 0.01;
  double value_coef = 0.5;
  double max_grad_norm = 0.5;
  int epochs = 10;
  int minibatch = 512;
  double adam_eps = 1e-5;
  bool normalize_advantages = true;
};

// A batch of n transitions; observations already normalised.
struct Batch {
  Eigen::MatrixXd obs;      // dims x n
  Eigen::MatrixXi actions;  // heads x n
  Eigen::VectorXd logp_old;
  Eigen::VectorXd advantages;
  Eigen::VectorXd returns;
  Eigen::VectorXd values_old;
  Eigen::Index size() const { return obs.cols(); }
};

struct LossParts {
  double policy = 0.0;
  double value = 0.0;
  double entropy = 0.0;
  double approx_kl = 0.0;  // mean (rho - 1) - log rho
  double clip_fraction = 0.0;
  double total = 0.0;
};

// The loss on the samples `index` of `batch` and its gradient (added into grad_actor and
// grad_critic, laid out like Mlp::Parameters()). Advantages are used as given (normalise before).
LossParts PpoLoss(const ActorCritic& ac, const Batch& batch, const std::vector<Eigen::Index>& index,
                  const Eigen::VectorXd& advantages, const PpoConfig& config,
                  Eigen::VectorXd* grad_actor, Eigen::VectorXd* grad_critic);

// One minibatch in float32, samples as rows: obs m x dims, actions m x heads.
struct MinibatchF {
  int m = 0;
  const float* obs = nullptr;
  const int* actions = nullptr;
  const float* logp_old = nullptr;
  const float* advantages = nullptr;  // used as given (normalise before)
  const float* returns = nullptr;
};

// Scratch of PpoLossF, reused between minibatches.
struct PpoWork {
  FloatMlp::Work actor;
  FloatMlp::Work critic;
  std::vector<float> dz;                // m x logits
  std::vector<float> dv;                // m
  std::vector<float> shifted, p;        // m x logits: logits less their head's max; softmax
  std::vector<float> entropy;           // m x heads
  std::vector<float> log_ratio, ratio;  // m
};

// PpoLoss in float32 on `k`'s kernels; gradients added into grad_actor / grad_critic (the
// FloatMlps' params layout).
LossParts PpoLossF(const kernels::Set& k, const FloatMlp& actor, const FloatMlp& critic,
                   const std::vector<int>& heads, const MinibatchF& batch, const PpoConfig& config,
                   PpoWork* work, float* grad_actor, float* grad_critic);

class Adam {
 public:
  Adam() = default;
  Adam(Eigen::Index n, double eps)
      : m_(Eigen::VectorXf::Zero(n)), v_(Eigen::VectorXf::Zero(n)), eps_(static_cast<float>(eps)) {}
  // params -= lr * mhat / (sqrt(vhat) + eps)
  void Step(const Eigen::VectorXf& grad, double learning_rate, Eigen::Ref<Eigen::VectorXf> params);

 private:
  Eigen::VectorXf m_;
  Eigen::VectorXf v_;
  float eps_ = 1e-8f;
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  int t_ = 0;
};

struct UpdateStats {
  double policy_loss = 0.0;
  double value_loss = 0.0;
  double entropy = 0.0;
  double approx_kl = 0.0;
  double clip_fraction = 0.0;
  double explained_variance = 0.0;
  int minibatches = 0;
};

class PpoTrainer {
 public:
  PpoTrainer(ActorCritic* ac, PpoConfig config, uint64_t seed,
             const kernels::Set& k = kernels::Best());
  // `epochs` passes over the batch in shuffled minibatches; the actor-critic's parameters are
  // read at the start and written back at the end.
  UpdateStats Update(const Batch& batch);
  PpoConfig& config() { return config_; }
  const kernels::Set& kernel_set() const { return *kernels_; }

 private:
  ActorCritic* ac_;
  PpoConfig config_;
  std::mt19937_64 rng_;
  const kernels::Set* kernels_;
  Adam adam_actor_;
  Adam adam_critic_;
  // The batch in float rows, the minibatch gathered from it, and the loss's scratch: kept
  // between updates so that an update allocates nothing after the first.
  FloatMlp actor_f_, critic_f_;
  std::vector<float> obs_, logp_old_, advantages_, returns_;
  std::vector<int> actions_;
  std::vector<float> mb_obs_, mb_logp_old_, mb_advantages_, mb_returns_;
  std::vector<int> mb_actions_;
  PpoWork work_;
};

// 1 - Var(returns - values) / Var(returns); 0 when the returns do not vary.
double ExplainedVariance(const Eigen::VectorXd& values, const Eigen::VectorXd& returns);

}  // namespace headroom::rl
