#include "kernels/qmatmul_bf16.h"

// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports inside the inlined intrinsics (_mm512_reduce_add_ps); the values are all written first.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // GCC's name only
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "formats/codec.h"
#include "formats/minifloat.h"

namespace lowbit {
namespace {

bool CpuHasBf16Flags() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return has && CpuLevelAllowed(CpuLevel::kAvx512);
}

// FP6 codes are spread to 16-bit lanes with a byte permutation (vpermb).
bool CpuHasFp6Flags() {
  static const bool has = CpuHasBf16Flags() && __builtin_cpu_supports("avx512vbmi");
  return has;
}

#define LOWBIT_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))

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
  static constexpr size_t kColumns = 32;
  const uint16_t* codes;
  size_t stride;  // elements per row
  LOWBIT_BF16 void Load(size_t r, size_t i, __m512bh out[1]) const {
    // The next tile's row (4 rows on), same column: the hardware prefetcher falls behind four row
    // streams. A line 2 KB ahead in the row took bf16 GEMV from 0.95-0.99 to 1.05-1.16 of the triad;
    // the next tile's row gives the same here (1.04-1.11, one core), and E4M3 needs it (below).
    _mm_prefetch(reinterpret_cast<const char*>(codes + (r + 4) * stride + i), _MM_HINT_T1);
    out[0] = (__m512bh)_mm512_loadu_si512(codes + r * stride + i);
  }
};

// An FP8 format's lanes (16-bit, the code in the low byte) whose exponent (`exponent_bits` of the
// code) is 0: the subnormal table's entry for the mantissa (vpermw reads an index's low 5 bits, which
// are the mantissa there), with the code's sign; other lanes keep `value`.
LOWBIT_BF16 inline __m512i FixFp8ExponentZero(__m512i value, __m512i code, int16_t exponent_bits,
                                              const uint16_t* subnormals) {
  const __mmask32 zero_exponent = _mm512_testn_epi16_mask(code, _mm512_set1_epi16(exponent_bits));
  const __m512i magnitude = _mm512_permutexvar_epi16(code, _mm512_load_si512(subnormals));
  const __m512i fixed = _mm512_ternarylogic_epi32(_mm512_set1_epi16(static_cast<int16_t>(0x8000)),
                                                  _mm512_slli_epi16(code, 8), magnitude, 0xCA);  // A ? B : C
  return _mm512_mask_mov_epi16(value, zero_exponent, fixed);
}

