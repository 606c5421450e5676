#include "kernels/attention_kivi_int8.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "kernels/qmatmul_int8-inl.h"  // CpuHasVnni, LOWBIT_VNNI

namespace lowbit::kivi_int8 {
namespace {

using int8dot::CpuHasVnni;
using int8dot::Dpbusd;
using int8dot::Int32x16;
using int8dot::ToFloats;

constexpr size_t kMaxHeadDim = 1024;  // DeepSeek's latent is 576 wide
constexpr size_t kGroup = 32;  // query channels per int8 scale

// Byte 4x + r of the result takes byte 16r + x of the input: four rows' 16-byte slices interleaved,
// so that dword x holds byte x of each row, in row order.
LOWBIT_VNNI inline __m512i InterleaveIndex() {
  alignas(64) uint8_t index[64];
  for (int x = 0; x < 16; ++x)
    for (int r = 0; r < 4; ++r) index[4 * x + r] = static_cast<uint8_t>(16 * r + x);
  return _mm512_load_si512(index);
}

// Dword x of the result: byte x of the 16-byte slices at p, p + stride, p + 2 stride, p + 3 stride.
LOWBIT_VNNI inline __m512i Quad(const uint8_t* p, size_t stride, __m512i interleave) {
  const auto slice = [&](size_t r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * stride)); };
  __m512i rows;
  if (stride == 16) {
    rows = _mm512_loadu_si512(p);
  } else {
    rows = _mm512_castsi128_si512(slice(0));
    rows = _mm512_inserti32x4(rows, slice(1), 1);
    rows = _mm512_inserti32x4(rows, slice(2), 2);
    rows = _mm512_inserti32x4(rows, slice(3), 3);
  }
  return _mm512_permutexvar_epi8(interleave, rows);
}

// The next tile's lines, fetched a share at each of this tile's `steps` steps: spread over the
// work, since without it each tile's first loads waited on memory (its rows are a new stream).
class NextTile {
 public:
  NextTile(const void* next, size_t bytes, size_t steps)
      : at_(static_cast<const char*>(next)),
        end_(next ? at_ + bytes : at_),
        share_(64 * ((bytes + 64 * steps - 1) / (64 * steps))) {}
  void Step() {
    for (const char* stop = std::min(end_, at_ + share_); at_ < stop; at_ += 64) __builtin_prefetch(at_);
  }

 private:
  const char* at_;
  const char* end_;
  size_t share_;  // bytes per step
};

// A slice's P = 8 / bits planes of sums back in element order: lane x of plane p holds element
// P x + p (byte x's code p). Apply gives 16 elements per output vector, in order: for two planes one
// interleave of lanes, for four two (planes 0 and 2, 1 and 3, then those).
struct InOrder {
  __m512i first, second;  // lanes 0-7 / 8-15 of a and b, alternating
  LOWBIT_VNNI InOrder()
      : first(_mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)),
        second(_mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)) {}
  template <size_t P>
  LOWBIT_VNNI void Apply(const __m512 (&planes)[P], __m512 (&out)[P]) const {
    if constexpr (P == 2) {
      out[0] = _mm512_permutex2var_ps(planes[0], first, planes[1]);
      out[1] = _mm512_permutex2var_ps(planes[0], second, planes[1]);
    } else {
      static_assert(P == 4);
      const __m512 even[2] = {_mm512_permutex2var_ps(planes[0], first, planes[2]),
                              _mm512_permutex2var_ps(planes[0], second, planes[2])};
      const __m512 odd[2] = {_mm512_permutex2var_ps(planes[1], first, planes[3]),
                             _mm512_permutex2var_ps(planes[1], second, planes[3])};
      for (size_t k = 0; k < 2; ++k) {
        out[2 * k] = _mm512_permutex2var_ps(even[k], first, odd[k]);
        out[2 * k + 1] = _mm512_permutex2var_ps(even[k], second, odd[k]);
      }
    }
  }
};

// Plane p of 64 code bytes at `bits` bits: code p of each byte.
template <int kBits>
LOWBIT_VNNI inline __m512i CodePlane(__m512i bytes, int p) {
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << kBits) - 1));
  return _mm512_and_si512(p == 0 ? bytes : _mm512_srli_epi16(bytes, p * kBits), mask);
}

