// The kernels of rl/kernels.h, compiled once per instruction set (kernels_portable.cc,
// kernels_avx2.cc). Everything here has internal linkage and nothing is included but
// rl/kernels.h: an inline function with external linkage built for AVX2 could otherwise be the
// copy the linker keeps for callers on CPUs without it.
//
// GCC vector extensions, one register a vector: 4 floats in the portable build (SSE), 8 with
// AVX2, 16 with AVX-512. The gemm micro-kernel keeps a
// 4 x (2 vectors) block of C in registers and streams panels of B; columns past the last full
// block go through a zero-padded copy of B's panel, so every product is vectorised whatever n is.
#pragma once

#include "rl/kernels.h"

// 32-byte vectors passed by value between these internal functions: the ABI note GCC gives for
// them without AVX concerns calls across translation units, which none of these are.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace headroom::rl::kernels {
namespace {

// HEADROOM_KERNEL_LANES floats per vector (8 unless the including file says otherwise).
#ifndef HEADROOM_KERNEL_LANES
#define HEADROOM_KERNEL_LANES 8
#endif
constexpr int kLanes = HEADROOM_KERNEL_LANES;
typedef float Vec __attribute__((vector_size(4 * kLanes)));
typedef float VecU __attribute__((vector_size(4 * kLanes), aligned(4), may_alias));
typedef int IVec __attribute__((vector_size(4 * kLanes)));

#ifndef HEADROOM_KERNEL_ROWS
#define HEADROOM_KERNEL_ROWS 4
#endif
constexpr int kRows = HEADROOM_KERNEL_ROWS;  // rows of C per micro-kernel block (at most 8)
constexpr int kCols = 2 * kLanes;            // columns of C per micro-kernel block (two vectors)
constexpr int kMaxK = 4096;  // the longest k the padded panel holds; longer k is split

inline Vec Load(const float* p) { return *reinterpret_cast<const VecU*>(p); }
inline void Store(float* p, Vec v) { *reinterpret_cast<VecU*>(p) = v; }
// Lane 0 everywhere: one broadcast (0 + x would be an add: it differs from x at -0.0).
inline Vec Splat(float x) { return __builtin_shuffle(Vec{x}, IVec{}); }

// C rows [0, R) x cols [0, kCols) (+)= op(A) rows [0, R) x B panel (k x kCols, stride ldb),
// where op(A) is A (R x k, stride lda) or, kTransA, the transpose of A (k x R, stride lda).
template <int R, bool kTransA>
inline void Block(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                  bool accumulate) {
  Vec acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = accumulate ? Load(c + r * ldc) : Splat(0.0f);
    acc[r][1] = accumulate ? Load(c + r * ldc + kLanes) : Splat(0.0f);
  }
  for (int p = 0; p < k; ++p) {
    const Vec b0 = Load(b + p * ldb);
    const Vec b1 = Load(b + p * ldb + kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec av = Splat(kTransA ? a[p * lda + r] : a[r * lda + p]);
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    Store(c + r * ldc, acc[r][0]);
    Store(c + r * ldc + kLanes, acc[r][1]);
  }
}

// The same with one vector of columns: C rows [0, R) x cols [0, kLanes).
template <int R, bool kTransA>
inline void Block1(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                   bool accumulate) {
  Vec acc[R];
  for (int r = 0; r < R; ++r) acc[r] = accumulate ? Load(c + r * ldc) : Splat(0.0f);
  for (int p = 0; p < k; ++p) {
    const Vec b0 = Load(b + p * ldb);
    for (int r = 0; r < R; ++r) acc[r] += Splat(kTransA ? a[p * lda + r] : a[r * lda + p]) * b0;
  }
  for (int r = 0; r < R; ++r) Store(c + r * ldc, acc[r]);
}

template <bool kTransA>
inline void Rows1(int rows, int k, const float* a, int lda, const float* b, int ldb, float* c,
                  int ldc, bool accumulate) {
  switch (rows) {
    case 8:
      Block1<8, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 7:
      Block1<7, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 6:
      Block1<6, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 5:
      Block1<5, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 4:
      Block1<4, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 3:
      Block1<3, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 2:
      Block1<2, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 1:
      Block1<1, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    default:
      break;
  }
}

template <bool kTransA>
inline void Rows(int rows, int k, const float* a, int lda, const float* b, int ldb, float* c,
                 int ldc, bool accumulate) {
  switch (rows) {
    case 8:
      Block<8, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 7:
      Block<7, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 6:
      Block<6, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 5:
      Block<5, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 4:
      Block<4, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 3:
      Block<3, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 2:
      Block<2, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    case 1:
      Block<1, kTransA>(k, a, lda, b, ldb, c, ldc, accumulate);
      break;
    default:
      break;
  }
}

// Where row i of op(A) starts.
template <bool kTransA>
inline const float* RowOf(const float* a, int lda, int i) {
  return kTransA ? a + i : a + i * lda;
}

template <bool kTransA>
void GemmChunk(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
               int ldc, bool accumulate) {
  static thread_local float panel[kMaxK * kCols];
  float tmp[kRows * kCols];
  const int full = n / kCols * kCols;
  for (int j = 0; j < full; j += kCols) {
    for (int i = 0; i < m; i += kRows) {
      const int rows = m - i < kRows ? m - i : kRows;
      Rows<kTransA>(rows, k, RowOf<kTransA>(a, lda, i), lda, b + j, ldb, c + i * ldc + j, ldc,
                    accumulate);
    }
  }
  const int rest = n - full;
  if (rest == 0) return;
  // The last columns through a zero-padded panel: one vector wide where they fit in one.
  const int width = rest <= kLanes ? kLanes : kCols;
  for (int p = 0; p < k; ++p) {
    for (int j = 0; j < width; ++j) panel[p * width + j] = j < rest ? b[p * ldb + full + j] : 0.0f;
  }
  for (int i = 0; i < m; i += kRows) {
    const int rows = m - i < kRows ? m - i : kRows;
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < width; ++j) {
        tmp[r * width + j] = accumulate && j < rest ? c[(i + r) * ldc + full + j] : 0.0f;
      }
    }
    if (width == kLanes) {
      Rows1<kTransA>(rows, k, RowOf<kTransA>(a, lda, i), lda, panel, width, tmp, width, accumulate);
    } else {
      Rows<kTransA>(rows, k, RowOf<kTransA>(a, lda, i), lda, panel, width, tmp, width, accumulate);
    }
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < rest; ++j) c[(i + r) * ldc + full + j] = tmp[r * width + j];
    }
  }
}

