// Running mean and variance of observations (Chan et al. parallel update), frozen at inference.
#pragma once

#include <Eigen/Dense>

namespace headroom::rl {

class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(int dims)
      : mean_(Eigen::VectorXd::Zero(dims)), var_(Eigen::VectorXd::Ones(dims)) {}

  // Adds a batch (dims x n).
  void Update(const Eigen::MatrixXd& x);
  // (x - mean) / sqrt(var + 1e-8), clipped to +-clip.
  Eigen::VectorXd Apply(const Eigen::VectorXd& x) const;
  Eigen::MatrixXd ApplyBatch(const Eigen::MatrixXd& x) const;

  static constexpr double kClip = 10.0;
  const Eigen::VectorXd& mean() const { return mean_; }
  const Eigen::VectorXd& var() const { return var_; }
  double count() const { return count_; }
  void Set(Eigen::VectorXd mean, Eigen::VectorXd var, double count) {
    mean_ = std::move(mean);
    var_ = std::move(var);
    count_ = count;
  }

 private:
  Eigen::VectorXd mean_;
  Eigen::VectorXd var_;
  double count_ = 1e-4;
};

}  // namespace headroom::rl
