#include "rl/float_mlp.h"

#include <algorithm>
#include <cassert>

namespace headroom::rl {

FloatMlp::FloatMlp(const Mlp& mlp) { Load(mlp); }

void FloatMlp::Load(const Mlp& mlp) {
  sizes_ = mlp.sizes();
  offset_.clear();
  size_t o = 0;
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    offset_.push_back(o);
    o += static_cast<size_t>(sizes_[l + 1]) * static_cast<size_t>(sizes_[l] + 1);
  }
  const Eigen::VectorXd p = mlp.Parameters();
  params_.resize(static_cast<size_t>(p.size()));
  for (Eigen::Index i = 0; i < p.size(); ++i)
    params_[static_cast<size_t>(i)] = static_cast<float>(p(i));
}

void FloatMlp::Store(Mlp* mlp) const {
  assert(mlp->sizes() == sizes_);
  Eigen::VectorXd p(static_cast<Eigen::Index>(params_.size()));
  for (size_t i = 0; i < params_.size(); ++i) p(static_cast<Eigen::Index>(i)) = params_[i];
  mlp->SetParameters(p);
}

void FloatMlp::Forward(const kernels::Set& k, const float* x, int m, Work* work) const {
  const size_t layers = sizes_.size() - 1;
  work->m = m;
  work->a.resize(layers + 1);
  work->wt.resize(layers);
  work->x = x;
  for (size_t l = 0; l < layers; ++l) {
    const int in = sizes_[l];
    const int out = sizes_[l + 1];
    const float* w = params_.data() + offset_[l];
    const float* b = w + static_cast<size_t>(out) * static_cast<size_t>(in);
    std::vector<float>& wt = work->wt[l];
    wt.resize(static_cast<size_t>(in) * static_cast<size_t>(out));
    for (int o = 0; o < out; ++o) {
      for (int i = 0; i < in; ++i) wt[static_cast<size_t>(i * out + o)] = w[o * in + i];
    }
    std::vector<float>& z = work->a[l + 1];
    z.resize(static_cast<size_t>(m) * static_cast<size_t>(out));
    k.gemm(m, out, in, l == 0 ? x : work->a[l].data(), in, wt.data(), out, z.data(), out, false);
    k.bias_tanh(m, out, z.data(), out, b, l + 1 < layers);
  }
}

void FloatMlp::Backward(const kernels::Set& k, const float* dy, Work* work, float* grad) const {
  const size_t layers = sizes_.size() - 1;
  const int m = work->m;
  const size_t mz = static_cast<size_t>(m);
  work->delta.assign(dy, dy + mz * static_cast<size_t>(sizes_.back()));
  for (size_t l = layers; l-- > 0;) {
    const int in = sizes_[l];
    const int out = sizes_[l + 1];
    float* gw = grad + offset_[l];
    float* gb = gw + static_cast<size_t>(out) * static_cast<size_t>(in);
    // dW (out x in) += delta^T (out x m) * a[l] (m x in); db += the column sums of delta.
    const float* input = l == 0 ? work->x : work->a[l].data();
    k.gemm_tn(out, in, m, work->delta.data(), out, input, in, gw, in, true);
    k.column_sums(m, out, work->delta.data(), out, gb);
    if (l == 0) break;
    // back (m x in) = delta (m x out) * W (out x in); through the tanh of layer l's input.
    const float* w = params_.data() + offset_[l];
    work->back.resize(mz * static_cast<size_t>(in));
    k.gemm(m, in, out, work->delta.data(), out, w, in, work->back.data(), in, false);
    work->delta.resize(mz * static_cast<size_t>(in));
    k.tanh_backward(static_cast<long>(mz * static_cast<size_t>(in)), work->back.data(),
                    work->a[l].data(), work->delta.data());
  }
}

}  // namespace headroom::rl