// Lanes [4 g, 4 g + 4) of the result: the largest lane of v[g], for four vectors (13 shuffles and
// maxima, where four reductions of one vector each took 32).
LOWBIT_VNNI inline __m512 FourMaxima(const __m512 (&v)[4]) {
  const auto halves = [](__m512 x, __m512 y) LOWBIT_VNNI {  // x's 256-bit halves, then y's, maxed
    return _mm512_max_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  };
  const __m512 x01 = halves(v[0], v[1]), x23 = halves(v[2], v[3]);
  // 128-bit block g: v[g]'s four partial maxima.
  __m512 m = _mm512_max_ps(_mm512_shuffle_f32x4(x01, x23, 0x88), _mm512_shuffle_f32x4(x01, x23, 0xDD));
  m = _mm512_max_ps(m, _mm512_permute_ps(m, 0x4E));
  return _mm512_max_ps(m, _mm512_permute_ps(m, 0xB1));
}

// The query's side of a tile's scores, for heads [0, kHeads): q_j a_j to int8 with one scale per
// 32 channels (codes [kHeads x head_dim], group_scales [kHeads x head_dim / 32]), code = round(q_j
// a_j / scale), scale = max |q_j a_j| / 127, and qb[h] = sum_j q_j b_j, from the query and K's
// channel scales a and biases b in one pass: kChunk groups of channels at a time, whose a and b stay
// in registers for every head and whose products are rounded from registers (stored and read back,
// with their maxima reduced 16 groups at a time, they took more time than K's dots).
template <size_t kHeads, size_t kChunk>
LOWBIT_VNNI void QueryCodesBy(const float* __restrict q, size_t head_dim, const AttentionTile& t,
                              int8_t* __restrict codes, float* __restrict group_scales, float* __restrict qb) {
  constexpr size_t kVectors = 2 * kChunk;  // 16 channels each
  __m512 sum[kHeads];
  for (size_t h = 0; h < kHeads; ++h) sum[h] = _mm512_setzero_ps();
  for (size_t j0 = 0; j0 < head_dim; j0 += kChunk * kGroup) {
    __m512 a[kVectors], b[kVectors];
#pragma GCC unroll 8
    for (size_t v = 0; v < kVectors; ++v) {
      a[v] = _mm512_loadu_ps(t.k_scales + j0 + 16 * v);
      b[v] = _mm512_loadu_ps(t.k_biases + j0 + 16 * v);
    }
#pragma GCC unroll 4  // every array in registers, not on the stack
    for (size_t h = 0; h < kHeads; ++h) {
      const float* qh = q + h * head_dim + j0;
      __m512 x[kVectors], largest[4] = {};
#pragma GCC unroll 4
      for (size_t g = 0; g < kChunk; ++g)
        for (size_t v = 2 * g; v < 2 * g + 2; ++v) {
          const __m512 qv = _mm512_loadu_ps(qh + 16 * v);
          x[v] = _mm512_mul_ps(qv, a[v]);
          sum[h] = _mm512_fmadd_ps(qv, b[v], sum[h]);
          largest[g] = _mm512_max_ps(largest[g], _mm512_abs_ps(x[v]));
        }
      const __m512 tops = FourMaxima(largest);  // group g's max in lanes 4 g ..
      const __mmask16 positive = _mm512_cmp_ps_mask(tops, _mm512_setzero_ps(), _CMP_GT_OQ);
      const __m512 inverse = _mm512_maskz_div_ps(positive, _mm512_set1_ps(127.0f), tops);
      const size_t first_group = (h * head_dim + j0) / kGroup;
      // Lanes 0, 4, 8, 12 (kChunk of them): the groups' scales (compressed in a register: Zen 4 runs a
      // compressing store to memory in microcode).
      const __m512 scales = _mm512_maskz_compress_ps(0x1111, _mm512_mul_ps(tops, _mm512_set1_ps(1.0f / 127.0f)));
      _mm512_mask_storeu_ps(group_scales + first_group, static_cast<__mmask16>((1u << kChunk) - 1), scales);
#pragma GCC unroll 4
      for (size_t g = 0; g < kChunk; ++g) {
        const __m512 by = _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(4 * g)), inverse);
        for (size_t v = 2 * g; v < 2 * g + 2; ++v)  // within +-127: no saturation
          _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + h * head_dim + j0 + 16 * v),
                           _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x[v], by))));
      }
    }
  }
  for (size_t h = 0; h < kHeads; ++h) qb[h] = _mm512_reduce_add_ps(sum[h]);
}

