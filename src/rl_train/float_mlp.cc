#include "rl_train/float_mlp.h"

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
    // z = x W^T + b, through the tanh on hidden layers: the bias and the tanh in the gemm's store.
    k.gemm_bias_tanh(m, out, in, l == 0 ? x : work->a[l].data(), in, wt.data(), out, z.data(), out,
                     b, l + 1 < layers);
  }
}

void FloatMlp::Backward(const kernels::Set& k, const float* dy, Work* work, float* grad) const {
  const size_t layers = sizes_.size() - 1;
  const int m = work->m;
  const size_t mz = static_cast<size_t>(m);
  // The gradient with respect to each layer's pre-activation: dy for the last, then in delta and
  // back by turns (sized once here for the widest hidden layer, so that neither moves).
  int widest = 0;
  for (size_t l = 1; l < layers; ++l) widest = std::max(widest, sizes_[l]);
  work->delta.resize(mz * static_cast<size_t>(widest));
  work->back.resize(mz * static_cast<size_t>(widest));
  const float* delta = dy;
  for (size_t l = layers; l-- > 0;) {
    const int in = sizes_[l];
    const int out = sizes_[l + 1];
    const size_t in_z = static_cast<size_t>(in);
    const size_t out_z = static_cast<size_t>(out);
    float* gw = grad + offset_[l];
    float* gb = gw + out_z * in_z;
    // dW (out x in) += delta^T (out x m) * a[l] (m x in); db += the column sums of delta.
    const float* input = l == 0 ? work->x : work->a[l].data();
    if (out > in) {
      // As dW^T (in x out) += a[l]^T delta, when that puts W's longer side along the kernels'
      // vectors: the same products (a x b is b x a), summed over the samples in the same order,
      // so the same bits as the line below.
      work->gwt.resize(in_z * out_z);
      for (size_t o = 0; o < out_z; ++o) {
        for (size_t i = 0; i < in_z; ++i) work->gwt[i * out_z + o] = gw[o * in_z + i];
      }
      k.gemm_tn(in, out, m, input, in, delta, out, work->gwt.data(), out, true);
      for (size_t o = 0; o < out_z; ++o) {
        for (size_t i = 0; i < in_z; ++i) gw[o * in_z + i] = work->gwt[i * out_z + o];
      }
    } else {
      k.gemm_tn(out, in, m, delta, out, input, in, gw, in, true);
    }
    k.column_sums(m, out, delta, out, gb);
    if (l == 0) break;
    // The next delta (m x in) = delta (m x out) * W (out x in), through the tanh of layer l's
    // output, in the gemm's store.
    float* next = delta == work->delta.data() ? work->back.data() : work->delta.data();
    k.gemm_tanh_backward(m, in, out, delta, out, params_.data() + offset_[l], in, next, in,
                         work->a[l].data(), in);
    delta = next;
  }
}

}  // namespace headroom::rl
