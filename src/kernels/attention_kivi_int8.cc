#include "kernels/attention_kivi_int8.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/qmatmul_int8-inl.h"  // CpuHasVnni, LOWBIT_VNNI

namespace lowbit::kivi_int8 {
namespace {

using int8dot::CpuHasVnni;

constexpr size_t kMaxHeadDim = 512;
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

// Lane x of lo and of hi are the sums of element 2x and 2x + 1 (a byte's low and high code): the
// first and second 16 elements in order.
struct InOrder {
  __m512i first, second;
  LOWBIT_VNNI InOrder()
      : first(_mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)),
        second(_mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)) {}
};

// x[0, n) (n a multiple of 32) to int8, one scale per 32: code = round(x / scale), scale = max |x| /
// 127 (to fp32 rounding). Sixteen groups at a time (the query heads of a GQA group side by side),
// their maxima reduced together (ReduceEach16) and inverted by a reciprocal estimate and a Newton
// step: reduced and divided group by group, the latency of each chain was a tenth of a tile's time.
LOWBIT_VNNI void QuantizeGroups(const float* x, size_t n, int8_t* codes, float* scales) {
  const __m512 zero = _mm512_setzero_ps();
  for (size_t g0 = 0; g0 < n / kGroup; g0 += 16) {
    const size_t count = std::min<size_t>(16, n / kGroup - g0);
    __m512 top[16];
    for (size_t k = 0; k < 16; ++k) {
      const float* at = x + (g0 + k) * kGroup;
      top[k] =
          k < count ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(at)), _mm512_abs_ps(_mm512_loadu_ps(at + 16))) : zero;
    }
    const __m512 tops = int8dot::ReduceEach16(top, int8dot::MaxPs{});  // lane k: group g0 + k's
    const __mmask16 positive = _mm512_cmp_ps_mask(tops, zero, _CMP_GT_OQ);
    const __m512 estimate = _mm512_maskz_rcp14_ps(positive, tops);
    const __m512 inverse = _mm512_mul_ps(
        _mm512_set1_ps(127.0f), _mm512_mul_ps(estimate, _mm512_fnmadd_ps(tops, estimate, _mm512_set1_ps(2.0f))));
    alignas(64) float group_scales[16];
    _mm512_store_ps(group_scales, _mm512_mul_ps(tops, _mm512_set1_ps(1.0f / 127.0f)));
    for (size_t k = 0; k < count; ++k) {
      const __m512 by = _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(k)), inverse);
      for (size_t at = (g0 + k) * kGroup; at < (g0 + k + 1) * kGroup; at += 16)  // within +-127: no saturation
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + at),
                         _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + at), by))));
    }
    for (size_t k = 0; k < count; ++k) scales[g0 + k] = group_scales[k];
  }
}

