#include "rl/ppo.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

namespace headroom::rl {

LossParts PpoLoss(const ActorCritic& ac, const Batch& batch, const std::vector<Eigen::Index>& index,
                  const Eigen::VectorXd& advantages, const PpoConfig& config,
                  Eigen::VectorXd* grad_actor, Eigen::VectorXd* grad_critic) {
  const Eigen::Index m = static_cast<Eigen::Index>(index.size());
  const std::vector<int>& heads = ac.heads();
  Eigen::MatrixXd x(batch.obs.rows(), m);
  for (Eigen::Index i = 0; i < m; ++i) x.col(i) = batch.obs.col(index[i]);
  Mlp::Cache actor_cache;
  Mlp::Cache critic_cache;
  ac.actor().Forward(x, &actor_cache);
  ac.critic().Forward(x, &critic_cache);
  const Eigen::MatrixXd& logits = actor_cache.a.back();
  const Eigen::MatrixXd& values = critic_cache.a.back();

  Eigen::MatrixXd dz = Eigen::MatrixXd::Zero(logits.rows(), m);
  Eigen::MatrixXd dv(1, m);
  LossParts parts;
  const double inv_m = 1.0 / static_cast<double>(m);
  double logp_buf[64];
  for (Eigen::Index i = 0; i < m; ++i) {
    const Eigen::Index s = index[i];
    const double adv = advantages(i);
    double logp = 0.0;
    Eigen::Index offset = 0;
    for (size_t h = 0; h < heads.size(); ++h) {
      LogSoftmax(logits.col(i).data() + offset, heads[h], logp_buf);
      logp += logp_buf[batch.actions(static_cast<Eigen::Index>(h), s)];
      offset += heads[h];
    }
    const double log_ratio = logp - batch.logp_old(s);
    const double ratio = std::exp(log_ratio);
    const double unclipped = ratio * adv;
    const double clipped = std::clamp(ratio, 1.0 - config.clip, 1.0 + config.clip) * adv;
    parts.policy += -std::min(unclipped, clipped) * inv_m;
    parts.approx_kl += ((ratio - 1.0) - log_ratio) * inv_m;
    const bool clip_active =
        (adv >= 0.0 && ratio > 1.0 + config.clip) || (adv < 0.0 && ratio < 1.0 - config.clip);
    if (std::abs(ratio - 1.0) > config.clip) parts.clip_fraction += inv_m;
    const double dlogp = clip_active ? 0.0 : -ratio * adv * inv_m;

    offset = 0;
    for (size_t h = 0; h < heads.size(); ++h) {
      const int k = heads[h];
      LogSoftmax(logits.col(i).data() + offset, k, logp_buf);
      double entropy = 0.0;
      for (int j = 0; j < k; ++j) entropy -= std::exp(logp_buf[j]) * logp_buf[j];
      parts.entropy += entropy * inv_m;
      const int a = batch.actions(static_cast<Eigen::Index>(h), s);
      for (int j = 0; j < k; ++j) {
        const double p = std::exp(logp_buf[j]);
        // Policy term: dlogp * (onehot - p). Entropy term: -ent * dH/dz = ent p (log p + H).
        const double d_policy = dlogp * ((j == a ? 1.0 : 0.0) - p);
        const double d_entropy = config.entropy_coef * inv_m * p * (logp_buf[j] + entropy);
        dz(offset + j, i) = d_policy + d_entropy;
      }
      offset += k;
    }
    const double err = values(0, i) - batch.returns(s);
    parts.value += 0.5 * err * err * inv_m;
    dv(0, i) = config.value_coef * err * inv_m;
  }
  parts.total =
      parts.policy + config.value_coef * parts.value - config.entropy_coef * parts.entropy;
  ac.actor().Backward(actor_cache, dz, grad_actor);
  ac.critic().Backward(critic_cache, dv, grad_critic);
  return parts;
}

void Adam::Step(const Eigen::VectorXd& grad, double learning_rate, Eigen::VectorXd* params) {
  ++t_;
  m_ = beta1_ * m_ + (1.0 - beta1_) * grad;
  v_ = beta2_ * v_ + (1.0 - beta2_) * grad.array().square().matrix();
  const double c1 = 1.0 - std::pow(beta1_, t_);
  const double c2 = 1.0 - std::pow(beta2_, t_);
  *params -= (learning_rate * (m_.array() / c1) / ((v_.array() / c2).sqrt() + eps_)).matrix();
}

PpoTrainer::PpoTrainer(ActorCritic* ac, PpoConfig config, uint64_t seed)
    : ac_(ac),
      config_(config),
      rng_(seed),
      adam_actor_(ac->actor().ParameterCount(), config.adam_eps),
      adam_critic_(ac->critic().ParameterCount(), config.adam_eps) {}

UpdateStats PpoTrainer::Update(const Batch& batch) {
  const Eigen::Index n = batch.size();
  std::vector<Eigen::Index> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  UpdateStats stats;
  Eigen::VectorXd pa = ac_->actor().Parameters();
  Eigen::VectorXd pc = ac_->critic().Parameters();
  Eigen::VectorXd ga(pa.size());
  Eigen::VectorXd gc(pc.size());
  const Eigen::Index mb = std::min<Eigen::Index>(config_.minibatch, n);
  for (int epoch = 0; epoch < config_.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng_);
    for (Eigen::Index start = 0; start + mb <= n; start += mb) {
      std::vector<Eigen::Index> index(order.begin() + start, order.begin() + start + mb);
      Eigen::VectorXd adv(mb);
      for (Eigen::Index i = 0; i < mb; ++i) adv(i) = batch.advantages(index[i]);
      if (config_.normalize_advantages && mb > 1) {
        const double mean = adv.mean();
        const double sd =
            std::sqrt((adv.array() - mean).square().sum() / static_cast<double>(mb - 1));
        adv = (adv.array() - mean) / (sd + 1e-8);
      }
      ga.setZero();
      gc.setZero();
      const LossParts parts = PpoLoss(*ac_, batch, index, adv, config_, &ga, &gc);
      const double norm = std::sqrt(ga.squaredNorm() + gc.squaredNorm());
      if (norm > config_.max_grad_norm) {
        const double scale = config_.max_grad_norm / (norm + 1e-6);
        ga *= scale;
        gc *= scale;
      }
      adam_actor_.Step(ga, config_.learning_rate, &pa);
      adam_critic_.Step(gc, config_.learning_rate, &pc);
      ac_->actor().SetParameters(pa);
      ac_->critic().SetParameters(pc);
      stats.policy_loss += parts.policy;
      stats.value_loss += parts.value;
      stats.entropy += parts.entropy;
      stats.approx_kl += parts.approx_kl;
      stats.clip_fraction += parts.clip_fraction;
      ++stats.minibatches;
    }
  }
  if (stats.minibatches > 0) {
    const double k = 1.0 / stats.minibatches;
    stats.policy_loss *= k;
    stats.value_loss *= k;
    stats.entropy *= k;
    stats.approx_kl *= k;
    stats.clip_fraction *= k;
  }
  stats.explained_variance = ExplainedVariance(batch.values_old, batch.returns);
  return stats;
}

double ExplainedVariance(const Eigen::VectorXd& values, const Eigen::VectorXd& returns) {
  const Eigen::Index n = returns.size();
  if (n < 2) return 0.0;
  const double mean_r = returns.mean();
  const double var_r = (returns.array() - mean_r).square().sum() / static_cast<double>(n);
  if (var_r <= 0.0) return 0.0;
  const Eigen::VectorXd d = returns - values;
  const double mean_d = d.mean();
  const double var_d = (d.array() - mean_d).square().sum() / static_cast<double>(n);
  return 1.0 - var_d / var_r;
}

}  // namespace headroom::rl
