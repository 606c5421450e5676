// Solver kernels: a double dot product with four vector accumulators, four dot products of one row
// against four others in one pass, sixteen of four rows against four (the blocked Cholesky's and
// triangular inverse's inner products), and a rank-k row update that keeps a tile of eight rows in
// registers, so each vector of u is loaded once per tile instead of once per row (the update streams
// k rows of u; per row, that traffic set GPTQ's speed).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/linalg.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "quant/linalg.h"

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

double DotF64Impl(const double* HWY_RESTRICT a, const double* HWY_RESTRICT b, size_t n) {
  const hn::ScalableTag<double> d;
  const size_t N = hn::Lanes(d);
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), acc1);
    acc2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), acc2);
    acc3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), acc3);
  }
  for (; i + N <= n; i += N) acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
  double sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3))));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void DotF64Rows4Impl(const double* HWY_RESTRICT a, const double* HWY_RESTRICT b, size_t b_stride, size_t n,
                     double* HWY_RESTRICT out) {
  const hn::ScalableTag<double> d;
  const size_t N = hn::Lanes(d);
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto av = hn::LoadU(d, a + i);
    acc0 = hn::MulAdd(av, hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(av, hn::LoadU(d, b + b_stride + i), acc1);
    acc2 = hn::MulAdd(av, hn::LoadU(d, b + 2 * b_stride + i), acc2);
    acc3 = hn::MulAdd(av, hn::LoadU(d, b + 3 * b_stride + i), acc3);
  }
  const hn::Vec<decltype(d)> acc[4] = {acc0, acc1, acc2, acc3};
  for (size_t c = 0; c < 4; ++c) {
    double sum = hn::GetLane(hn::SumOfLanes(d, acc[c]));
    for (size_t t = i; t < n; ++t) sum += a[t] * b[c * b_stride + t];
    out[c] = sum;
  }
}

// Sixteen dot products, four rows of a against four rows of b, in one pass: each vector loaded feeds
// four FMAs (sixteen independent accumulators), where one row of a against four of b loads five
// vectors per four FMAs and waits on b's rows from L2.
void DotF64Rows4x4Impl(const double* HWY_RESTRICT a, size_t a_stride, const double* HWY_RESTRICT b, size_t b_stride,
                       size_t n, double* HWY_RESTRICT out) {
  const hn::ScalableTag<double> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> acc[4][4];
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 4; ++c) acc[r][c] = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto b0 = hn::LoadU(d, b + i), b1 = hn::LoadU(d, b + b_stride + i);
    const auto b2 = hn::LoadU(d, b + 2 * b_stride + i), b3 = hn::LoadU(d, b + 3 * b_stride + i);
    for (size_t r = 0; r < 4; ++r) {
      const auto av = hn::LoadU(d, a + r * a_stride + i);
      acc[r][0] = hn::MulAdd(av, b0, acc[r][0]);
      acc[r][1] = hn::MulAdd(av, b1, acc[r][1]);
      acc[r][2] = hn::MulAdd(av, b2, acc[r][2]);
      acc[r][3] = hn::MulAdd(av, b3, acc[r][3]);
    }
  }
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 4; ++c) {
      double sum = hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
      for (size_t t = i; t < n; ++t) sum += a[r * a_stride + t] * b[c * b_stride + t];
      out[r * 4 + c] = sum;
    }
}

