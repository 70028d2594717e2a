// rl_train/kernels_body.h built with AVX2 and FMA (src/rl/CMakeLists.txt gives this file
// -mavx2 -mfma); reached only through Avx2() in kernels.cc, after the CPU check.
#include "rl_train/kernels_body.h"

namespace headroom::rl::kernels {

const Set& Avx2Unchecked() {
  static constexpr Set kSet{"avx2",        &Gemm,   &GemmTn,       &ColumnSums,      &BiasTanh,
                            &TanhBackward, &ExpAll, &GemmBiasTanh, &GemmTanhBackward};
  return kSet;
}

}  // namespace headroom::rl::kernels
