// The float32 arithmetic of the PPO update (rl_train/ppo.h), in three builds of one source
// (rl_train/kernels_body.h): `portable`, for any x86-64 (what a build without -m flags targets,
// SSE2); `avx2`, compiled with AVX2 and FMA; and `avx512`, with AVX-512F (16 floats a vector).
// Best() picks at run time the widest the CPU has; the portable build stays in the binary, is what
// every other CPU runs, and all three are tested to give the same results within float tolerance
// (tests/rl_train/kernels_test.cc).
//
// Matrices are row-major, one sample per row. Every function is pure and thread-compatible.
#pragma once

#include <vector>

namespace headroom::rl::kernels {

struct Set {
  const char* name;
  // C (m x n, row stride ldc) = [C +] A (m x k, stride lda) * B (k x n, stride ldb).
  // REQUIRES: m, n, k >= 0; C does not overlap A or B.
  void (*gemm)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
               int ldc, bool accumulate);
  // The same with A transposed: C (m x n) = [C +] A^T B, A stored k x m (stride lda).
  void (*gemm_tn)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                  int ldc, bool accumulate);
  // sums[j] += the sum of column j of a (m x n, stride lda).
  void (*column_sums)(int m, int n, const float* a, int lda, float* sums);
  // z (m x n, stride ldz) += bias (n) on every row; then z = tanh(z) where `tanh`.
  void (*bias_tanh)(int m, int n, float* z, int ldz, const float* bias, bool tanh);
  // delta[i] = back[i] * (1 - a[i]^2): the gradient through a tanh whose output is a.
  void (*tanh_backward)(long count, const float* back, const float* a, float* delta);
  // out[i] = exp(in[i]), in clamped to [-40, 40]. out may be in.
  void (*exp)(long count, const float* in, float* out);
  // gemm (not accumulating), then bias_tanh on C, in one pass: the same results, without C's
  // round trip through memory in between.
  void (*gemm_bias_tanh)(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                         float* c, int ldc, const float* bias, bool tanh);
  // gemm (not accumulating), then tanh_backward with C as `back` and as `delta`, in one pass:
  // C = (A B) * (1 - y^2), y m x n (stride ldy), element for element as the two calls give.
  void (*gemm_tanh_backward)(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                             float* c, int ldc, const float* y, int ldy);
};

const Set& Portable();
// Null where the CPU lacks AVX2 or FMA.
const Set* Avx2();
// Null where the CPU lacks AVX-512F (or AVX2/FMA).
const Set* Avx512();
// The widest build the CPU runs; HEADROOM_KERNELS=portable|avx2 in the environment caps it.
const Set& Best();
// Every build this CPU runs, portable first.
std::vector<const Set*> Available();

}  // namespace headroom::rl::kernels