template <size_t kHeads>
LOWBIT_VNNI void QueryCodes(const float* q, size_t head_dim, const AttentionTile& t, int8_t* codes,
                            float* group_scales, float* qb) {
  if (head_dim % (4 * kGroup) == 0) return QueryCodesBy<kHeads, 4>(q, head_dim, t, codes, group_scales, qb);
  if (head_dim % (2 * kGroup) == 0) return QueryCodesBy<kHeads, 2>(q, head_dim, t, codes, group_scales, qb);
  QueryCodesBy<kHeads, 1>(q, head_dim, t, codes, group_scales, qb);
}

// 4-bit K: four channel rows' 16-byte slices (32 positions) in each register, their two planes
// against the query's channel quad.
template <size_t kHeads>
LOWBIT_VNNI void ScoresInt4(const float* q, size_t head_dim, float scale, const AttentionTile& t, size_t c0, size_t c1,
                            float* sc) {
  alignas(64) int8_t codes[kHeads * kMaxHeadDim];  // head h's at h head_dim
  float group_scales[kHeads * kMaxHeadDim / kGroup], qb[kHeads];
  QueryCodes<kHeads>(q, head_dim, t, codes, group_scales, qb);
  const __m512i interleave = InterleaveIndex();
  const InOrder order;
  const uint8_t* keys = static_cast<const uint8_t*>(t.k);
  NextTile next(t.next_k, head_dim * t.k_stride, (c1 - c0) / 32 * head_dim / 4);
  for (size_t s = c0 / 32; s < c1 / 32; ++s) {  // positions [32 s, 32 s + 32): bytes [16 s, 16 s + 16) of each channel
    __m512 lo_sum[kHeads], hi_sum[kHeads];
    for (size_t h = 0; h < kHeads; ++h) lo_sum[h] = hi_sum[h] = _mm512_setzero_ps();
    for (size_t g = 0; g < head_dim / kGroup; ++g) {
      Int32x16 lo[kHeads], hi[kHeads];
      for (size_t h = 0; h < kHeads; ++h) lo[h] = hi[h] = Int32x16{};
      for (size_t j = g * kGroup; j < (g + 1) * kGroup; j += 4) {  // channels j .. j + 3 in each dword
        next.Step();
        const __m512i codes4 = Quad(keys + j * t.k_stride + 16 * s, t.k_stride, interleave);
        const __m512i even = CodePlane<4>(codes4, 0), odd = CodePlane<4>(codes4, 1);
        for (size_t h = 0; h < kHeads; ++h) {
          int32_t query;
          std::memcpy(&query, &codes[h * head_dim + j], 4);
          const __m512i q4 = _mm512_set1_epi32(query);
          lo[h] = Dpbusd(lo[h], even, q4);
          hi[h] = Dpbusd(hi[h], odd, q4);
        }
      }
      for (size_t h = 0; h < kHeads; ++h) {
        const __m512 group_scale = _mm512_set1_ps(group_scales[h * head_dim / kGroup + g]);
        lo_sum[h] = _mm512_fmadd_ps(ToFloats(lo[h]), group_scale, lo_sum[h]);
        hi_sum[h] = _mm512_fmadd_ps(ToFloats(hi[h]), group_scale, hi_sum[h]);
      }
    }
    const __m512 factor = _mm512_set1_ps(scale);
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 bias = _mm512_set1_ps(qb[h]), planes[2] = {lo_sum[h], hi_sum[h]};
      __m512 ordered[2];
      order.Apply(planes, ordered);
      float* out = sc + h * (c1 - c0) + (32 * s - c0);
      for (size_t m = 0; m < 2; ++m) _mm512_storeu_ps(out + 16 * m, _mm512_mul_ps(_mm512_add_ps(ordered[m], bias), factor));
    }
  }
}