// FP8 E4M3 widened to bf16 exactly, 2^-8 times its value (the row scale carries 2^8), 64 codes at a
// time. With exponent bias 127 - 15 a code's bf16 high byte depends on its high nibble only
// (sign, 0111, the exponent's top 3 bits) and its low byte on its low nibble (the exponent's last
// bit and the mantissa, shifted up 4): two 16-entry byte lookups (vpshufb), then the bytes are
// interleaved into two vectors of 32 lanes, codes 0-31 and 32-63 (the runs of 8 reordered first, so
// activations and MX groups keep column order). Exponent 0 (zero and the 7 subnormals, m * 2^-17 after
// the 2^8) is fixed by a table lookup only when one of the 64 codes has it: a branch taken rarely.
// Each row prefetches the next tile's row (4 rows on) at the same column: a 4096-column FP8 row is one
// 4 KiB page, so the hardware prefetcher restarts on every row and, without this, a core streamed at
// 0.63-0.68 of the triad. One core, streaming / in cache: widening 32 codes per vpmovzxbw with the
// lookup always done and an in-row prefetch 8.2-8.9 / 12.6 GB/s; this 10.7-11.8 (0.93-1.00 of the
// triad) / 17.0.
struct E4m3Weights {
  static constexpr size_t kColumns = 64;
  static constexpr int16_t kExponent = 0x78;  // the code's exponent bits
  const uint8_t* codes;
  size_t stride;                // bytes per row
  const uint16_t* subnormals;   // 32 entries, 64-byte aligned: bf16 bits of m * 2^-17, m = 0..7
  LOWBIT_BF16 void Load(size_t r, size_t i, __m512bh out[2]) const {
    const uint8_t* block = codes + r * stride + i;
    _mm_prefetch(reinterpret_cast<const char*>(block) + 4 * stride, _MM_HINT_T1);
    // Eight-code runs reordered so that each 128-bit lane holds codes 8k..8k+7 and 32+8k..: the
    // interleave below then yields codes 0-31 and 32-63 in order (one MX group of 32 each).
    const __m512i b = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), _mm512_loadu_si512(block));
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    // Low byte: (n << 4); high byte: (sign << 7) | 0x38 | (n & 7), n the high nibble = sign e3 e2 e1.
    const __m512i low_table = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70,
        static_cast<char>(0x80), static_cast<char>(0x90), static_cast<char>(0xA0), static_cast<char>(0xB0),
        static_cast<char>(0xC0), static_cast<char>(0xD0), static_cast<char>(0xE0), static_cast<char>(0xF0)));
    const __m512i high_table = _mm512_broadcast_i32x4(_mm_setr_epi8(0x38, 0x39, 0x3A, 0x3B, 0x3C, 0x3D, 0x3E, 0x3F,
        static_cast<char>(0xB8), static_cast<char>(0xB9), static_cast<char>(0xBA), static_cast<char>(0xBB),
        static_cast<char>(0xBC), static_cast<char>(0xBD), static_cast<char>(0xBE), static_cast<char>(0xBF)));
    const __m512i low = _mm512_shuffle_epi8(low_table, _mm512_and_si512(b, nibble));
    const __m512i high = _mm512_shuffle_epi8(high_table, _mm512_and_si512(_mm512_srli_epi16(b, 4), nibble));
    __m512i first = _mm512_unpacklo_epi8(low, high), second = _mm512_unpackhi_epi8(low, high);
    if (_mm512_testn_epi8_mask(b, _mm512_set1_epi8(kExponent))) [[unlikely]] {
      first = FixFp8ExponentZero(first, _mm512_unpacklo_epi8(b, _mm512_setzero_si512()), kExponent, subnormals);
      second = FixFp8ExponentZero(second, _mm512_unpackhi_epi8(b, _mm512_setzero_si512()), kExponent, subnormals);
    }
    out[0] = (__m512bh)first;
    out[1] = (__m512bh)second;
  }
};

// FP8 E5M2 the same way, 2^-16 times its value (the row scale carries 2^16), so that the exponent's
// bf16 bias is 127 - 15 - 16 = 96 = 0b0110'0000: a code's bf16 high byte is its sign, 011 and its
// exponent's top 4 bits (a 64-entry byte permutation of the code's top 6 bits, vpermb), its low byte
// the exponent's last bit and the mantissa, shifted up 5. Exponent 0 (zero and the 3 subnormals,
// m * 2^-32 after the 2^16) is fixed as E4M3's is. The quantizer never writes E5M2's infinities and
// NaNs (it saturates), which this would read as finite values.
struct E5m2HighBytes {
  alignas(64) uint8_t bytes[64] = {};
  constexpr E5m2HighBytes() {
    for (int c = 0; c < 64; ++c) bytes[c] = static_cast<uint8_t>((c & 0x20) << 2 | 0x30 | (c >> 1 & 0x0F));
  }
};
inline constexpr E5m2HighBytes kE5m2High{};

