// The kernels of rl_train/kernels.h, compiled once per instruction set (kernels_portable.cc,
// kernels_avx2.cc). Everything here has internal linkage and nothing is included but
// rl_train/kernels.h: an inline function with external linkage built for AVX2 could otherwise be
// the copy the linker keeps for callers on CPUs without it.
//
// GCC vector extensions, one register a vector: 4 floats in the portable build (SSE), 8 with
// AVX2, 16 with AVX-512. The gemm micro-kernel keeps a
// 4 x (2 vectors) block of C in registers and streams panels of B; columns past the last full
// block go through a zero-padded copy of B's panel, so every product is vectorised whatever n is.
// gemm_bias_tanh and gemm_tanh_backward are the same micro-kernel with the elementwise pass done
// on each finished block before it is stored (Epi below): the same operations on the same values.
#pragma once

#include "rl_train/kernels.h"

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
#if defined(__clang__)
// clang (the build that compiles every source alone) has no __builtin_shuffle; lane by lane.
inline Vec Splat(float x) {
  Vec v{};
  for (int i = 0; i < kLanes; ++i) v[i] = x;
  return v;
}
#else
inline Vec Splat(float x) { return __builtin_shuffle(Vec{x}, IVec{}); }
#endif

// y = j ln2 + r with j = round(y / ln2) and |r| <= ln2 / 2; expm1(r) by its Taylor series to
// r^7 (truncation below 6e-9 relative). REQUIRES: |y| < 64 ln2 (the shift that rounds).
// For N vectors at once, step by step across them: N independent chains of dependent operations
// that the core overlaps (one vector at a time leaves it waiting on each result); every vector
// gets the same operations as alone.
template <int N>
inline void Reduce(const Vec* y, Vec* two_j, Vec* em1_r) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that j * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  IVec j[N];
  Vec r[N], p[N];
  // j = round(y / ln2): floor via truncation of a positive shift.
  for (int n = 0; n < N; ++n) j[n] = __builtin_convertvector(y[n] * kLog2e + 64.5f, IVec) - 64;
  for (int n = 0; n < N; ++n) {
    const Vec jf = __builtin_convertvector(j[n], Vec);
    r[n] = (y[n] - jf * kLn2Hi) - jf * kLn2Lo;
  }
  for (int n = 0; n < N; ++n) p[n] = Splat(1.0f / 5040.0f) * r[n] + 1.0f / 720.0f;
  for (int n = 0; n < N; ++n) p[n] = p[n] * r[n] + 1.0f / 120.0f;
  for (int n = 0; n < N; ++n) p[n] = p[n] * r[n] + 1.0f / 24.0f;
  for (int n = 0; n < N; ++n) p[n] = p[n] * r[n] + 1.0f / 6.0f;
  for (int n = 0; n < N; ++n) p[n] = p[n] * r[n] + 0.5f;
  for (int n = 0; n < N; ++n) em1_r[n] = (p[n] * r[n]) * r[n] + r[n];
  for (int n = 0; n < N; ++n) two_j[n] = (Vec)((j[n] + 127) << 23);  // 2^j from its exponent bits
}

// tanh(x) = expm1(2x) / (expm1(2x) + 2), expm1(y) = 2^j (expm1(r) + 1) - 1: for |y| < ln2/2,
// j = 0 and there is no cancellation near 0. |x| is clamped at 9, where tanh is 1 in float.
// N vectors in place, interleaved as in Reduce.
template <int N>
__attribute__((always_inline)) inline void TanhN(Vec* x) {
  constexpr float kClamp = 9.0f;
  Vec y[N], two_j[N], em1[N];
  for (int n = 0; n < N; ++n) {
    Vec v = x[n] > kClamp ? Splat(kClamp) : x[n];
    v = v < -kClamp ? Splat(-kClamp) : v;
    y[n] = v + v;
  }
  Reduce<N>(y, two_j, em1);
  for (int n = 0; n < N; ++n) {
    const Vec e = two_j[n] * em1[n] + (two_j[n] - 1.0f);  // expm1(2x)
    x[n] = e / (e + 2.0f);
  }
}