// 2-bit K rows are 8 bytes (a block of 32 positions): eight channel rows, 64 contiguous bytes, fill
// one register, interleaved so that lanes 0-7 hold channels j..j+3 and lanes 8-15 channels j+4..j+7
// of byte x (positions 4x..4x+3, one per plane), against the query's two channel quads in the
// matching halves; the halves' sums, of the same positions, are added at the end. Heads [h0, h0 +
// kPass), two at a time at most: their four planes' integer and fp32 sums fill the registers.
LOWBIT_VNNI inline __m512i OctetIndex() {
  alignas(64) uint8_t index[64];
  for (int half = 0; half < 2; ++half)
    for (int x = 0; x < 8; ++x)
      for (int r = 0; r < 4; ++r) index[32 * half + 4 * x + r] = static_cast<uint8_t>(32 * half + 8 * r + x);
  return _mm512_load_si512(index);
}

template <size_t kPass>
LOWBIT_VNNI void ScoresInt2Pass(const int8_t* codes, const float* group_scales, const float* qb, size_t h0,
                                size_t head_dim, float scale, const uint8_t* keys, NextTile& next, float* sc) {
  const __m512i interleave = OctetIndex();
  const InOrder order;
  const size_t groups = head_dim / kGroup;
  __m512 sum[kPass][4];
  for (size_t h = 0; h < kPass; ++h)
    for (size_t p = 0; p < 4; ++p) sum[h][p] = _mm512_setzero_ps();
  for (size_t g = 0; g < groups; ++g) {
    Int32x16 dot[kPass][4];
    for (size_t h = 0; h < kPass; ++h)
      for (size_t p = 0; p < 4; ++p) dot[h][p] = Int32x16{};
    for (size_t j = g * kGroup; j < (g + 1) * kGroup; j += 8) {
      next.Step();
      const __m512i codes8 = _mm512_permutexvar_epi8(interleave, _mm512_loadu_si512(keys + 8 * j));
      const __m512i planes[4] = {CodePlane<2>(codes8, 0), CodePlane<2>(codes8, 1), CodePlane<2>(codes8, 2),
                                 CodePlane<2>(codes8, 3)};
      for (size_t h = 0; h < kPass; ++h) {
        int32_t first, second;
        std::memcpy(&first, codes + (h0 + h) * head_dim + j, 4);
        std::memcpy(&second, codes + (h0 + h) * head_dim + j + 4, 4);
        const __m512i q8 = _mm512_inserti64x4(_mm512_set1_epi32(first), _mm256_set1_epi32(second), 1);
        for (size_t p = 0; p < 4; ++p) dot[h][p] = Dpbusd(dot[h][p], planes[p], q8);
      }
    }
    for (size_t h = 0; h < kPass; ++h) {
      const __m512 group_scale = _mm512_set1_ps(group_scales[(h0 + h) * groups + g]);
      for (size_t p = 0; p < 4; ++p) sum[h][p] = _mm512_fmadd_ps(ToFloats(dot[h][p]), group_scale, sum[h][p]);
    }
  }
  const __m512 factor = _mm512_set1_ps(scale);
  for (size_t h = 0; h < kPass; ++h) {
    __m512 planes[4], ordered[4];
    for (size_t p = 0; p < 4; ++p)  // lanes 0-7: both channel halves
      planes[p] = _mm512_add_ps(sum[h][p], _mm512_shuffle_f32x4(sum[h][p], sum[h][p], 0xEE));
    order.Apply(planes, ordered);  // ordered[0..1]: positions 0-31 (2-3 are the halves' leftovers)
    const __m512 bias = _mm512_set1_ps(qb[h0 + h]);
    for (size_t m = 0; m < 2; ++m)
      _mm512_storeu_ps(sc + (h0 + h) * 32 + 16 * m, _mm512_mul_ps(_mm512_add_ps(ordered[m], bias), factor));
  }
}

