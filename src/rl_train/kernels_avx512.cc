// rl_train/kernels_body.h built with AVX-512F, 16 floats a vector (src/rl/CMakeLists.txt gives this
// file -mavx512f -mfma); reached only through Avx512() in kernels.cc, after the CPU check.
#define HEADROOM_KERNEL_LANES 16
#define HEADROOM_KERNEL_ROWS 8
#include "rl_train/kernels_body.h"

namespace headroom::rl::kernels {

const Set& Avx512Unchecked() {
  static constexpr Set kSet{"avx512",      &Gemm,   &GemmTn,       &ColumnSums,      &BiasTanh,
                            &TanhBackward, &ExpAll, &GemmBiasTanh, &GemmTanhBackward};
  return kSet;
}

}  // namespace headroom::rl::kernels