struct E5m2Weights {
  static constexpr size_t kColumns = 64;
  static constexpr int16_t kExponent = 0x7C;  // the code's exponent bits
  const uint8_t* codes;
  size_t stride;               // bytes per row
  const uint16_t* subnormals;  // 32 entries, 64-byte aligned: bf16 bits of m * 2^-32, m = 0..3
  LOWBIT_BF16 void Load(size_t r, size_t i, __m512bh out[2]) const {
    const uint8_t* block = codes + r * stride + i;
    _mm_prefetch(reinterpret_cast<const char*>(block) + 4 * stride, _MM_HINT_T1);
    const __m512i b = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), _mm512_loadu_si512(block));
    // vpermb reads each index byte's low 6 bits: here the code's top 6 (the shift brings in the
    // next byte's bits above them, which it ignores).
    const __m512i high = _mm512_permutexvar_epi8(_mm512_srli_epi16(b, 2), _mm512_load_si512(kE5m2High.bytes));
    const __m512i low = _mm512_and_si512(_mm512_slli_epi16(b, 5), _mm512_set1_epi8(static_cast<char>(0xE0)));
    __m512i first = _mm512_unpacklo_epi8(low, high), second = _mm512_unpackhi_epi8(low, high);
    if (_mm512_testn_epi8_mask(b, _mm512_set1_epi8(kExponent))) [[unlikely]] {
      first = FixFp8ExponentZero(first, _mm512_unpacklo_epi8(b, _mm512_setzero_si512()), kExponent, subnormals);
      second = FixFp8ExponentZero(second, _mm512_unpackhi_epi8(b, _mm512_setzero_si512()), kExponent, subnormals);
    }
    out[0] = (__m512bh)first;
    out[1] = (__m512bh)second;
  }
};

// For Fp6Weights, byte indices: lane l (bytes 2l, 2l + 1) of the first 32 of 64 codes takes bytes 6l/8 and the one
// after; of the second 32, the same 24 bytes on.
struct Fp6Spread {
  alignas(64) uint8_t first[64];
  alignas(64) uint8_t second[64];
  alignas(64) uint16_t shifts[32];
  constexpr Fp6Spread() : first(), second(), shifts() {
    for (int l = 0; l < 32; ++l) {
      for (int b = 0; b < 2; ++b) {
        first[2 * l + b] = static_cast<uint8_t>(6 * l / 8 + b);
        second[2 * l + b] = static_cast<uint8_t>(24 + 6 * l / 8 + b);
      }
      shifts[l] = static_cast<uint16_t>(6 * l % 8);
    }
  }
};
inline constexpr Fp6Spread kFp6Spread{};

// 6-bit minifloat codes (FP6 E3M2, E2M3: 4 codes per 3 bytes, code i at bit 6i, LSB first) as bf16,
// 64 codes per Load: their values are exact in bf16 (2 or 3 mantissa bits), so a 64-entry table of
// bf16 bits, two registers, is the whole decode (vpermt2w reads an index's low 6 bits), subnormals
// and zero included. Lane l's code starts at bit 6l: a byte permutation (vpermb) brings bytes 6l/8
// and the next into lane l, a per-lane shift (0, 6, 4 or 2) aligns it. The codes stay in column
// order, so the activations need no reordering. 48 bytes a Load (a masked load: the last row's
// codes may end the buffer). The fp32 fused kernel's shuffles and conversions streamed E3M2 at
// 0.35 of the triad on one core.
struct Fp6Weights {
  static constexpr size_t kColumns = 64;
  const uint8_t* codes;
  size_t stride;           // bytes per row
  const uint16_t* levels;  // 64 entries, 64-byte aligned: the bf16 bits of each code's value
  LOWBIT_BF16 void Load(size_t r, size_t i, __m512bh out[2]) const {
    const uint8_t* block = codes + r * stride + i / 4 * 3;
    _mm_prefetch(reinterpret_cast<const char*>(block) + 4 * stride, _MM_HINT_T1);
    const __m512i bytes = _mm512_maskz_loadu_epi8((1ull << 48) - 1, block);
    const __m512i low_levels = _mm512_load_si512(levels), high_levels = _mm512_load_si512(levels + 32);
    const __m512i shifts = _mm512_load_si512(kFp6Spread.shifts);
    const __m512i first = _mm512_srlv_epi16(_mm512_permutexvar_epi8(_mm512_load_si512(kFp6Spread.first), bytes), shifts);
    const __m512i second = _mm512_srlv_epi16(_mm512_permutexvar_epi8(_mm512_load_si512(kFp6Spread.second), bytes), shifts);
    out[0] = (__m512bh)_mm512_permutex2var_epi16(low_levels, first, high_levels);
    out[1] = (__m512bh)_mm512_permutex2var_epi16(low_levels, second, high_levels);
  }
};