inline Vec Tanh(Vec x) {
  TanhN<1>(&x);
  return x;
}

// How many vectors TanhN takes at a time in the fused passes: as many as the registers hold with
// the constants (32 vector registers with AVX-512, 16 below it).
constexpr int kTanhWays = kLanes >= 16 ? 4 : 2;

// TanhN on kCount vectors, kTanhWays at a time.
template <int kCount>
inline void TanhAll(Vec* x) {
  constexpr int kNow = kCount < kTanhWays ? kCount : kTanhWays;
  TanhN<kNow>(x);
  if constexpr (kCount > kNow) TanhAll<kCount - kNow>(x + kNow);
}

// exp(x) = 2^j (expm1(r) + 1), x clamped to [-40, 40] (what softmax and a probability ratio
// need: exp(-40) is 4e-18, far below float's resolution of a probability).
inline Vec Exp(Vec x) {
  constexpr float kClamp = 40.0f;
  x = x > kClamp ? Splat(kClamp) : x;
  x = x < -kClamp ? Splat(-kClamp) : x;
  Vec two_j, em1;
  Reduce<1>(&x, &two_j, &em1);
  return two_j * em1 + two_j;
}

// What a gemm does to each finished vector of C on its way to memory, the elementwise pass that
// would otherwise follow it (rl_train/kernels.h: gemm_bias_tanh, gemm_tanh_backward). The
// arithmetic is the same as in that separate pass, so the results are too; only a trip through
// memory is saved.
enum class Epi { kNone, kBias, kBiasTanh, kTanhGrad };

// Where the epilogue's operands are: at the first column of the block (bias) or at its first row
// and column (y, stride ldy).
struct EpiArgs {
  const float* bias = nullptr;
  const float* y = nullptr;
  int ldy = 0;
  EpiArgs At(int i, int j) const {
    return {bias != nullptr ? bias + j : nullptr, y != nullptr ? y + i * ldy + j : nullptr, ldy};
  }
};

// The epilogue on R rows of V vectors (v[r * V + c]: row r, columns from c * kLanes).
template <Epi kEpi, int R, int V>
inline void Finish(Vec* v, const EpiArgs& e) {
  if constexpr (kEpi == Epi::kBias || kEpi == Epi::kBiasTanh) {
    for (int c = 0; c < V; ++c) {
      const Vec bias = Load(e.bias + c * kLanes);
      for (int r = 0; r < R; ++r) v[r * V + c] += bias;
    }
    if constexpr (kEpi == Epi::kBiasTanh) TanhAll<R * V>(v);
  } else if constexpr (kEpi == Epi::kTanhGrad) {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < V; ++c) {
        const Vec y = Load(e.y + r * e.ldy + c * kLanes);
        v[r * V + c] *= 1.0f - y * y;
      }
    }
  }
}

// C rows [0, R) x cols [0, kCols) (+)= op(A) rows [0, R) x B panel (k x kCols, stride ldb),
// where op(A) is A (R x k, stride lda) or, kTransA, the transpose of A (k x R, stride lda); then
// the epilogue on each vector.
template <int R, bool kTransA, Epi kEpi>
inline void Block(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                  bool accumulate, const EpiArgs& e) {
  Vec acc[R * 2];
  for (int r = 0; r < R; ++r) {
    acc[2 * r] = accumulate ? Load(c + r * ldc) : Splat(0.0f);
    acc[2 * r + 1] = accumulate ? Load(c + r * ldc + kLanes) : Splat(0.0f);
  }
  for (int p = 0; p < k; ++p) {
    const Vec b0 = Load(b + p * ldb);
    const Vec b1 = Load(b + p * ldb + kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec av = Splat(kTransA ? a[p * lda + r] : a[r * lda + p]);
      acc[2 * r] += av * b0;
      acc[2 * r + 1] += av * b1;
    }
  }
  Finish<kEpi, R, 2>(acc, e);
  for (int r = 0; r < R; ++r) {
    Store(c + r * ldc, acc[2 * r]);
    Store(c + r * ldc + kLanes, acc[2 * r + 1]);
  }
}