template <size_t kRows>
HWY_INLINE void SubtractTile(float* HWY_RESTRICT rows, size_t row_stride, const float* HWY_RESTRICT coef,
                             size_t coef_stride, const float* HWY_RESTRICT u, size_t u_stride, size_t k, size_t begin,
                             size_t end) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t j = begin;
  for (; j + N <= end; j += N) {
    hn::Vec<decltype(d)> acc[kRows];
    for (size_t r = 0; r < kRows; ++r) acc[r] = hn::LoadU(d, rows + r * row_stride + j);
    for (size_t i = 0; i < k; ++i) {
      const auto uv = hn::LoadU(d, u + i * u_stride + j);
      for (size_t r = 0; r < kRows; ++r) acc[r] = hn::NegMulAdd(hn::Set(d, coef[r * coef_stride + i]), uv, acc[r]);
    }
    for (size_t r = 0; r < kRows; ++r) hn::StoreU(acc[r], d, rows + r * row_stride + j);
  }
  for (; j < end; ++j)  // the tail, with the same fused arithmetic
    for (size_t r = 0; r < kRows; ++r) {
      float v = rows[r * row_stride + j];
      for (size_t i = 0; i < k; ++i) v = std::fma(-coef[r * coef_stride + i], u[i * u_stride + j], v);
      rows[r * row_stride + j] = v;
    }
}

void SubtractProductsImpl(float* HWY_RESTRICT rows, size_t n_rows, size_t row_stride, const float* HWY_RESTRICT coef,
                          size_t coef_stride, const float* HWY_RESTRICT u, size_t u_stride, size_t k, size_t begin,
                          size_t end) {
  size_t r = 0;
  for (; r + 8 <= n_rows; r += 8)
    SubtractTile<8>(rows + r * row_stride, row_stride, coef + r * coef_stride, coef_stride, u, u_stride, k, begin, end);
  for (; r + 4 <= n_rows; r += 4)
    SubtractTile<4>(rows + r * row_stride, row_stride, coef + r * coef_stride, coef_stride, u, u_stride, k, begin, end);
  for (; r < n_rows; ++r)
    SubtractTile<1>(rows + r * row_stride, row_stride, coef + r * coef_stride, coef_stride, u, u_stride, k, begin, end);
}

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(DotF64Impl);
HWY_EXPORT(DotF64Rows4Impl);
HWY_EXPORT(DotF64Rows4x4Impl);
HWY_EXPORT(SubtractProductsImpl);

double DotF64(const double* a, const double* b, size_t n) { return HWY_DYNAMIC_DISPATCH(DotF64Impl)(a, b, n); }

double DotF64Ref(const double* a, const double* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void DotF64Rows4(const double* a, const double* b, size_t b_stride, size_t n, double* out) {
  HWY_DYNAMIC_DISPATCH(DotF64Rows4Impl)(a, b, b_stride, n, out);
}

void DotF64Rows4Ref(const double* a, const double* b, size_t b_stride, size_t n, double* out) {
  for (size_t c = 0; c < 4; ++c) out[c] = DotF64Ref(a, b + c * b_stride, n);
}

void DotF64Rows4x4(const double* a, size_t a_stride, const double* b, size_t b_stride, size_t n, double* out) {
  HWY_DYNAMIC_DISPATCH(DotF64Rows4x4Impl)(a, a_stride, b, b_stride, n, out);
}

void DotF64Rows4x4Ref(const double* a, size_t a_stride, const double* b, size_t b_stride, size_t n, double* out) {
  for (size_t r = 0; r < 4; ++r) DotF64Rows4Ref(a + r * a_stride, b, b_stride, n, out + r * 4);
}

void SubtractProducts(float* rows, size_t n_rows, size_t row_stride, const float* coef, size_t coef_stride,
                      const float* u, size_t u_stride, size_t k, size_t begin, size_t end) {
  HWY_DYNAMIC_DISPATCH(SubtractProductsImpl)(rows, n_rows, row_stride, coef, coef_stride, u, u_stride, k, begin, end);
}

void SubtractProductsRef(float* rows, size_t n_rows, size_t row_stride, const float* coef, size_t coef_stride,
                         const float* u, size_t u_stride, size_t k, size_t begin, size_t end) {
  for (size_t r = 0; r < n_rows; ++r)
    for (size_t i = 0; i < k; ++i)
      for (size_t j = begin; j < end; ++j) rows[r * row_stride + j] -= coef[r * coef_stride + i] * u[i * u_stride + j];
}
}  // namespace lowbit
#endif
