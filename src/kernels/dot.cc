// fp32 dot products with two accumulators per token; one weight row is reused across a block of
// four tokens so it is loaded from memory once per block.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dot.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/dot.h"
#include "kernels/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotImpl(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), acc1);
  }
  for (; i + N <= n; i += N) acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}


// One token block (up to 4 tokens) against a block of up to 4 weight rows: a 4 x 4 tile of
// accumulators, so each loaded vector feeds four FMAs.
template <size_t kRows, size_t kTokens>
HWY_INLINE void Tile(const float* HWY_RESTRICT w, size_t cols, size_t r0, const float* HWY_RESTRICT x, size_t t0,
                     float* HWY_RESTRICT y, size_t y_stride) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> acc[kRows][kTokens];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTokens; ++t) acc[r][t] = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    hn::Vec<decltype(d)> xv[kTokens];
    for (size_t t = 0; t < kTokens; ++t) xv[t] = hn::LoadU(d, x + (t0 + t) * cols + i);
    for (size_t r = 0; r < kRows; ++r) {
      const auto wv = hn::LoadU(d, w + (r0 + r) * cols + i);
      for (size_t t = 0; t < kTokens; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kRows == 4) {
    if (i == cols) {  // four rows of a token are adjacent in y: one reduction, one store
      for (size_t t = 0; t < kTokens; ++t)
        hn::StoreU(SumOfFour(d, acc[0][t], acc[1][t], acc[2][t], acc[3][t]), hn::Full128<float>(),
                   y + (t0 + t) * y_stride + r0);
      return;
    }
  }
#endif
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTokens; ++t) {
      float s = hn::GetLane(hn::SumOfLanes(d, acc[r][t]));
      for (size_t k = i; k < cols; ++k) s += w[(r0 + r) * cols + k] * x[(t0 + t) * cols + k];
      y[(t0 + t) * y_stride + r0 + r] = s;
    }
}

template <size_t kRows>
HWY_INLINE void RowBlock(const float* HWY_RESTRICT w, size_t cols, size_t r0, const float* HWY_RESTRICT x,
                         size_t t_begin, size_t t_end, float* HWY_RESTRICT y, size_t y_stride) {
  size_t t = t_begin;
  for (; t + 4 <= t_end; t += 4) Tile<kRows, 4>(w, cols, r0, x, t, y, y_stride);
  for (; t < t_end; ++t) Tile<kRows, 1>(w, cols, r0, x, t, y, y_stride);
}

void DotRowsImpl(const float* HWY_RESTRICT w, size_t cols, size_t row_begin, size_t row_end,
                 const float* HWY_RESTRICT x, size_t n_tokens, float* HWY_RESTRICT y, size_t y_stride) {
  // Tokens in chunks that stay in L2 while every row block of this thread passes over them.
  constexpr size_t kTokenChunk = 32;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t t1 = t0 + kTokenChunk < n_tokens ? t0 + kTokenChunk : n_tokens;
    size_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) RowBlock<4>(w, cols, r, x, t0, t1, y, y_stride);
    for (; r < row_end; ++r) RowBlock<1>(w, cols, r, x, t0, t1, y, y_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(DotImpl);
HWY_EXPORT(DotRowsImpl);

float Dot(const float* a, const float* b, size_t n) { return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n); }

void DotRows(const float* w, size_t cols, size_t row_begin, size_t row_end, const float* x, size_t n_tokens,
             float* y, size_t y_stride) {
  HWY_DYNAMIC_DISPATCH(DotRowsImpl)(w, cols, row_begin, row_end, x, n_tokens, y, y_stride);
}

void DotRowsRef(const float* w, size_t cols, size_t row_begin, size_t row_end, const float* x, size_t n_tokens,
                float* y, size_t y_stride) {
  for (size_t r = row_begin; r < row_end; ++r)
    for (size_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (size_t i = 0; i < cols; ++i) s += static_cast<double>(w[r * cols + i]) * x[t * cols + i];
      y[t * y_stride + r] = static_cast<float>(s);
    }
}
}  // namespace lowbit
#endif