// The same with one vector of columns: C rows [0, R) x cols [0, kLanes).
template <int R, bool kTransA, Epi kEpi>
inline void Block1(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                   bool accumulate, const EpiArgs& e) {
  Vec acc[R];
  for (int r = 0; r < R; ++r) acc[r] = accumulate ? Load(c + r * ldc) : Splat(0.0f);
  for (int p = 0; p < k; ++p) {
    const Vec b0 = Load(b + p * ldb);
    for (int r = 0; r < R; ++r) acc[r] += Splat(kTransA ? a[p * lda + r] : a[r * lda + p]) * b0;
  }
  Finish<kEpi, R, 1>(acc, e);
  for (int r = 0; r < R; ++r) Store(c + r * ldc, acc[r]);
}

// Block (kWide) or Block1 with R = rows, 1 <= rows <= 8.
template <bool kWide, bool kTransA, Epi kEpi>
inline void Rows(int rows, int k, const float* a, int lda, const float* b, int ldb, float* c,
                 int ldc, bool accumulate, const EpiArgs& e) {
#define HEADROOM_ROWS_CASE(R)                                             \
  case R:                                                                 \
    if constexpr (kWide) {                                                \
      Block<R, kTransA, kEpi>(k, a, lda, b, ldb, c, ldc, accumulate, e);  \
    } else {                                                              \
      Block1<R, kTransA, kEpi>(k, a, lda, b, ldb, c, ldc, accumulate, e); \
    }                                                                     \
    break;
  switch (rows) {
    HEADROOM_ROWS_CASE(8)
    HEADROOM_ROWS_CASE(7)
    HEADROOM_ROWS_CASE(6)
    HEADROOM_ROWS_CASE(5)
    HEADROOM_ROWS_CASE(4)
    HEADROOM_ROWS_CASE(3)
    HEADROOM_ROWS_CASE(2)
    HEADROOM_ROWS_CASE(1)
    default:
      break;
  }
#undef HEADROOM_ROWS_CASE
}

// Where row i of op(A) starts.
template <bool kTransA>
inline const float* RowOf(const float* a, int lda, int i) {
  return kTransA ? a + i : a + i * lda;
}

// The epilogue alone, on C (m x n, stride ldc): vectors along each row, the last few columns
// through a zero-padded vector.
template <Epi kEpi>
void Apply(int m, int n, float* c, int ldc, const EpiArgs& e) {
  if constexpr (kEpi == Epi::kNone) return;
  const int full = n / kLanes * kLanes;
  float tail[kLanes], bias[kLanes], y[kLanes];
  for (int i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    const EpiArgs ei = e.At(i, 0);
    for (int j = 0; j < full; j += kLanes) {
      Vec v = Load(row + j);
      Finish<kEpi, 1, 1>(&v, ei.At(0, j));
      Store(row + j, v);
    }
    if (full == n) continue;
    if constexpr (kEpi == Epi::kBias) {  // one addition each: no need of a vector
      for (int j = full; j < n; ++j) row[j] += ei.bias[j];
      continue;
    }
    for (int j = 0; j < kLanes; ++j) {
      const bool in = full + j < n;
      tail[j] = in ? row[full + j] : 0.0f;
      bias[j] = in && ei.bias != nullptr ? ei.bias[full + j] : 0.0f;
      y[j] = in && ei.y != nullptr ? ei.y[full + j] : 0.0f;
    }
    Vec v = Load(tail);
    Finish<kEpi, 1, 1>(&v, EpiArgs{bias, y, 0});
    Store(tail, v);
    for (int j = full; j < n; ++j) row[j] = tail[j - full];
  }
}