// One column (n = 1, B a contiguous vector), A not transposed: a dot product per row, vectorised
// along k.
void GemvRows(int m, int k, const float* a, int lda, const float* b, float* c, int ldc,
              bool accumulate) {
  const int full = k / kLanes * kLanes;
  for (int i = 0; i < m; ++i) {
    const float* row = a + i * lda;
    Vec acc = Splat(0.0f);
    for (int p = 0; p < full; p += kLanes) acc += Load(row + p) * Load(b + p);
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum += acc[l];
    for (int p = full; p < k; ++p) sum += row[p] * b[p];
    c[i * ldc] = accumulate ? c[i * ldc] + sum : sum;
  }
}

template <bool kTransA>
void GemmAny(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
      }
    }
    return;
  }
  if (!kTransA && n == 1 && ldb == 1) {
    GemvRows(m, k, a, lda, b, c, ldc, accumulate);
    return;
  }
  for (int p = 0; p < k; p += kMaxK) {
    const int kk = k - p < kMaxK ? k - p : kMaxK;
    GemmChunk<kTransA>(m, n, kk, kTransA ? a + p * lda : a + p, lda, b + p * ldb, ldb, c, ldc,
                       accumulate || p > 0);
  }
}

void Gemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
          bool accumulate) {
  GemmAny<false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void GemmTn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
            int ldc, bool accumulate) {
  GemmAny<true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void ColumnSums(int m, int n, const float* a, int lda, float* sums) {
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Vec acc = Load(sums + j);
    for (int i = 0; i < m; ++i) acc += Load(a + i * lda + j);
    Store(sums + j, acc);
  }
  for (; j < n; ++j) {
    float acc = sums[j];
    for (int i = 0; i < m; ++i) acc += a[i * lda + j];
    sums[j] = acc;
  }
}

