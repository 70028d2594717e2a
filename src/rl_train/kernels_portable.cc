// rl_train/kernels_body.h built for any x86-64 (no -m flags): 4 floats a vector, one SSE register.
#define HEADROOM_KERNEL_LANES 4
#include "rl_train/kernels_body.h"

namespace headroom::rl::kernels {

const Set& Portable() {
  static constexpr Set kSet{"portable",    &Gemm,   &GemmTn,       &ColumnSums,      &BiasTanh,
                            &TanhBackward, &ExpAll, &GemmBiasTanh, &GemmTanhBackward};
  return kSet;
}

}  // namespace headroom::rl::kernels