// How the rows' dots are scaled: not at all (bf16), one scale per row (channel or tensor scales), or
// one per group of `group` columns (MX's 32, FP8 blocks: a multiple of 32), where each 32-column
// partial dot takes its group's scale.
struct DotScales {
  const float* values = nullptr;  // row r's at values + (r - row_begin) * groups
  size_t groups = 1, group = 0;
  // MX groups: the E8M0 bytes as stored (row r's at codes + (r - row_begin) * groups), each read
  // through `table` (its 256 values times the codes' factor). Decoding every scale to fp32 first,
  // once per call, cost as much as streaming the 6-bit codes they scale (mxfp6 ran at 0.59 of the triad).
  const uint8_t* codes = nullptr;
  const float* table = nullptr;
  bool grouped() const { return groups > 1; }
  float at(size_t i) const { return codes ? table[codes[i]] : values[i]; }
};

// y[t][r] (+)= dot(w row r, x token t) over columns [k0, k1), scaled as `scales` (from row r0's),
// for kRows rows from r0 x kTokens tokens.
template <size_t kRows, size_t kTokens, bool kGrouped, class Weights>
LOWBIT_BF16 void Tile(const Weights& w, size_t cols, const uint16_t* x, size_t k0, size_t k1, bool accumulate,
                      DotScales scales, float* y, size_t y_stride, size_t r0, size_t t0) {
  __m512 acc[kRows][kTokens];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  constexpr size_t kVectors = Weights::kColumns / 32;  // weight vectors per Load
  for (size_t i = k0; i < k1; i += Weights::kColumns) {
    __m512bh xv[kTokens][kVectors];
    for (size_t t = 0; t < kTokens; ++t)
      for (size_t v = 0; v < kVectors; ++v) xv[t][v] = (__m512bh)_mm512_loadu_si512(x + (t0 + t) * cols + i + 32 * v);
    for (size_t r = 0; r < kRows; ++r) {
      __m512bh wv[kVectors];
      w.Load(r0 + r, i, wv);
      for (size_t v = 0; v < kVectors; ++v) {
        if constexpr (kGrouped) {
          const __m512 scale = _mm512_set1_ps(scales.at(r * scales.groups + (i + 32 * v) / scales.group));
          for (size_t t = 0; t < kTokens; ++t)
            acc[r][t] = _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), wv[v], xv[t][v]), scale, acc[r][t]);
        } else {
          for (size_t t = 0; t < kTokens; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[v], xv[t][v]);
        }
      }
    }
  }
  const float* row_scales = kGrouped ? nullptr : scales.values;  // grouped: already applied
  if constexpr (kRows == 4) {  // the four rows of a token are adjacent in y
    const __m128 scale = row_scales ? _mm_loadu_ps(row_scales) : _mm_set1_ps(1.0f);
    for (size_t t = 0; t < kTokens; ++t) {
      float* out = y + (t0 + t) * y_stride + r0;
      const __m128 sums = _mm_mul_ps(scale, SumOfFour(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
      _mm_storeu_ps(out, accumulate ? _mm_add_ps(_mm_loadu_ps(out), sums) : sums);
    }
  } else {
    for (size_t r = 0; r < kRows; ++r)
      for (size_t t = 0; t < kTokens; ++t) {
        float& out = y[(t0 + t) * y_stride + r0 + r];
        out = (accumulate ? out : 0.0f) + (row_scales ? row_scales[r] : 1.0f) * _mm512_reduce_add_ps(acc[r][t]);
      }
  }
}

// y[t * y_stride + r] = dot(row r of w [rows x cols], x_t), scaled as `scales`, for r in [row_begin, row_end).
template <bool kGrouped, class Weights>
void MatrixRows(const Weights& w, size_t cols, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                DotScales scales, float* y, size_t y_stride) {
  LOWBIT_CHECK(CpuHasBf16Flags() && cols % 32 == 0);
  // Cache blocking: a chunk of tokens over a slice of columns (256 x 2 KiB) stays in L2 while a
  // block of rows over that slice (16 x 2 KiB, in L1) passes every token tile of the chunk;
  // partial dots of later slices are added to y. A whole prefill chunk is one pass over the
  // weights. Measured here against whole-row tiles: 1.7-3.1x the fp32 kernel's FLOP rate instead
  // of 1.75x; long rows (down_proj's 11008) gain most.
  // Decode-sized batches are memory-bound: there each row is read whole, in one sequential pass.
  constexpr size_t kTokenChunk = 256, kColSlice = 1024, kRowBlock = 16, kTileTokens = 4, kSlicedFromTokens = 16;
  const auto scales_of = [&](size_t r) {
    DotScales at = scales;
    if (at.values) at.values += (r - row_begin) * at.groups;
    if (at.codes) at.codes += (r - row_begin) * at.groups;
    return at;
  };
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
            Tile<4, kTileTokens, kGrouped>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
          for (; r < re; ++r)
            Tile<1, kTileTokens, kGrouped>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
        }
        for (; t < t1; ++t) {
          size_t r = rb;
          for (; r + 4 <= re; r += 4) Tile<4, 1, kGrouped>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
          for (; r < re; ++r) Tile<1, 1, kGrouped>(w, cols, x, k0, k1, accumulate, scales_of(r), y, y_stride, r, t);
        }
      }
    }
  }
}

