// fp32 dot products with two accumulators per token; one weight row is reused across a block of
// four tokens so it is loaded from memory once per block.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dot.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/dot.h"

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

void DotRowsImpl(const float* HWY_RESTRICT w, size_t cols, size_t row_begin, size_t row_end,
                 const float* HWY_RESTRICT x, size_t n_tokens, float* HWY_RESTRICT y, size_t y_stride) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t r = row_begin; r < row_end; ++r) {
    const float* row = w + r * cols;
    size_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) {
      const float* x0 = x + t * cols;
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      size_t i = 0;
      for (; i + N <= cols; i += N) {
        const auto wv = hn::LoadU(d, row + i);
        a0 = hn::MulAdd(wv, hn::LoadU(d, x0 + i), a0);
        a1 = hn::MulAdd(wv, hn::LoadU(d, x0 + cols + i), a1);
        a2 = hn::MulAdd(wv, hn::LoadU(d, x0 + 2 * cols + i), a2);
        a3 = hn::MulAdd(wv, hn::LoadU(d, x0 + 3 * cols + i), a3);
      }
      float s[4] = {hn::GetLane(hn::SumOfLanes(d, a0)), hn::GetLane(hn::SumOfLanes(d, a1)), hn::GetLane(hn::SumOfLanes(d, a2)), hn::GetLane(hn::SumOfLanes(d, a3))};
      for (; i < cols; ++i)
        for (int k = 0; k < 4; ++k) s[k] += row[i] * x0[k * cols + i];
      for (int k = 0; k < 4; ++k) y[(t + k) * y_stride + r] = s[k];
    }
    for (; t < n_tokens; ++t) y[t * y_stride + r] = DotImpl(row, x + t * cols, cols);
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
