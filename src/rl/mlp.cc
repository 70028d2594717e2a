#include "rl/mlp.h"

#include <cassert>
#include <cmath>

namespace headroom::rl {

Mlp::Mlp(std::vector<int> sizes) : sizes_(std::move(sizes)) {
  assert(sizes_.size() >= 2);
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    w_.push_back(Eigen::MatrixXd::Zero(sizes_[l + 1], sizes_[l]));
    b_.push_back(Eigen::VectorXd::Zero(sizes_[l + 1]));
  }
}

void Mlp::InitOrthogonal(std::mt19937_64& rng, double hidden_gain, double output_gain) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (size_t l = 0; l < w_.size(); ++l) {
    const Eigen::Index rows = w_[l].rows();
    const Eigen::Index cols = w_[l].cols();
    const Eigen::Index big = std::max(rows, cols);
    const Eigen::Index small = std::min(rows, cols);
    Eigen::MatrixXd g(big, small);
    for (Eigen::Index j = 0; j < small; ++j) {
      for (Eigen::Index i = 0; i < big; ++i) g(i, j) = normal(rng);
    }
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
    Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(big, small);
    // Sign correction so that the distribution is uniform (Mezzadri 2007).
    const Eigen::MatrixXd r = qr.matrixQR().topRows(small).triangularView<Eigen::Upper>();
    for (Eigen::Index j = 0; j < small; ++j) {
      if (r(j, j) < 0.0) q.col(j) = -q.col(j);
    }
    const double gain = l + 1 == w_.size() ? output_gain : hidden_gain;
    w_[l] = gain * (rows >= cols ? q : Eigen::MatrixXd(q.transpose()));
    b_[l].setZero();
  }
}

void Mlp::Forward(const Eigen::MatrixXd& x, Cache* cache) const {
  cache->a.resize(w_.size() + 1);
  cache->a[0] = x;
  for (size_t l = 0; l < w_.size(); ++l) {
    Eigen::MatrixXd z = w_[l] * cache->a[l];
    z.colwise() += b_[l];
    if (l + 1 < w_.size()) z = z.array().tanh();
    cache->a[l + 1] = std::move(z);
  }
}

void Mlp::ForwardOne(const Eigen::VectorXd& x, Eigen::VectorXd* y,
                     std::vector<Eigen::VectorXd>* scratch) const {
  scratch->resize(w_.size());
  const Eigen::VectorXd* in = &x;
  for (size_t l = 0; l < w_.size(); ++l) {
    Eigen::VectorXd& out = l + 1 == w_.size() ? *y : (*scratch)[l];
    out.noalias() = w_[l] * *in;
    out += b_[l];
    if (l + 1 < w_.size()) out = out.array().tanh();
    in = &out;
  }
}

void Mlp::Backward(const Cache& cache, const Eigen::MatrixXd& dy, Eigen::VectorXd* grad) const {
  assert(grad->size() == ParameterCount());
  // Offsets of each layer's block in the flat layout.
  std::vector<Eigen::Index> offset(w_.size());
  Eigen::Index o = 0;
  for (size_t l = 0; l < w_.size(); ++l) {
    offset[l] = o;
    o += w_[l].size() + b_[l].size();
  }
  Eigen::MatrixXd delta = dy;  // dLoss/dz of layer l
  for (size_t l = w_.size(); l-- > 0;) {
    const Eigen::MatrixXd gw = delta * cache.a[l].transpose();
    const Eigen::Index rows = w_[l].rows();
    const Eigen::Index cols = w_[l].cols();
    // Row-major flat layout of W.
    Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> gw_flat(
        grad->data() + offset[l], rows, cols);
    gw_flat += gw;
    grad->segment(offset[l] + w_[l].size(), rows) += delta.rowwise().sum();
    if (l > 0) {
      Eigen::MatrixXd back = w_[l].transpose() * delta;
      // tanh' = 1 - a^2
      delta = back.array() * (1.0 - cache.a[l].array().square());
    }
  }
}

Eigen::Index Mlp::ParameterCount() const {
  Eigen::Index n = 0;
  for (size_t l = 0; l < w_.size(); ++l) n += w_[l].size() + b_[l].size();
  return n;
}

Eigen::VectorXd Mlp::Parameters() const {
  Eigen::VectorXd p(ParameterCount());
  Eigen::Index o = 0;
  for (size_t l = 0; l < w_.size(); ++l) {
    for (Eigen::Index i = 0; i < w_[l].rows(); ++i) {
      for (Eigen::Index j = 0; j < w_[l].cols(); ++j) p(o++) = w_[l](i, j);
    }
    p.segment(o, b_[l].size()) = b_[l];
    o += b_[l].size();
  }
  return p;
}

void Mlp::SetParameters(const Eigen::VectorXd& p) {
  assert(p.size() == ParameterCount());
  Eigen::Index o = 0;
  for (size_t l = 0; l < w_.size(); ++l) {
    for (Eigen::Index i = 0; i < w_[l].rows(); ++i) {
      for (Eigen::Index j = 0; j < w_[l].cols(); ++j) w_[l](i, j) = p(o++);
    }
    b_[l] = p.segment(o, b_[l].size());
    o += b_[l].size();
  }
}

}  // namespace headroom::rl
