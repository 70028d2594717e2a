#include "rl/normalizer.h"

namespace headroom::rl {

void Normalizer::Update(const Eigen::MatrixXd& x) {
  const double n = static_cast<double>(x.cols());
  if (n == 0) return;
  const Eigen::VectorXd batch_mean = x.rowwise().mean();
  const Eigen::VectorXd batch_var = (x.colwise() - batch_mean).array().square().rowwise().sum() / n;
  const double total = count_ + n;
  const Eigen::VectorXd delta = batch_mean - mean_;
  mean_ += delta * (n / total);
  var_ = (var_ * count_ + batch_var * n + delta.array().square().matrix() * (count_ * n / total)) /
         total;
  count_ = total;
}

Eigen::VectorXd Normalizer::Apply(const Eigen::VectorXd& x) const {
  return ((x - mean_).array() / (var_.array() + 1e-8).sqrt()).cwiseMax(-kClip).cwiseMin(kClip);
}

Eigen::MatrixXd Normalizer::ApplyBatch(const Eigen::MatrixXd& x) const {
  Eigen::MatrixXd y = x.colwise() - mean_;
  const Eigen::VectorXd inv = (var_.array() + 1e-8).sqrt().inverse();
  y = inv.asDiagonal() * y;
  return y.cwiseMax(-kClip).cwiseMin(kClip);
}

}  // namespace headroom::rl