template <size_t kHeads>
LOWBIT_VNNI void ScoresOf(const float* qa, const float* qb, size_t head_dim, float scale, const AttentionTile& t,
                          size_t c0, size_t c1, float* sc) {
  alignas(64) int8_t codes[kHeads * kMaxHeadDim];  // head h's at h head_dim
  float group_scales[kHeads * kMaxHeadDim / kGroup];
  QuantizeGroups(qa, kHeads * head_dim, codes, group_scales);
  const __m512i interleave = InterleaveIndex(), low = _mm512_set1_epi8(0x0F);
  const InOrder order;
  const uint8_t* keys = static_cast<const uint8_t*>(t.k);
  NextTile next(t.next_k, head_dim * t.k_stride, (c1 - c0) / 32 * head_dim / 4);
  for (size_t s = c0 / 32; s < c1 / 32; ++s) {  // positions [32 s, 32 s + 32): bytes [16 s, 16 s + 16) of each channel
    __m512 lo_sum[kHeads], hi_sum[kHeads];
    for (size_t h = 0; h < kHeads; ++h) lo_sum[h] = hi_sum[h] = _mm512_setzero_ps();
    for (size_t g = 0; g < head_dim / kGroup; ++g) {
      __m512i lo[kHeads], hi[kHeads];
      for (size_t h = 0; h < kHeads; ++h) lo[h] = hi[h] = _mm512_setzero_si512();
      for (size_t j = g * kGroup; j < (g + 1) * kGroup; j += 4) {  // channels j .. j + 3 in each dword
        next.Step();
        const __m512i codes4 = Quad(keys + j * t.k_stride + 16 * s, t.k_stride, interleave);
        const __m512i even = _mm512_and_si512(codes4, low), odd = _mm512_and_si512(_mm512_srli_epi16(codes4, 4), low);
        for (size_t h = 0; h < kHeads; ++h) {
          int32_t query;
          std::memcpy(&query, &codes[h * head_dim + j], 4);
          const __m512i q4 = _mm512_set1_epi32(query);
          lo[h] = _mm512_dpbusd_epi32(lo[h], even, q4);
          hi[h] = _mm512_dpbusd_epi32(hi[h], odd, q4);
        }
      }
      for (size_t h = 0; h < kHeads; ++h) {
        const __m512 group_scale = _mm512_set1_ps(group_scales[h * head_dim / kGroup + g]);
        lo_sum[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[h]), group_scale, lo_sum[h]);
        hi_sum[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[h]), group_scale, hi_sum[h]);
      }
    }
    const __m512 factor = _mm512_set1_ps(scale);
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 bias = _mm512_set1_ps(qb[h]);
      float* out = sc + h * (c1 - c0) + (32 * s - c0);
      _mm512_storeu_ps(
          out, _mm512_mul_ps(_mm512_add_ps(_mm512_permutex2var_ps(lo_sum[h], order.first, hi_sum[h]), bias), factor));
      _mm512_storeu_ps(
          out + 16,
          _mm512_mul_ps(_mm512_add_ps(_mm512_permutex2var_ps(lo_sum[h], order.second, hi_sum[h]), bias), factor));
    }
  }
}