template <bool kTransA, Epi kEpi>
void GemmChunk(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
               int ldc, bool accumulate, const EpiArgs& e) {
  static thread_local float panel[kMaxK * kCols];
  float tmp[kRows * kCols];
  const int full = n / kCols * kCols;
  for (int j = 0; j < full; j += kCols) {
    for (int i = 0; i < m; i += kRows) {
      const int rows = m - i < kRows ? m - i : kRows;
      Rows<true, kTransA, kEpi>(rows, k, RowOf<kTransA>(a, lda, i), lda, b + j, ldb,
                                c + i * ldc + j, ldc, accumulate, e.At(i, j));
    }
  }
  const int rest = n - full;
  if (rest == 0) return;
  // The last columns through a zero-padded panel: one vector wide where they fit in one. The
  // epilogue's operands are padded the same way.
  const int width = rest <= kLanes ? kLanes : kCols;
  for (int p = 0; p < k; ++p) {
    for (int j = 0; j < width; ++j) panel[p * width + j] = j < rest ? b[p * ldb + full + j] : 0.0f;
  }
  float bias[kCols], y[kRows * kCols];
  for (int j = 0; j < width; ++j) bias[j] = j < rest && e.bias != nullptr ? e.bias[full + j] : 0.0f;
  for (int i = 0; i < m; i += kRows) {
    const int rows = m - i < kRows ? m - i : kRows;
    const EpiArgs ei = e.At(i, full);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < width; ++j) {
        const bool in = j < rest;
        tmp[r * width + j] = accumulate && in ? c[(i + r) * ldc + full + j] : 0.0f;
        y[r * width + j] = in && ei.y != nullptr ? ei.y[r * ei.ldy + j] : 0.0f;
      }
    }
    const EpiArgs padded{bias, y, width};
    if (width == kLanes) {
      Rows<false, kTransA, kEpi>(rows, k, RowOf<kTransA>(a, lda, i), lda, panel, width, tmp, width,
                                 accumulate, padded);
    } else {
      Rows<true, kTransA, kEpi>(rows, k, RowOf<kTransA>(a, lda, i), lda, panel, width, tmp, width,
                                accumulate, padded);
    }
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < rest; ++j) c[(i + r) * ldc + full + j] = tmp[r * width + j];
    }
  }
}

// One column (n = 1, B a contiguous vector), A not transposed: a dot product per row, vectorised
// along k, its lanes then added up in order. kLanes rows at a time, so that their additions (a
// chain of dependent ones per row) overlap.
void GemvRows(int m, int k, const float* a, int lda, const float* b, float* c, int ldc,
              bool accumulate) {
  const int full = k / kLanes * kLanes;
  float lanes[kLanes * kLanes];  // lane l of row r's products at [r * kLanes + l]
  float sums[kLanes];
  int i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    for (int r = 0; r < kLanes; ++r) {
      const float* row = a + (i + r) * lda;
      Vec acc = Splat(0.0f);
      for (int p = 0; p < full; p += kLanes) acc += Load(row + p) * Load(b + p);
      Store(lanes + r * kLanes, acc);
      sums[r] = 0.0f;
    }
    for (int l = 0; l < kLanes; ++l) {
      for (int r = 0; r < kLanes; ++r) sums[r] += lanes[r * kLanes + l];
    }
    for (int r = 0; r < kLanes; ++r) {
      const float* row = a + (i + r) * lda;
      float sum = sums[r];
      for (int p = full; p < k; ++p) sum += row[p] * b[p];
      c[(i + r) * ldc] = accumulate ? c[(i + r) * ldc] + sum : sum;
    }
  }
  for (; i < m; ++i) {
    const float* row = a + i * lda;
    Vec acc = Splat(0.0f);
    for (int p = 0; p < full; p += kLanes) acc += Load(row + p) * Load(b + p);
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum += acc[l];
    for (int p = full; p < k; ++p) sum += row[p] * b[p];
    c[i * ldc] = accumulate ? c[i * ldc] + sum : sum;
  }
}