template <size_t kHeads>
LOWBIT_VNNI void ScoresInt2(const float* q, size_t head_dim, float scale, const AttentionTile& t, float* sc) {
  alignas(64) int8_t codes[kHeads * kMaxHeadDim];  // head h's at h head_dim
  float group_scales[kHeads * kMaxHeadDim / kGroup], qb[kHeads];
  QueryCodes<kHeads>(q, head_dim, t, codes, group_scales, qb);
  const uint8_t* keys = static_cast<const uint8_t*>(t.k);
  NextTile next(t.next_k, head_dim * t.k_stride, head_dim / 8 * ((kHeads + 1) / 2));
  for (size_t h0 = 0; h0 < kHeads; h0 += 2) {
    if (h0 + 2 <= kHeads) ScoresInt2Pass<2>(codes, group_scales, qb, h0, head_dim, scale, keys, next, sc);
    else ScoresInt2Pass<1>(codes, group_scales, qb, h0, head_dim, scale, keys, next, sc);
  }
}

template <int kBits, size_t kHeads>
LOWBIT_VNNI bool ValuesOf(const float* __restrict weights, size_t stride, size_t head_dim, const AttentionTile& t,
                          float* acc) {
  constexpr size_t P = 8 / kBits;  // codes per byte: planes
  const size_t n = t.n, quads = (n + 3) / 4, whole = n / 4, row_bytes = head_dim * kBits / 8;
  const float* __restrict s = t.v_scales;
  const float* __restrict b = t.v_biases;
  // w_i s_i to uint8, one scale per head: 4 positions' bytes per dword, zero past n (on the stack
  // for tiles of up to 64 positions); and pb[h] = sum_i w_i b_i. Straight from the weights and V's
  // row scales, each product computed twice rather than stored and read back.
  uint32_t local[kHeads * 16];
  thread_local std::vector<uint32_t> spill;
  if (kHeads * quads > std::size(local)) spill.resize(kHeads * quads);
  uint32_t* quad_weights = kHeads * quads <= std::size(local) ? local : spill.data();
  std::fill_n(quad_weights, kHeads * quads, 0u);
  // The heads side by side in each step, so that their reductions' latency chains overlap.
  const auto mask = [&](size_t i) { return static_cast<__mmask16>((1u << std::min<size_t>(16, n - i)) - 1); };
  __m512 top[kHeads], bias_sum[kHeads];
  for (size_t h = 0; h < kHeads; ++h) top[h] = bias_sum[h] = _mm512_setzero_ps();
  __mmask16 negative = 0;
  for (size_t i = 0; i < n; i += 16) {
    const __m512 si = _mm512_maskz_loadu_ps(mask(i), s + i), bi = _mm512_maskz_loadu_ps(mask(i), b + i);
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 wi = _mm512_maskz_loadu_ps(mask(i), weights + h * stride + i), x = _mm512_mul_ps(wi, si);
      top[h] = _mm512_max_ps(top[h], x);
      negative |= _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
      bias_sum[h] = _mm512_fmadd_ps(wi, bi, bias_sum[h]);
    }
  }
  if (negative) return false;
  float weight_scales[kHeads], pb[kHeads];
  __m512 inverse[kHeads];
  for (size_t h = 0; h < kHeads; ++h) {
    const float largest = _mm512_reduce_max_ps(top[h]);
    pb[h] = _mm512_reduce_add_ps(bias_sum[h]);
    weight_scales[h] = largest / 255.0f;
    inverse[h] = _mm512_set1_ps(largest > 0 ? 255.0f / largest : 0.0f);
  }
  for (size_t i = 0; i < n; i += 16) {
    const __m512 si = _mm512_maskz_loadu_ps(mask(i), s + i);
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask(i), weights + h * stride + i), si);
      _mm_mask_storeu_epi8(reinterpret_cast<uint8_t*>(quad_weights + h * quads) + i, mask(i),
                           _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x, inverse[h]))));
    }
  }
  // The rows of a last, partial quad, zero-padded (the rows past the tile need not exist).
  alignas(64) uint8_t tail[4 * kMaxHeadDim / 2];
  const uint8_t* rows = static_cast<const uint8_t*>(t.v);
  if (whole < quads) {
    std::memset(tail, 0, 4 * row_bytes);
    for (size_t i = 4 * whole; i < n; ++i)
      std::memcpy(tail + (i - 4 * whole) * row_bytes, rows + i * t.v_stride, row_bytes);
  }

  const __m512i interleave = InterleaveIndex();
  const InOrder order;
  NextTile next(t.next_v, n * t.v_stride, row_bytes / 16 * quads);
  for (size_t s = 0; s < row_bytes / 16; ++s) {  // bytes [16 s, 16 s + 16) of each row: 16 P elements
    Int32x16 dot[kHeads][P];
    for (size_t h = 0; h < kHeads; ++h)
      for (size_t p = 0; p < P; ++p) dot[h][p] = Int32x16{};
    for (size_t i = 0; i < quads; ++i) {  // positions 4i .. 4i + 3 in each dword
      next.Step();
      const __m512i codes4 = i < whole ? Quad(rows + 4 * i * t.v_stride + 16 * s, t.v_stride, interleave)
                                       : Quad(tail + 16 * s, row_bytes, interleave);
      __m512i planes[P];
      for (size_t p = 0; p < P; ++p) planes[p] = CodePlane<kBits>(codes4, static_cast<int>(p));
      for (size_t h = 0; h < kHeads; ++h) {
        const __m512i w4 = _mm512_set1_epi32(static_cast<int32_t>(quad_weights[h * quads + i]));
        for (size_t p = 0; p < P; ++p) dot[h][p] = Dpbusd(dot[h][p], w4, planes[p]);
      }
    }
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 weight_scale = _mm512_set1_ps(weight_scales[h]), bias = _mm512_set1_ps(pb[h]);
      __m512 sums[P], ordered[P];
      for (size_t p = 0; p < P; ++p) sums[p] = ToFloats(dot[h][p]);
      order.Apply(sums, ordered);
      float* out = acc + h * head_dim + 16 * P * s;
      for (size_t m = 0; m < P; ++m)
        _mm512_storeu_ps(out + 16 * m, _mm512_add_ps(_mm512_loadu_ps(out + 16 * m), _mm512_fmadd_ps(ordered[m], weight_scale, bias)));
    }
  }
  return true;
}

}  // namespace