template <size_t kHeads>
LOWBIT_VNNI bool ValuesOf(const float* pa, const float* pb, size_t head_dim, const AttentionTile& t, float* acc) {
  const size_t n = t.n, quads = (n + 3) / 4, whole = n / 4, row_bytes = head_dim / 2;
  // The weights to uint8, one scale per head: 4 positions' bytes per dword, zero past n.
  thread_local std::vector<uint32_t> quad_weights;
  quad_weights.assign(kHeads * quads, 0);
  float weight_scales[kHeads];
  for (size_t h = 0; h < kHeads; ++h) {
    const float* p = pa + h * n;
    __m512 top = _mm512_setzero_ps();
    __mmask16 negative = 0;
    for (size_t i = 0; i < n; i += 16) {
      const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << std::min<size_t>(16, n - i)) - 1), p + i);
      top = _mm512_max_ps(top, x);
      negative |= _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    }
    if (negative) return false;
    const float largest = _mm512_reduce_max_ps(top);
    weight_scales[h] = largest / 255.0f;
    const __m512 inverse = _mm512_set1_ps(largest > 0 ? 255.0f / largest : 0.0f);
    uint8_t* bytes = reinterpret_cast<uint8_t*>(quad_weights.data() + h * quads);
    for (size_t i = 0; i < n; i += 16) {
      const __mmask16 m = static_cast<__mmask16>((1u << std::min<size_t>(16, n - i)) - 1);
      const __m512i codes = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), inverse));
      _mm_mask_storeu_epi8(bytes + i, m, _mm512_cvtusepi32_epi8(codes));
    }
  }
  // The rows of a last, partial quad, zero-padded (the rows past the tile need not exist).
  alignas(64) uint8_t tail[4 * kMaxHeadDim / 2] = {};
  const uint8_t* rows = static_cast<const uint8_t*>(t.v);
  for (size_t i = 4 * whole; i < n; ++i)
    std::memcpy(tail + (i - 4 * whole) * row_bytes, rows + i * t.v_stride, row_bytes);

  const __m512i interleave = InterleaveIndex(), low = _mm512_set1_epi8(0x0F);
  const InOrder order;
  NextTile next(t.next_v, n * t.v_stride, head_dim / 32 * quads);
  for (size_t s = 0; s < head_dim / 32; ++s) {  // elements [32 s, 32 s + 32): bytes [16 s, 16 s + 16) of each row
    __m512i lo[kHeads], hi[kHeads];
    for (size_t h = 0; h < kHeads; ++h) lo[h] = hi[h] = _mm512_setzero_si512();
    for (size_t i = 0; i < quads; ++i) {  // positions 4i .. 4i + 3 in each dword
      next.Step();
      const __m512i codes4 = i < whole ? Quad(rows + 4 * i * t.v_stride + 16 * s, t.v_stride, interleave)
                                       : Quad(tail + 16 * s, row_bytes, interleave);
      const __m512i even = _mm512_and_si512(codes4, low), odd = _mm512_and_si512(_mm512_srli_epi16(codes4, 4), low);
      for (size_t h = 0; h < kHeads; ++h) {
        const __m512i w4 = _mm512_set1_epi32(static_cast<int32_t>(quad_weights[h * quads + i]));
        lo[h] = _mm512_dpbusd_epi32(lo[h], w4, even);
        hi[h] = _mm512_dpbusd_epi32(hi[h], w4, odd);
      }
    }
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 weight_scale = _mm512_set1_ps(weight_scales[h]), bias = _mm512_set1_ps(pb[h]);
      const __m512 even = _mm512_cvtepi32_ps(lo[h]), odd = _mm512_cvtepi32_ps(hi[h]);
      float* out = acc + h * head_dim + 32 * s;
      _mm512_storeu_ps(
          out, _mm512_add_ps(_mm512_loadu_ps(out),
                             _mm512_fmadd_ps(_mm512_permutex2var_ps(even, order.first, odd), weight_scale, bias)));
      _mm512_storeu_ps(out + 16, _mm512_add_ps(_mm512_loadu_ps(out + 16),
                                               _mm512_fmadd_ps(_mm512_permutex2var_ps(even, order.second, odd),
                                                               weight_scale, bias)));
    }
  }
  return true;
}

}  // namespace

bool Fits(const AttentionTile& t, size_t head_dim) {
  return CpuHasVnni() && t.element == TileElement::kU4 && t.k_block % 32 == 0 && t.k_stride * 2 == t.k_block &&
         head_dim % 32 == 0 && head_dim <= kMaxHeadDim && t.v_stride * 2 >= head_dim && t.n <= t.k_block;
}

void Scores(const float* qa, const float* qb, size_t heads, size_t head_dim, float scale, const AttentionTile& t,
            size_t c0, size_t c1, float* sc) {
  switch (heads) {
    case 4: return ScoresOf<4>(qa, qb, head_dim, scale, t, c0, c1, sc);
    case 3: return ScoresOf<3>(qa, qb, head_dim, scale, t, c0, c1, sc);
    case 2: return ScoresOf<2>(qa, qb, head_dim, scale, t, c0, c1, sc);
    default: return ScoresOf<1>(qa, qb, head_dim, scale, t, c0, c1, sc);
  }
}

bool Values(const float* pa, const float* pb, size_t heads, size_t head_dim, const AttentionTile& t, float* acc) {
  switch (heads) {
    case 4: return ValuesOf<4>(pa, pb, head_dim, t, acc);
    case 3: return ValuesOf<3>(pa, pb, head_dim, t, acc);
    case 2: return ValuesOf<2>(pa, pb, head_dim, t, acc);
    default: return ValuesOf<1>(pa, pb, head_dim, t, acc);
  }
}

}  // namespace lowbit::kivi_int8
