#include "kernels/qmatmul_int8.h"

// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports inside the inlined intrinsics (_mm512_reduce_add_ps); the values are all written first.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"

namespace lowbit {
namespace {

// What the kernel needs to know of a weight: bits, block, the affine offset (table[c] = c + offset).
struct Layout {
  int bits = 0;
  size_t block = 0, group = 0, groups = 0;
  float offset = 0;
};

std::optional<Layout> LayoutOf(const QuantizedTensor& w) {
  const ElementFormat& e = *w.scheme().element;
  if (e.kind != ElementKind::kInt || (e.bits != 4 && e.bits != 8)) return std::nullopt;
  Layout l;
  l.bits = e.bits;
  l.block = e.bits == 4 ? 128 : 64;
  l.groups = std::max<uint64_t>(w.grid().grid_cols, 1);
  l.group = l.groups == 1 ? w.cols() : w.grid().cell_cols;
  l.offset = w.decode_table()[0];
  if (w.cols() % l.block != 0 || l.group % l.block != 0) return std::nullopt;
  return l;
}

// Per row: group scales and biases (offset and zero-point, times scale), as the fp32 kernel does.
void RowScales(const QuantizedTensor& w, const Layout& l, size_t r, float* scales, float* biases) {
  const bool asym = w.scheme().asymmetric();
  w.RowScales(r, scales, asym ? biases : nullptr);
  for (size_t g = 0; g < l.groups; ++g) biases[g] = (asym ? biases[g] : 0.0f) + l.offset * scales[g];
}

bool CpuHasVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

#define LOWBIT_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

template <int kBits, size_t kTokens>
LOWBIT_VNNI void RowsVnni(const QuantizedTensor& w, const Layout& l, const Int8Activations& a, size_t t0,
                          size_t row_begin, size_t row_end, float* y, size_t y_stride) {
  const size_t cols = w.cols(), blocks = cols / l.block, per_group = l.group / l.block;
  std::vector<float> scales(l.groups), biases(l.groups);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  for (size_t r = row_begin; r < row_end; ++r) {
    RowScales(w, l, r, scales.data(), biases.data());
    const uint8_t* row = w.codes().data() + r * w.row_bytes();
    __m512 acc[kTokens];
    for (size_t t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
    for (size_t g = 0, b = 0; g < l.groups; ++g) {  // groups outside blocks: no division per block
      const float ws = scales[g];
      for (const size_t group_end = b + per_group; b < group_end; ++b) {
        const __m512i codes = _mm512_loadu_si512(row + b * 64);
        for (size_t t = 0; t < kTokens; ++t) {
          const int8_t* xq = a.values.data() + (t0 + t) * cols + b * l.block;
          __m512i dot = _mm512_setzero_si512();
          if constexpr (kBits == 4) {
            dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(codes, low_nibbles), _mm512_loadu_si512(xq));
            dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(_mm512_srli_epi16(codes, 4), low_nibbles),
                                      _mm512_loadu_si512(xq + 64));
          } else {
            dot = _mm512_dpbusd_epi32(dot, codes, _mm512_loadu_si512(xq));
          }
          const float s = ws * a.scales[(t0 + t) * blocks + b];
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(s), acc[t]);
        }
      }
    }
    for (size_t t = 0; t < kTokens; ++t) {
      float sum = _mm512_reduce_add_ps(acc[t]);
      const float* sums = a.group_sums.data() + (t0 + t) * l.groups;
      for (size_t g = 0; g < l.groups; ++g) sum += biases[g] * sums[g];
      y[(t0 + t) * y_stride + r] = sum;
    }
  }
}

}  // namespace

bool Int8DotKernelFits(const QuantizedTensor& w) { return LayoutOf(w).has_value(); }

bool HasInt8DotKernel(const QuantizedTensor& w) { return CpuHasVnni() && Int8DotKernelFits(w); }

Int8Activations QuantizeActivationsInt8(const QuantizedTensor& w, const float* x, size_t n_tokens) {
  const std::optional<Layout> l = LayoutOf(w);
  LOWBIT_CHECK(l.has_value());
  Int8Activations a;
  a.n_tokens = n_tokens;
  a.cols = w.cols();
  a.block = l->block;
  const size_t blocks = a.cols / a.block, per_group = l->group / a.block;
  a.values.resize(n_tokens * a.cols);
  a.scales.resize(n_tokens * blocks);
  a.group_sums.assign(n_tokens * l->groups, 0.0f);
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t b = 0; b < blocks; ++b) {
      const float* src = x + t * a.cols + b * a.block;
      int8_t* dst = a.values.data() + t * a.cols + b * a.block;
      float amax = 0;
      for (size_t i = 0; i < a.block; ++i) amax = std::max(amax, std::fabs(src[i]));
      const float scale = amax / 127.0f, inverse = amax > 0 ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (size_t i = 0; i < a.block; ++i) {
        const int q = static_cast<int>(std::nearbyint(src[i] * inverse));
        sum += q;
        // int4 codes hold element 2k in the low nibble of byte k: even inputs first, then odd.
        const size_t at = l->bits == 4 ? (i % 2) * (a.block / 2) + i / 2 : i;
        dst[at] = static_cast<int8_t>(q);
      }
      a.scales[t * blocks + b] = scale;
      a.group_sums[t * l->groups + b / per_group] += scale * static_cast<float>(sum);
    }
  return a;
}

void Int8DotRows(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride) {
  const std::optional<Layout> l = LayoutOf(w);
  LOWBIT_CHECK(l.has_value() && CpuHasVnni());
  auto run = [&]<int kBits>() {
    size_t t = 0;
    for (; t + 4 <= a.n_tokens; t += 4) RowsVnni<kBits, 4>(w, *l, a, t, row_begin, row_end, y, y_stride);
    for (; t < a.n_tokens; ++t) RowsVnni<kBits, 1>(w, *l, a, t, row_begin, row_end, y, y_stride);
  };
  if (l->bits == 4) run.template operator()<4>();
  else run.template operator()<8>();
}

void Int8DotRowsRef(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                    size_t y_stride) {
  const std::optional<Layout> l = LayoutOf(w);
  LOWBIT_CHECK(l.has_value());
  const size_t cols = w.cols(), blocks = cols / l->block, per_group = l->group / l->block;
  std::vector<float> scales(l->groups), biases(l->groups);
  for (size_t r = row_begin; r < row_end; ++r) {
    RowScales(w, *l, r, scales.data(), biases.data());
    const uint8_t* row = w.codes().data() + r * w.row_bytes();
    for (size_t t = 0; t < a.n_tokens; ++t) {
      double sum = 0;
      for (size_t b = 0; b < blocks; ++b) {
        int64_t dot = 0;
        for (size_t i = 0; i < l->block; ++i) {
          const size_t element = b * l->block + i;
          const int code = l->bits == 4 ? (row[element / 2] >> (4 * (element % 2))) & 0xF : row[element];
          const size_t at = l->bits == 4 ? (i % 2) * (l->block / 2) + i / 2 : i;
          dot += code * a.values[t * cols + b * l->block + at];
        }
        sum += static_cast<double>(dot) * scales[b / per_group] * a.scales[t * blocks + b];
      }
      for (size_t g = 0; g < l->groups; ++g) sum += static_cast<double>(biases[g]) * a.group_sums[t * l->groups + g];
      y[t * y_stride + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace lowbit
