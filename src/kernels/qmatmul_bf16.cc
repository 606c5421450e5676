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

LOWBIT_BF16 inline __m256 FoldHalves(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// The sums of four accumulators, as four adjacent floats.
LOWBIT_BF16 inline __m128 SumOfFour(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 ab = _mm256_hadd_ps(FoldHalves(a), FoldHalves(b)), cd = _mm256_hadd_ps(FoldHalves(c), FoldHalves(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // per 128-bit half: partial sums of a, b, c, d
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// 32 weights of a row as bf16, from the row's storage.
struct Bf16Weights {
  const uint16_t* codes;
  size_t stride;  // elements per row
  LOWBIT_BF16 __m512bh Load(size_t r, size_t i) const {
    // Each row's line 2 KB ahead: the hardware prefetcher falls behind four row streams; bf16 GEMV
    // went from 0.95-0.99 to 1.05-1.16 of the triad.
    _mm_prefetch(reinterpret_cast<const char*>(codes + r * stride + i) + 2048, _MM_HINT_T0);
    return (__m512bh)_mm512_loadu_si512(codes + r * stride + i);
  }
};

// FP8 E4M3 widened to bf16 exactly, 2^-8 times its value (the row scale carries 2^8), 64 codes at a
// time read as 32 16-bit lanes: the low bytes (even columns) are the vector at i % 64 == 0, the high
// bytes (odd columns) the one at i % 64 == 32, so the activations come de-interleaved per 64 columns
// (EvenOddActivations). A code's exponent and mantissa bits land under bf16's with exponent bias
// 127 - 15, so the bias is an OR, not an add: shift, (and, or), sign select. Exponent 0 (zero and the
// 7 subnormals, m * 2^-17 after the 2^8) takes a table lookup only in the 32 lanes that hold one:
// a branch taken rarely. Against widening 32 bytes to 32 lanes (vpmovzxbw) with the lookup always
// done: 9.0 -> TBD GB/s on one core.
struct E4m3Weights {
  const uint8_t* codes;
  size_t stride;                // bytes per row
  const uint16_t* subnormals;   // 32 entries, 64-byte aligned: bf16 bits of m * 2^-17, m = 0..7
  LOWBIT_BF16 __m512bh Load(size_t r, size_t i) const {
    const uint8_t* block = codes + r * stride + (i & ~size_t{63});
    const __m512i w = _mm512_loadu_si512(block);
    const bool odd = i & 32;
    if (!odd) _mm_prefetch(reinterpret_cast<const char*>(block) + 1024, _MM_HINT_T0);
    // Bits 10:4 = the code's exponent and mantissa; bits 13:11 = 112 in bf16's exponent field.
    const __m512i moved = odd ? _mm512_srli_epi16(w, 4) : _mm512_slli_epi16(w, 4);
    __m512i value = _mm512_ternarylogic_epi32(moved, _mm512_set1_epi16(0x7F0), _mm512_set1_epi16(0x3800), 0xEA);  // (A & B) | C
    const __mmask32 exponent_zero =
        _mm512_testn_epi16_mask(w, _mm512_set1_epi16(odd ? 0x7800 : 0x78));
    if (exponent_zero) [[unlikely]]  // vpermw reads an index's low 5 bits: the code's mantissa there
      value = _mm512_mask_permutexvar_epi16(value, exponent_zero, odd ? _mm512_srli_epi16(w, 8) : w,
                                            _mm512_load_si512(subnormals));
    // The sign (the code's bit 7) to bit 15: value bits where the mask is clear, the sign bit where set.
    const __m512i sign = odd ? w : _mm512_slli_epi16(w, 8);
    return (__m512bh)_mm512_ternarylogic_epi32(_mm512_set1_epi16(static_cast<int16_t>(0x8000)), sign, value, 0xCA);  // A ? B : C
  }
};

// y[t][r] (+)= scales[r - r0] * dot(w row r, x token t) over columns [k0, k1), for kRows rows from r0
// x kTokens tokens; `scales` nullptr: no scale.
template <size_t kRows, size_t kTokens, class Weights>
LOWBIT_BF16 void Tile(const Weights& w, size_t cols, const uint16_t* x, size_t k0, size_t k1, bool accumulate,
                      const float* scales, float* y, size_t y_stride, size_t r0, size_t t0) {
  __m512 acc[kRows][kTokens];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  for (size_t i = k0; i < k1; i += 32) {
    __m512bh xv[kTokens];
    for (size_t t = 0; t < kTokens; ++t) xv[t] = (__m512bh)_mm512_loadu_si512(x + (t0 + t) * cols + i);
    for (size_t r = 0; r < kRows; ++r) {
      const __m512bh wv = w.Load(r0 + r, i);
      for (size_t t = 0; t < kTokens; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
    }
  }
  if constexpr (kRows == 4) {  // the four rows of a token are adjacent in y
    const __m128 scale = scales ? _mm_loadu_ps(scales) : _mm_set1_ps(1.0f);
    for (size_t t = 0; t < kTokens; ++t) {
      float* out = y + (t0 + t) * y_stride + r0;
      const __m128 sums = _mm_mul_ps(scale, SumOfFour(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
      _mm_storeu_ps(out, accumulate ? _mm_add_ps(_mm_loadu_ps(out), sums) : sums);
    }
  } else {
    for (size_t r = 0; r < kRows; ++r)
      for (size_t t = 0; t < kTokens; ++t) {
        float& out = y[(t0 + t) * y_stride + r0 + r];
        out = (accumulate ? out : 0.0f) + (scales ? scales[r] : 1.0f) * _mm512_reduce_add_ps(acc[r][t]);
      }
  }
}

// y[t * y_stride + r] = scales[r - row_begin] * dot(row r of w [rows x cols], x_t) for r in
// [row_begin, row_end); `scales` nullptr: none.
template <class Weights>
void MatrixRows(const Weights& w, size_t cols, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                const float* scales, float* y, size_t y_stride) {
  LOWBIT_CHECK(CpuHasBf16Flags() && cols % 32 == 0);
  // Cache blocking: a chunk of tokens over a slice of columns (256 x 2 KiB) stays in L2 while a
  // block of rows over that slice (16 x 2 KiB, in L1) passes every token tile of the chunk;
  // partial dots of later slices are added to y. A whole prefill chunk is one pass over the
  // weights. Measured here against whole-row tiles: 1.7-3.1x the fp32 kernel's FLOP rate instead
  // of 1.75x; long rows (down_proj's 11008) gain most.
  // Decode-sized batches are memory-bound: there each row is read whole, in one sequential pass.
  constexpr size_t kTokenChunk = 256, kColSlice = 1024, kRowBlock = 16, kTileTokens = 4, kSlicedFromTokens = 16;
  const auto scales_of = [&](size_t r) { return scales ? scales + (r - row_begin) : nullptr; };
  const size_t slice = n_tokens >= kSlicedFromTokens ? kColSlice : cols;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t t1 = std::min(n_tokens, t0 + kTokenChunk);
    for (size_t k0 = 0; k0 < cols; k0 += slice) {
      const size_t k1 = std::min(cols, k0 + slice);
      const bool accumulate = k0 > 0;
      for (size_t rb = row_begin; rb < row_end; rb += kRowBlock) {
        const size_t re = std::min(row_end, rb + kRowBlock);
        size_t t = t0;
        for (; t + kTileTokens <= t1; t += kTileTokens) {
          size_t r = rb;
          for (; r + 4 <= re; r += 4)
            Tile<4, kTileTokens>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
          for (; r < re; ++r) Tile<1, kTileTokens>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
        }
        for (; t < t1; ++t) {
          size_t r = rb;
          for (; r + 4 <= re; r += 4) Tile<4, 1>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
          for (; r < re; ++r) Tile<1, 1>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
        }
      }
    }
  }
}

const uint16_t* Bf16Codes(const QuantizedTensor& w) { return reinterpret_cast<const uint16_t*>(w.codes().data()); }

// FP8 E4M3 with one scale per row (channel) or per tensor: the scale multiplies the row's dot.
bool IsRowScaledE4m3(const QuantizedTensor& w) {
  const QuantScheme& s = w.scheme();
  const GranularityKind g = s.granularity.kind;
  return s.element->minifloat == &kE4M3 && (g == GranularityKind::kChannel || g == GranularityKind::kTensor) &&
         !s.asymmetric() && s.super_block == 0;
}

struct E4m3SubnormalTable {
  alignas(64) uint16_t bits[32] = {};
  E4m3SubnormalTable() {
    for (uint32_t m = 0; m < 8; ++m) bits[m] = Fp32ToBf16(DecodeMiniFloat(kE4M3, m) / 256.0f);
  }
};

// Each 64 columns' even columns, then its odd ones: the order E4m3Weights delivers the codes in.
AlignedVector<uint16_t> EvenOddActivations(const uint16_t* x, size_t n_tokens, size_t cols) {
  AlignedVector<uint16_t> out(n_tokens * cols);
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t i = 0; i < cols; i += 64)
      for (size_t j = 0; j < 32; ++j) {
        out[t * cols + i + j] = x[t * cols + i + 2 * j];
        out[t * cols + i + 32 + j] = x[t * cols + i + 2 * j + 1];
      }
  return out;
}

}  // namespace

bool HasBf16DotKernel(const QuantizedTensor& w) {
  if (!CpuHasBf16Flags()) return false;
  if (w.scheme().element->minifloat == &kBf16) return w.cols() % 32 == 0;
  return IsRowScaledE4m3(w) && w.cols() % 64 == 0;
}

AlignedVector<uint16_t> ToBf16Activations(const float* x, size_t n_tokens, size_t cols) {
  AlignedVector<uint16_t> out(n_tokens * cols);
  Fp32ToBf16Row(x, out.size(), out.data());
  return out;
}

void Bf16DotRows(const QuantizedTensor& w, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                 float* y, size_t y_stride) {
  LOWBIT_CHECK(HasBf16DotKernel(w));
  if (w.scheme().element->minifloat == &kBf16) {
    MatrixRows(Bf16Weights{Bf16Codes(w), w.cols()}, w.cols(), x, n_tokens, row_begin, row_end, nullptr, y, y_stride);
    return;
  }
  std::vector<float> scales(row_end - row_begin);
  for (size_t r = row_begin; r < row_end; ++r) {
    w.RowScales(r, &scales[r - row_begin], nullptr);
    scales[r - row_begin] *= 256.0f;  // the widened codes are 2^-8 times the E4M3 values
  }
  static const E4m3SubnormalTable subnormals;
  const AlignedVector<uint16_t> even_odd = EvenOddActivations(x, n_tokens, w.cols());
  MatrixRows(E4m3Weights{w.codes().data(), w.row_bytes(), subnormals.bits}, w.cols(), even_odd.data(), n_tokens,
             row_begin, row_end, scales.data(), y, y_stride);
}

// Scalar reference: the weights as their codec decodes them (bf16 widened exactly; E4M3 times its
// row's scale), times the bf16 activations, summed in double.
void Bf16DotRowsRef(const QuantizedTensor& w, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                    float* y, size_t y_stride) {
  const size_t cols = w.cols();
  std::vector<float> row(cols);
  for (size_t r = row_begin; r < row_end; ++r) {
    w.DequantizeRow(r, row.data());
    for (size_t t = 0; t < n_tokens; ++t) {
      double sum = 0;
      for (size_t i = 0; i < cols; ++i) sum += static_cast<double>(row[i]) * Bf16ToFp32(x[t * cols + i]);
      y[t * y_stride + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace lowbit
