// An Mlp's parameters in float32 and the batched forward and backward passes the PPO update runs
// on them (rl_train/kernels.h). Samples are rows here (m x dims, row-major), unlike Mlp's columns:
// the kernels then stream contiguous rows of weights. Training only; the policy an agent loads
// stays the double-precision Mlp.
//
// Not thread-safe; a Work is one caller's scratch.
#pragma once

#include <vector>

#include "rl/mlp.h"
#include "rl_train/kernels.h"

namespace headroom::rl {

class FloatMlp {
 public:
  FloatMlp() = default;
  explicit FloatMlp(const Mlp& mlp);

  // Parameters in Mlp::Parameters()'s layout (W0 row-major out x in, b0, W1, b1, ...).
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  // Writes the parameters back into `mlp`. REQUIRES: mlp has this one's sizes.
  void Store(Mlp* mlp) const;
  void Load(const Mlp& mlp);

  struct Work {
    const float* x = nullptr;            // the input (m x inputs), the caller's
    std::vector<std::vector<float>> a;   // a[l] = layer l's output (a[0] unused)
    std::vector<std::vector<float>> wt;  // each weight transposed (in x out)
    std::vector<float> delta, back;      // the backward pass's gradients, by turns
    std::vector<float> gwt;              // a weight gradient transposed (in x out)
    int m = 0;
  };
  // Forward pass of m samples `x` (m x inputs); the outputs are work->a.back() (m x outputs).
  // x must stay as it is until Backward on the same work.
  void Forward(const kernels::Set& k, const float* x, int m, Work* work) const;
  // Adds into `grad` (params' layout) the gradient of a loss whose derivative with respect to
  // the outputs is dy (m x outputs), after Forward on `work`.
  void Backward(const kernels::Set& k, const float* dy, Work* work, float* grad) const;

  int inputs() const { return sizes_.front(); }
  int outputs() const { return sizes_.back(); }

 private:
  std::vector<int> sizes_;
  std::vector<float> params_;
  std::vector<size_t> offset_;  // where layer l's weights start in params_
};

}  // namespace headroom::rl