bool Fits(const AttentionTile& t, size_t head_dim) {
  if (!CpuHasVnni() || head_dim > kMaxHeadDim || t.n > t.k_block) return false;
  if (t.element == TileElement::kU4)
    return t.k_block % 32 == 0 && t.k_stride * 2 == t.k_block && head_dim % 32 == 0 && t.v_stride * 2 >= head_dim;
  return t.element == TileElement::kU2 && t.k_block == 32 && t.k_stride == 8 && head_dim % 64 == 0 &&
         t.v_stride * 4 >= head_dim;
}

void Scores(const float* q, size_t heads, size_t head_dim, float scale, const AttentionTile& t, size_t c0, size_t c1,
            float* sc) {
  const auto run = [&]<size_t kHeads>() {
    if (t.element == TileElement::kU2) return ScoresInt2<kHeads>(q, head_dim, scale, t, sc);
    ScoresInt4<kHeads>(q, head_dim, scale, t, c0, c1, sc);
  };
  switch (heads) {
    case 4: return run.template operator()<4>();
    case 3: return run.template operator()<3>();
    case 2: return run.template operator()<2>();
    default: return run.template operator()<1>();
  }
}

bool Values(const float* weights, size_t stride, size_t heads, size_t head_dim, const AttentionTile& t, float* acc) {
  const auto run = [&]<size_t kHeads>() {
    return t.element == TileElement::kU2 ? ValuesOf<2, kHeads>(weights, stride, head_dim, t, acc)
                                         : ValuesOf<4, kHeads>(weights, stride, head_dim, t, acc);
  };
  switch (heads) {
    case 4: return run.template operator()<4>();
    case 3: return run.template operator()<3>();
    case 2: return run.template operator()<2>();
    default: return run.template operator()<1>();
  }
}

}  // namespace lowbit::kivi_int8
