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
      : at_(static_cast<const char*>(next)), end_(next ? at_ + bytes : at_), share_(64 * ((bytes + 64 * steps - 1) / (64 * steps))) {}
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

// x[0, n) (n a multiple of 32) to int8 offset by 128 (as unsigned bytes), one scale per 32: code =
// round(x / scale) + 128, scale = max |x| / 127. Four groups at a time, their maxima reduced
// together (a reduction per group was a tenth of a tile).
LOWBIT_VNNI void QuantizeGroups(const float* x, size_t n, uint8_t* codes, float* scales) {
  const __m128i offset = _mm_set1_epi8(static_cast<char>(0x80));
  const __m512 zero = _mm512_setzero_ps();
  for (size_t g0 = 0; g0 < n / kGroup; g0 += 4) {
    const size_t count = std::min<size_t>(4, n / kGroup - g0);
    __m512 half[4][2], top[4];
    for (size_t k = 0; k < 4; ++k) {
      top[k] = zero;
      if (k >= count) continue;
      half[k][0] = _mm512_loadu_ps(x + (g0 + k) * kGroup);
      half[k][1] = _mm512_loadu_ps(x + (g0 + k) * kGroup + 16);
      top[k] = _mm512_max_ps(_mm512_abs_ps(half[k][0]), _mm512_abs_ps(half[k][1]));
    }
    // 128-bit lane k of `tops` ends up holding group k's maximum in each of its 4 floats.
    const __m512 t01 = _mm512_max_ps(_mm512_shuffle_f32x4(top[0], top[1], 0x44), _mm512_shuffle_f32x4(top[0], top[1], 0xEE));
    const __m512 t23 = _mm512_max_ps(_mm512_shuffle_f32x4(top[2], top[3], 0x44), _mm512_shuffle_f32x4(top[2], top[3], 0xEE));
    __m512 tops = _mm512_max_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
    tops = _mm512_max_ps(tops, _mm512_permute_ps(tops, 0x4E));
    tops = _mm512_max_ps(tops, _mm512_permute_ps(tops, 0xB1));
    const __m512 inverse = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(tops, zero, _CMP_GT_OQ), _mm512_set1_ps(127.0f), tops);
    alignas(64) float group_tops[16];
    _mm512_store_ps(group_tops, tops);
    for (size_t k = 0; k < count; ++k) {
      scales[g0 + k] = group_tops[4 * k] / 127.0f;
      const __m512 by = _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(4 * k)), inverse);
      uint8_t* out = codes + (g0 + k) * kGroup;
      for (size_t part = 0; part < 2; ++part)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * part),
                         _mm_xor_si128(_mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(half[k][part], by))), offset));
    }
  }
}

