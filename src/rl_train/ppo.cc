#include "rl_train/ppo.h"

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

LossParts PpoLossF(const kernels::Set& k, const FloatMlp& actor, const FloatMlp& critic,
                   const std::vector<int>& heads, const MinibatchF& batch, const PpoConfig& config,
                   PpoWork* work, float* grad_actor, float* grad_critic) {
  const int m = batch.m;
  const size_t mz = static_cast<size_t>(m);
  const int nh = static_cast<int>(heads.size());
  const int nl = actor.outputs();
  actor.Forward(k, batch.obs, m, &work->actor);
  critic.Forward(k, batch.obs, m, &work->critic);
  const std::vector<float>& logits = work->actor.a.back();
  const std::vector<float>& values = work->critic.a.back();
  work->dz.resize(mz * static_cast<size_t>(nl));
  work->dv.resize(mz);
  // The sums in locals, not in the returned struct, which the compiler must keep in memory
  // across the calls to log; the same additions in the same order.
  double policy = 0.0, value = 0.0, entropy_sum = 0.0, approx_kl = 0.0, clip_fraction = 0.0;
  const double inv_m = 1.0 / static_cast<double>(m);
  const float inv_mf = static_cast<float>(inv_m);
  const float entropy_scale = static_cast<float>(config.entropy_coef) * inv_mf;
  const float lo = static_cast<float>(1.0 - config.clip);
  const float hi = static_cast<float>(1.0 + config.clip);
  // Every head's log-softmax, probabilities and entropy, for all samples: the logits shifted by
  // their head's maximum, exponentiated in one vectorised pass, then normalised.
  const size_t cells = mz * static_cast<size_t>(nl);
  work->shifted.resize(cells);
  work->p.resize(cells);
  work->entropy.resize(mz * static_cast<size_t>(nh));
  work->log_ratio.resize(mz);
  work->ratio.resize(mz);
  for (size_t i = 0; i < mz; ++i) {
    const float* z = logits.data() + i * static_cast<size_t>(nl);
    float* sh = work->shifted.data() + i * static_cast<size_t>(nl);
    int offset = 0;
    for (int h = 0; h < nh; ++h) {
      const int kk = heads[static_cast<size_t>(h)];
      float zmax = z[offset];
      for (int j = 1; j < kk; ++j) zmax = std::max(zmax, z[offset + j]);
      for (int j = 0; j < kk; ++j) sh[offset + j] = z[offset + j] - zmax;
      offset += kk;
    }
  }
  k.exp(static_cast<long>(cells), work->shifted.data(), work->p.data());
  for (size_t i = 0; i < mz; ++i) {
    float* sh = work->shifted.data() + i * static_cast<size_t>(nl);  // becomes log p
    float* pr = work->p.data() + i * static_cast<size_t>(nl);
    const int* act = batch.actions + i * static_cast<size_t>(nh);
    float logp = 0.0f;
    int offset = 0;
    for (int h = 0; h < nh; ++h) {
      const int kk = heads[static_cast<size_t>(h)];
      float sum = 0.0f;
      for (int j = 0; j < kk; ++j) sum += pr[offset + j];
      const float log_sum = std::log(sum);
      const float inv_sum = 1.0f / sum;
      float entropy = 0.0f;
      for (int j = 0; j < kk; ++j) {
        sh[offset + j] -= log_sum;
        pr[offset + j] *= inv_sum;
        entropy -= pr[offset + j] * sh[offset + j];
      }
      work->entropy[i * static_cast<size_t>(nh) + static_cast<size_t>(h)] = entropy;
      entropy_sum += entropy * inv_m;
      logp += sh[offset + act[h]];
      offset += kk;
    }
    work->log_ratio[i] = logp - batch.logp_old[i];
  }
  k.exp(static_cast<long>(mz), work->log_ratio.data(), work->ratio.data());
  for (size_t i = 0; i < mz; ++i) {
    const float* logp_j = work->shifted.data() + i * static_cast<size_t>(nl);
    const float* pr = work->p.data() + i * static_cast<size_t>(nl);
    const int* act = batch.actions + i * static_cast<size_t>(nh);
    const float adv = batch.advantages[i];
    const float log_ratio = work->log_ratio[i];
    const float ratio = work->ratio[i];
    const float unclipped = ratio * adv;
    const float clipped = std::clamp(ratio, lo, hi) * adv;
    policy += -std::min(unclipped, clipped) * inv_m;
    approx_kl += ((ratio - 1.0) - log_ratio) * inv_m;
    const bool clip_active = (adv >= 0.0f && ratio > hi) || (adv < 0.0f && ratio < lo);
    if (std::abs(ratio - 1.0f) > static_cast<float>(config.clip)) clip_fraction += inv_m;
    const float dlogp = clip_active ? 0.0f : -ratio * adv * inv_mf;
    float* dz = work->dz.data() + i * static_cast<size_t>(nl);
    int offset = 0;
    for (int h = 0; h < nh; ++h) {
      const int kk = heads[static_cast<size_t>(h)];
      const float entropy = work->entropy[i * static_cast<size_t>(nh) + static_cast<size_t>(h)];
      for (int j = 0; j < kk; ++j) {
        const float p = pr[offset + j];
        // Policy term: dlogp * (onehot - p). Entropy term: -ent * dH/dz = ent p (log p + H).
        dz[offset + j] = dlogp * ((j == act[h] ? 1.0f : 0.0f) - p) +
                         entropy_scale * p * (logp_j[offset + j] + entropy);
      }
      offset += kk;
    }
    const float err = values[i] - batch.returns[i];
    value += 0.5 * static_cast<double>(err) * err * inv_m;
    work->dv[i] = static_cast<float>(config.value_coef) * err * inv_mf;
  }
  LossParts parts;
  parts.policy = policy;
  parts.value = value;
  parts.entropy = entropy_sum;
  parts.approx_kl = approx_kl;
  parts.clip_fraction = clip_fraction;
  parts.total =
      parts.policy + config.value_coef * parts.value - config.entropy_coef * parts.entropy;
  actor.Backward(k, work->dz.data(), &work->actor, grad_actor);
  critic.Backward(k, work->dv.data(), &work->critic, grad_critic);
  return parts;
}