// C (+)= op(A) B, then the epilogue on C.
template <bool kTransA, Epi kEpi>
void GemmAny(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate, const EpiArgs& e = {}) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
      }
    }
    Apply<kEpi>(m, n, c, ldc, e);
    return;
  }
  if (!kTransA && n == 1 && ldb == 1) {
    GemvRows(m, k, a, lda, b, c, ldc, accumulate);
    Apply<kEpi>(m, n, c, ldc, e);
    return;
  }
  if (k <= kMaxK) {
    GemmChunk<kTransA, kEpi>(m, n, k, a, lda, b, ldb, c, ldc, accumulate, e);
    return;
  }
  for (int p = 0; p < k; p += kMaxK) {
    const int kk = k - p < kMaxK ? k - p : kMaxK;
    GemmChunk<kTransA, Epi::kNone>(m, n, kk, kTransA ? a + p * lda : a + p, lda, b + p * ldb, ldb,
                                   c, ldc, accumulate || p > 0, e);
  }
  Apply<kEpi>(m, n, c, ldc, e);
}

void Gemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
          bool accumulate) {
  GemmAny<false, Epi::kNone>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void GemmTn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
            int ldc, bool accumulate) {
  GemmAny<true, Epi::kNone>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void GemmBiasTanh(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                  int ldc, const float* bias, bool tanh) {
  const EpiArgs e{bias, nullptr, 0};
  if (tanh) {
    GemmAny<false, Epi::kBiasTanh>(m, n, k, a, lda, b, ldb, c, ldc, false, e);
  } else {
    GemmAny<false, Epi::kBias>(m, n, k, a, lda, b, ldb, c, ldc, false, e);
  }
}

void GemmTanhBackward(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                      float* c, int ldc, const float* y, int ldy) {
  GemmAny<false, Epi::kTanhGrad>(m, n, k, a, lda, b, ldb, c, ldc, false, EpiArgs{nullptr, y, ldy});
}

// Each column summed row by row, in order, from sums[j]: four vectors of columns at a time, so
// that four chains of additions overlap.
void ColumnSums(int m, int n, const float* a, int lda, float* sums) {
  constexpr int kWays = 4;
  int j = 0;
  for (; j + kWays * kLanes <= n; j += kWays * kLanes) {
    Vec acc[kWays];
    for (int q = 0; q < kWays; ++q) acc[q] = Load(sums + j + q * kLanes);
    for (int i = 0; i < m; ++i) {
      for (int q = 0; q < kWays; ++q) acc[q] += Load(a + i * lda + j + q * kLanes);
    }
    for (int q = 0; q < kWays; ++q) Store(sums + j + q * kLanes, acc[q]);
  }
  for (; j + kLanes <= n; j += kLanes) {
    Vec acc = Load(sums + j);
    for (int i = 0; i < m; ++i) acc += Load(a + i * lda + j);
    Store(sums + j, acc);
  }
  if (j == n || m <= 0) return;
  // The last columns in one vector: each row read a whole vector wide where that stays before
  // the matrix's last element (the lanes past n add up what follows and are thrown away), the
  // last rows through a zero-padded copy.
  const int rest = n - j;
  float tail[kLanes], row[kLanes];
  for (int l = 0; l < kLanes; ++l) tail[l] = l < rest ? sums[j + l] : 0.0f;
  Vec acc = Load(tail);
  const long end = static_cast<long>(m - 1) * lda + n;
  int i = 0;
  for (; i < m && static_cast<long>(i) * lda + j + kLanes <= end; ++i) acc += Load(a + i * lda + j);
  for (; i < m; ++i) {
    for (int l = 0; l < kLanes; ++l) row[l] = l < rest ? a[i * lda + j + l] : 0.0f;
    acc += Load(row);
  }
  Store(tail, acc);
  for (int l = 0; l < rest; ++l) sums[j + l] = tail[l];
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