// How a tensor's codes become bf16 in registers, or kNone: no kernel here for it.
enum class Bf16Layout { kNone, kBf16, kE4m3, kE5m2, kFp6 };

// FP8 (E4M3, E5M2) and the FP6 minifloats, symmetric, with one scale per row (channel), per tensor, or per
// group of columns a multiple of 32 wide (MX's E8M0 per 32, FP8 blocks).
bool DotScalable(const QuantizedTensor& w) {
  const QuantScheme& s = w.scheme();
  const GranularityKind g = s.granularity.kind;
  const bool rows = g == GranularityKind::kChannel || g == GranularityKind::kTensor;
  const bool groups = (g == GranularityKind::kGroup || g == GranularityKind::kBlock) && w.grid().cell_cols % 32 == 0;
  return (rows || groups) && !s.asymmetric() && s.super_block == 0;
}

Bf16Layout LayoutOf(const QuantizedTensor& w) {
  if (!CpuHasBf16Flags()) return Bf16Layout::kNone;
  const MiniFloat* m = w.scheme().element->minifloat;
  if (m == &kBf16) return w.cols() % 32 == 0 ? Bf16Layout::kBf16 : Bf16Layout::kNone;
  if (!DotScalable(w) || w.cols() % 64 != 0) return Bf16Layout::kNone;
  if (m == &kE4M3) return Bf16Layout::kE4m3;
  if (m == &kE5M2) return Bf16Layout::kE5m2;
  // E2M3 in groups (MXFP6) stays on the integer-dot path (its levels are eighths): one core streamed
  // it at 0.72 of the triad there, 0.57 here, where each group's partial dot takes its own FMA.
  const bool grouped = w.grid().grid_cols > 1;
  if ((m == &kE3M2 || (m == &kE2M3 && !grouped)) && CpuHasFp6Flags()) return Bf16Layout::kFp6;
  return Bf16Layout::kNone;
}

// The bf16 bits of an FP8 format's subnormals (exponent 0) at `unit` times their value, by mantissa.
struct Fp8SubnormalTable {
  alignas(64) uint16_t bits[32] = {};
  Fp8SubnormalTable(const MiniFloat& format, float unit) {
    for (uint32_t m = 0; m < (1u << format.man_bits); ++m) bits[m] = Fp32ToBf16(DecodeMiniFloat(format, m) * unit);
  }
};