// y = j ln2 + r with j = round(y / ln2) and |r| <= ln2 / 2; expm1(r) by its Taylor series to
// r^7 (truncation below 6e-9 relative). REQUIRES: |y| < 64 ln2 (the shift that rounds).
inline void Reduce(Vec y, Vec* two_j, Vec* em1_r) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that j * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  // j = round(y / ln2): floor via truncation of a positive shift.
  const IVec j = __builtin_convertvector(y * kLog2e + 64.5f, IVec) - 64;
  const Vec jf = __builtin_convertvector(j, Vec);
  const Vec r = (y - jf * kLn2Hi) - jf * kLn2Lo;
  Vec p = Splat(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  *em1_r = (p * r) * r + r;
  *two_j = (Vec)((j + 127) << 23);  // 2^j from its exponent bits
}

// tanh(x) = expm1(2x) / (expm1(2x) + 2), expm1(y) = 2^j (expm1(r) + 1) - 1: for |y| < ln2/2,
// j = 0 and there is no cancellation near 0. |x| is clamped at 9, where tanh is 1 in float.
inline Vec Tanh(Vec x) {
  constexpr float kClamp = 9.0f;
  x = x > kClamp ? Splat(kClamp) : x;
  x = x < -kClamp ? Splat(-kClamp) : x;
  Vec two_j, em1;
  Reduce(x + x, &two_j, &em1);
  const Vec e = two_j * em1 + (two_j - 1.0f);  // expm1(2x)
  return e / (e + 2.0f);
}

// exp(x) = 2^j (expm1(r) + 1), x clamped to [-40, 40] (what softmax and a probability ratio
// need: exp(-40) is 4e-18, far below float's resolution of a probability).
inline Vec Exp(Vec x) {
  constexpr float kClamp = 40.0f;
  x = x > kClamp ? Splat(kClamp) : x;
  x = x < -kClamp ? Splat(-kClamp) : x;
  Vec two_j, em1;
  Reduce(x, &two_j, &em1);
  return two_j * em1 + two_j;
}

void ExpAll(long count, const float* in, float* out) {
  long i = 0;
  for (; i + kLanes <= count; i += kLanes) Store(out + i, Exp(Load(in + i)));
  if (i == count) return;
  float tail[kLanes];
  for (int l = 0; l < kLanes; ++l) tail[l] = i + l < count ? in[i + l] : 0.0f;
  Store(tail, Exp(Load(tail)));
  for (long l = 0; i + l < count; ++l) out[i + l] = tail[l];
}

void BiasTanh(int m, int n, float* z, int ldz, const float* bias, bool tanh) {
  const int full = n / kLanes * kLanes;
  float tail[kLanes];
  for (int i = 0; i < m; ++i) {
    float* row = z + i * ldz;
    for (int j = 0; j < full; j += kLanes) {
      const Vec v = Load(row + j) + Load(bias + j);
      Store(row + j, tanh ? Tanh(v) : v);
    }
    if (full == n) continue;
    for (int j = 0; j < kLanes; ++j) {
      tail[j] = full + j < n ? row[full + j] + bias[full + j] : 0.0f;
    }
    Vec v = Load(tail);
    if (tanh) v = Tanh(v);
    Store(tail, v);
    for (int j = full; j < n; ++j) row[j] = tail[j - full];
  }
}

void TanhBackward(long count, const float* back, const float* a, float* delta) {
  long i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const Vec y = Load(a + i);
    Store(delta + i, Load(back + i) * (1.0f - y * y));
  }
  for (; i < count; ++i) delta[i] = back[i] * (1.0f - a[i] * a[i]);
}

}  // namespace
}  // namespace headroom::rl::kernels
