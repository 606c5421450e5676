#include "kernels/qmatmul_bf16.h"

// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports inside the inlined intrinsics (_mm512_reduce_add_ps); the values are all written first.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "formats/codec.h"
#include "formats/minifloat.h"

namespace lowbit {
namespace {

bool CpuHasBf16Flags() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return has;
}

#define LOWBIT_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

template <size_t kRows, size_t kTokens>
LOWBIT_BF16 void Tile(const uint16_t* w, size_t cols, const uint16_t* x, float* y, size_t y_stride, size_t r0,
                      size_t t0) {
  __m512 acc[kRows][kTokens];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  for (size_t i = 0; i < cols; i += 32) {
    __m512bh xv[kTokens];
    for (size_t t = 0; t < kTokens; ++t) xv[t] = (__m512bh)_mm512_loadu_si512(x + (t0 + t) * cols + i);
    for (size_t r = 0; r < kRows; ++r) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + (r0 + r) * cols + i);
      for (size_t t = 0; t < kTokens; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
    }
  }
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTokens; ++t) y[(t0 + t) * y_stride + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <size_t kRows>
void RowBlock(const uint16_t* w, size_t cols, const uint16_t* x, size_t t_begin, size_t t_end, float* y,
              size_t y_stride, size_t r0) {
  size_t t = t_begin;
  for (; t + 4 <= t_end; t += 4) Tile<kRows, 4>(w, cols, x, y, y_stride, r0, t);
  for (; t < t_end; ++t) Tile<kRows, 1>(w, cols, x, y, y_stride, r0, t);
}

const uint16_t* Bf16Codes(const QuantizedTensor& w) { return reinterpret_cast<const uint16_t*>(w.codes().data()); }

}  // namespace

bool CpuHasBf16Dot() { return CpuHasBf16Flags(); }

bool HasBf16DotKernel(const QuantizedTensor& w) {
  return CpuHasBf16Flags() && w.scheme().element->minifloat == &kBf16 && w.cols() % 32 == 0;
}

std::vector<uint16_t> ToBf16Activations(const float* x, size_t n_tokens, size_t cols) {
  std::vector<uint16_t> out(n_tokens * cols);
  Fp32ToBf16Row(x, out.size(), out.data());
  return out;
}

void Bf16DotRows(const uint16_t* w, size_t cols, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                 float* y, size_t y_stride) {
  LOWBIT_CHECK(CpuHasBf16Flags() && cols % 32 == 0);
  constexpr size_t kTokenChunk = 64;  // activations of a chunk stay in L2 while the rows pass
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t t1 = std::min(n_tokens, t0 + kTokenChunk);
    size_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) RowBlock<4>(w, cols, x, t0, t1, y, y_stride, r);
    for (; r < row_end; ++r) RowBlock<1>(w, cols, x, t0, t1, y, y_stride, r);
  }
}

void Bf16DotRows(const QuantizedTensor& w, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                 float* y, size_t y_stride) {
  LOWBIT_CHECK(HasBf16DotKernel(w));
  Bf16DotRows(Bf16Codes(w), w.cols(), x, n_tokens, row_begin, row_end, y, y_stride);
}

void Bf16DotRowsRef(const QuantizedTensor& w, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                    float* y, size_t y_stride) {
  const size_t cols = w.cols();
  const uint16_t* codes = Bf16Codes(w);
  for (size_t r = row_begin; r < row_end; ++r)
    for (size_t t = 0; t < n_tokens; ++t) {
      double sum = 0;
      for (size_t i = 0; i < cols; ++i)
        sum += static_cast<double>(Bf16ToFp32(codes[r * cols + i])) * Bf16ToFp32(x[t * cols + i]);
      y[t * y_stride + r] = static_cast<float>(sum);
    }
}

}  // namespace lowbit