// The bf16 bits of a 6-bit code's value: exact, since E3M2 and E2M3 have at most 3 mantissa bits.
struct Fp6Levels {
  alignas(64) uint16_t bits[64] = {};
  explicit Fp6Levels(const MiniFloat& format) {
    for (uint32_t c = 0; c < 64; ++c) bits[c] = Fp32ToBf16(DecodeMiniFloat(format, c));
  }
};

}  // namespace

bool HasBf16DotKernel(const QuantizedTensor& w) { return LayoutOf(w) != Bf16Layout::kNone; }

AlignedVector<uint16_t> ToBf16Activations(const float* x, size_t n_tokens, size_t cols) {
  AlignedVector<uint16_t> out(n_tokens * cols);
  Fp32ToBf16Row(x, out.size(), out.data());
  return out;
}

Bf16Input PrepareBf16Input(const QuantizedTensor& w, const float* x, size_t n_tokens) {
  return {ToBf16Activations(x, n_tokens, w.cols()), n_tokens};
}

void Bf16DotRows(const QuantizedTensor& w, const Bf16Input& in, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride) {
  const Bf16Layout layout = LayoutOf(w);
  LOWBIT_CHECK(layout != Bf16Layout::kNone && in.values.size() == in.n_tokens * w.cols());
  const uint16_t* x = in.values.data();
  if (layout == Bf16Layout::kBf16) {
    const Bf16Weights weights{reinterpret_cast<const uint16_t*>(w.codes().data()), w.cols()};
    MatrixRows<false>(weights, w.cols(), x, in.n_tokens, row_begin, row_end, {}, y, y_stride);
    return;
  }
  // The widened E4M3 and E5M2 codes are 2^-8 and 2^-16 times their values; FP6 levels are the values.
  const float code_scale = layout == Bf16Layout::kE4m3 ? 256.0f : layout == Bf16Layout::kE5m2 ? 65536.0f : 1.0f;
  const size_t groups = w.grid().grid_cols;
  std::vector<float> scales;
  DotScales dot_scales{nullptr, groups, w.grid().cell_cols};
  if (w.scheme().mx_scales() && groups > 1 && w.grid().cell_rows == 1) {
    const std::array<float, 256>& e8m0 = ScaleTable(ScaleType::kE8M0);
    scales.resize(256);
    for (size_t e = 0; e < 256; ++e) scales[e] = e8m0[e] * w.tensor_scale() * code_scale;
    dot_scales.codes = w.scale_bytes().data() + row_begin * groups;
    dot_scales.table = scales.data();
  } else {
    scales.resize((row_end - row_begin) * groups);
    for (size_t r = row_begin; r < row_end; ++r) w.RowScales(r, &scales[(r - row_begin) * groups], nullptr);
    for (float& s : scales) s *= code_scale;
    dot_scales.values = scales.data();
  }
  const auto run = [&](const auto& weights) {
    if (dot_scales.grouped())
      MatrixRows<true>(weights, w.cols(), x, in.n_tokens, row_begin, row_end, dot_scales, y, y_stride);
    else
      MatrixRows<false>(weights, w.cols(), x, in.n_tokens, row_begin, row_end, dot_scales, y, y_stride);
  };
  if (layout == Bf16Layout::kE4m3) {
    static const Fp8SubnormalTable subnormals(kE4M3, 1.0f / 256);
    run(E4m3Weights{w.codes().data(), w.row_bytes(), subnormals.bits});
    return;
  }
  if (layout == Bf16Layout::kE5m2) {
    static const Fp8SubnormalTable subnormals(kE5M2, 1.0f / 65536);
    run(E5m2Weights{w.codes().data(), w.row_bytes(), subnormals.bits});
    return;
  }
  static const Fp6Levels e3m2(kE3M2), e2m3(kE2M3);
  run(Fp6Weights{w.codes().data(), w.row_bytes(), w.scheme().element->minifloat == &kE3M2 ? e3m2.bits : e2m3.bits});
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