void Adam::Step(const Eigen::VectorXf& grad, double learning_rate,
                Eigen::Ref<Eigen::VectorXf> params) {
  ++t_;
  const float b1 = static_cast<float>(beta1_);
  const float b2 = static_cast<float>(beta2_);
  m_ = b1 * m_ + (1.0f - b1) * grad;
  v_ = b2 * v_ + (1.0f - b2) * grad.array().square().matrix();
  const float c1 = static_cast<float>(1.0 - std::pow(beta1_, t_));
  const float c2 = static_cast<float>(1.0 - std::pow(beta2_, t_));
  const float lr = static_cast<float>(learning_rate);
  params -= (lr * (m_.array() / c1) / ((v_.array() / c2).sqrt() + eps_)).matrix();
}

PpoTrainer::PpoTrainer(ActorCritic* ac, PpoConfig config, uint64_t seed, const kernels::Set& k)
    : ac_(ac),
      config_(config),
      rng_(seed),
      kernels_(&k),
      adam_actor_(ac->actor().ParameterCount(), config.adam_eps),
      adam_critic_(ac->critic().ParameterCount(), config.adam_eps) {}

// How far ahead of the row it copies the minibatch's gather asks for a row.
constexpr size_t kPrefetchRows = 32;

UpdateStats PpoTrainer::Update(const Batch& batch) {
  const Eigen::Index n = batch.size();
  const int dims = static_cast<int>(batch.obs.rows());
  const int nh = static_cast<int>(batch.actions.rows());
  const size_t nz = static_cast<size_t>(n);
  const size_t dims_z = static_cast<size_t>(dims);
  const size_t nh_z = static_cast<size_t>(nh);
  // The batch as float rows.
  obs_.resize(nz * static_cast<size_t>(dims));
  actions_.resize(nz * static_cast<size_t>(nh));
  logp_old_.resize(nz);
  advantages_.resize(nz);
  returns_.resize(nz);
  // Column-major dims x n (a sample per column) is the row-major n x dims layout of the kernels.
  Eigen::Map<Eigen::MatrixXf>(obs_.data(), dims, n) = batch.obs.cast<float>();
  Eigen::Map<Eigen::MatrixXi>(actions_.data(), nh, n) = batch.actions;
  Eigen::Map<Eigen::VectorXf>(logp_old_.data(), n) = batch.logp_old.cast<float>();
  Eigen::Map<Eigen::VectorXf>(advantages_.data(), n) = batch.advantages.cast<float>();
  Eigen::Map<Eigen::VectorXf>(returns_.data(), n) = batch.returns.cast<float>();
  actor_f_.Load(ac_->actor());
  critic_f_.Load(ac_->critic());
  Eigen::Map<Eigen::VectorXf> pa(actor_f_.params().data(),
                                 static_cast<Eigen::Index>(actor_f_.params().size()));
  Eigen::Map<Eigen::VectorXf> pc(critic_f_.params().data(),
                                 static_cast<Eigen::Index>(critic_f_.params().size()));
  Eigen::VectorXf ga(pa.size());
  Eigen::VectorXf gc(pc.size());

  std::vector<Eigen::Index> order(nz);
  std::iota(order.begin(), order.end(), 0);
  UpdateStats stats;
  const Eigen::Index mb = std::min<Eigen::Index>(config_.minibatch, n);
  const size_t mbz = static_cast<size_t>(mb);
  mb_obs_.resize(mbz * static_cast<size_t>(dims));
  mb_actions_.resize(mbz * static_cast<size_t>(nh));
  mb_logp_old_.resize(mbz);
  mb_advantages_.resize(mbz);
  mb_returns_.resize(mbz);
  for (int epoch = 0; epoch < config_.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng_);
    for (Eigen::Index start = 0; start + mb <= n; start += mb) {
      double mean = 0.0;
      for (size_t i = 0; i < mbz; ++i) {
        const size_t s = static_cast<size_t>(order[static_cast<size_t>(start) + i]);
        // Rows in random order from a batch that the update's other data keep pushing out of
        // cache: ask for a row some way ahead, so that the loads overlap.
        if (i + kPrefetchRows < mbz) {
          const size_t ahead =
              static_cast<size_t>(order[static_cast<size_t>(start) + i + kPrefetchRows]);
          __builtin_prefetch(obs_.data() + ahead * dims_z);
          __builtin_prefetch(obs_.data() + ahead * dims_z + dims_z - 1);
        }
        // Element by element: rows this short cost less so than through a call to memmove.
        const float* obs_row = obs_.data() + s * dims_z;
        float* mb_obs_row = mb_obs_.data() + i * dims_z;
        for (size_t d = 0; d < dims_z; ++d) mb_obs_row[d] = obs_row[d];
        const int* actions_row = actions_.data() + s * nh_z;
        int* mb_actions_row = mb_actions_.data() + i * nh_z;
        for (size_t h = 0; h < nh_z; ++h) mb_actions_row[h] = actions_row[h];
        mb_logp_old_[i] = logp_old_[s];
        mb_advantages_[i] = advantages_[s];
        mb_returns_[i] = returns_[s];
        mean += advantages_[s];
      }
      if (config_.normalize_advantages && mb > 1) {
        mean /= static_cast<double>(mb);
        double ss = 0.0;
        for (size_t i = 0; i < mbz; ++i)
          ss += (mb_advantages_[i] - mean) * (mb_advantages_[i] - mean);
        const double sd = std::sqrt(ss / static_cast<double>(mb - 1));
        for (size_t i = 0; i < mbz; ++i) {
          mb_advantages_[i] = static_cast<float>((mb_advantages_[i] - mean) / (sd + 1e-8));
        }
      }
      ga.setZero();
      gc.setZero();
      MinibatchF view;
      view.m = static_cast<int>(mb);
      view.obs = mb_obs_.data();
      view.actions = mb_actions_.data();
      view.logp_old = mb_logp_old_.data();
      view.advantages = mb_advantages_.data();
      view.returns = mb_returns_.data();
      const LossParts parts = PpoLossF(*kernels_, actor_f_, critic_f_, ac_->heads(), view, config_,
                                       &work_, ga.data(), gc.data());
      const double norm =
          std::sqrt(static_cast<double>(ga.squaredNorm()) + static_cast<double>(gc.squaredNorm()));
      if (norm > config_.max_grad_norm) {
        const float scale = static_cast<float>(config_.max_grad_norm / (norm + 1e-6));
        ga *= scale;
        gc *= scale;
      }
      adam_actor_.Step(ga, config_.learning_rate, pa);
      adam_critic_.Step(gc, config_.learning_rate, pc);
      stats.policy_loss += parts.policy;
      stats.value_loss += parts.value;
      stats.entropy += parts.entropy;
      stats.approx_kl += parts.approx_kl;
      stats.clip_fraction += parts.clip_fraction;
      ++stats.minibatches;
    }
  }
  actor_f_.Store(&ac_->actor());
  critic_f_.Store(&ac_->critic());
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