// The codes enter centred (code - 8, signed), which halves what the query's rounding costs, and the
// query offset by 128 (unsigned, vpdpbusd's other operand): sum_j (q_j + 128)(code - 8) less 128 x the
// codes' own sum (one more dot, shared by the heads), plus 8 sum_j q_j a_j, exactly, in the bias.
template <size_t kHeads>
LOWBIT_VNNI void ScoresOf(const float* qa, const float* qb, size_t head_dim, float scale, const AttentionTile& t,
                          size_t c0, size_t c1, float* sc) {
  alignas(64) uint8_t codes[kHeads][kMaxHeadDim];
  float group_scales[kHeads][kMaxHeadDim / kGroup], biases[kHeads];
  for (size_t h = 0; h < kHeads; ++h) {
    QuantizeGroups(qa + h * head_dim, head_dim, codes[h], group_scales[h]);
    __m512 total = _mm512_setzero_ps();
    for (size_t j = 0; j < head_dim; j += 16) total = _mm512_add_ps(total, _mm512_loadu_ps(qa + h * head_dim + j));
    biases[h] = qb[h] + 8 * _mm512_reduce_add_ps(total);
  }
  const __m512i interleave = InterleaveIndex(), low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  const __m512i ones = _mm512_set1_epi8(1);
  const InOrder order;
  const uint8_t* keys = static_cast<const uint8_t*>(t.k);
  NextTile next(t.next_k, head_dim * t.k_stride, (c1 - c0) / 32 * head_dim / 4);
  for (size_t s = c0 / 32; s < c1 / 32; ++s) {  // positions [32 s, 32 s + 32): bytes [16 s, 16 s + 16) of each channel
    __m512 lo_sum[kHeads], hi_sum[kHeads];
    for (size_t h = 0; h < kHeads; ++h) lo_sum[h] = hi_sum[h] = _mm512_setzero_ps();
    for (size_t g = 0; g < head_dim / kGroup; ++g) {
      __m512i lo[kHeads], hi[kHeads], lo_codes = _mm512_setzero_si512(), hi_codes = _mm512_setzero_si512();
      for (size_t h = 0; h < kHeads; ++h) lo[h] = hi[h] = _mm512_setzero_si512();
      for (size_t j = g * kGroup; j < (g + 1) * kGroup; j += 4) {  // channels j .. j + 3 in each dword
        next.Step();
        const __m512i codes4 = Quad(keys + j * t.k_stride + 16 * s, t.k_stride, interleave);
        const __m512i even = _mm512_sub_epi8(_mm512_and_si512(codes4, low), eight);
        const __m512i odd = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(codes4, 4), low), eight);
        lo_codes = _mm512_dpbusd_epi32(lo_codes, ones, even);
        hi_codes = _mm512_dpbusd_epi32(hi_codes, ones, odd);
        for (size_t h = 0; h < kHeads; ++h) {
          int32_t query;
          std::memcpy(&query, &codes[h][j], 4);
          const __m512i q4 = _mm512_set1_epi32(query);
          lo[h] = _mm512_dpbusd_epi32(lo[h], q4, even);
          hi[h] = _mm512_dpbusd_epi32(hi[h], q4, odd);
        }
      }
      lo_codes = _mm512_slli_epi32(lo_codes, 7);
      hi_codes = _mm512_slli_epi32(hi_codes, 7);
      for (size_t h = 0; h < kHeads; ++h) {
        const __m512 group_scale = _mm512_set1_ps(group_scales[h][g]);
        lo_sum[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo[h], lo_codes)), group_scale, lo_sum[h]);
        hi_sum[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi[h], hi_codes)), group_scale, hi_sum[h]);
      }
    }
    const __m512 factor = _mm512_set1_ps(scale);
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 bias = _mm512_set1_ps(biases[h]);
      float* out = sc + h * (c1 - c0) + (32 * s - c0);
      _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_add_ps(_mm512_permutex2var_ps(lo_sum[h], order.first, hi_sum[h]), bias), factor));
      _mm512_storeu_ps(out + 16,
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
  // The codes enter centred (code - 8, as signed bytes), which halves what the weights' rounding
  // costs; sum_i weight_i x 8 goes into the bias, exactly.
  float weight_scales[kHeads], biases[kHeads];
  for (size_t h = 0; h < kHeads; ++h) {
    const float* p = pa + h * n;
    __m512 top = _mm512_setzero_ps(), total = _mm512_setzero_ps();
    __mmask16 negative = 0;
    for (size_t i = 0; i < n; i += 16) {
      const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << std::min<size_t>(16, n - i)) - 1), p + i);
      top = _mm512_max_ps(top, x);
      total = _mm512_add_ps(total, x);
      negative |= _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    }
    if (negative) return false;
    biases[h] = pb[h] + 8 * _mm512_reduce_add_ps(total);
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
  for (size_t i = 4 * whole; i < n; ++i) std::memcpy(tail + (i - 4 * whole) * row_bytes, rows + i * t.v_stride, row_bytes);

  const __m512i interleave = InterleaveIndex(), low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  const InOrder order;
  NextTile next(t.next_v, n * t.v_stride, head_dim / 32 * quads);
  for (size_t s = 0; s < head_dim / 32; ++s) {  // elements [32 s, 32 s + 32): bytes [16 s, 16 s + 16) of each row
    __m512i lo[kHeads], hi[kHeads];
    for (size_t h = 0; h < kHeads; ++h) lo[h] = hi[h] = _mm512_setzero_si512();
    for (size_t i = 0; i < quads; ++i) {  // positions 4i .. 4i + 3 in each dword
      next.Step();
      const __m512i codes4 = i < whole ? Quad(rows + 4 * i * t.v_stride + 16 * s, t.v_stride, interleave)
                                       : Quad(tail + 16 * s, row_bytes, interleave);
      const __m512i even = _mm512_sub_epi8(_mm512_and_si512(codes4, low), eight);
      const __m512i odd = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(codes4, 4), low), eight);
      for (size_t h = 0; h < kHeads; ++h) {
        const __m512i w4 = _mm512_set1_epi32(static_cast<int32_t>(quad_weights[h * quads + i]));
        lo[h] = _mm512_dpbusd_epi32(lo[h], w4, even);
        hi[h] = _mm512_dpbusd_epi32(hi[h], w4, odd);
      }
    }
    for (size_t h = 0; h < kHeads; ++h) {
      const __m512 weight_scale = _mm512_set1_ps(weight_scales[h]), bias = _mm512_set1_ps(biases[h]);
      const __m512 even = _mm512_cvtepi32_ps(lo[h]), odd = _mm512_cvtepi32_ps(hi[h]);
      float* out = acc + h * head_dim + 32 * s;
      _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), _mm512_fmadd_ps(_mm512_permutex2var_ps(even, order.first, odd),
                                                                                 weight_scale, bias)));
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
