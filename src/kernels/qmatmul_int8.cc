#include "kernels/qmatmul_int8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "core/error.h"
#include "formats/codec.h"
#include "kernels/qmatmul_int8-inl.h"

namespace lowbit {
namespace {

using namespace int8dot;  // NOLINT: the integer-dot kernels' shared pieces

// Code bytes are prefetched this far ahead of the dot: without it the loads stalled on memory and a
// 32000 x 4096 int4 g128 GEMV reached 60-63 % of the triad bandwidth (85-87 % with it, alternated runs).
constexpr size_t kPrefetchAhead = 2048;

// Whether every code's value is a whole number of one step (the smallest nonzero magnitude), all
// within 255 steps: then unsigned bytes times int8 activations are exact. Integers qualify (level
// = code), and so do FP4 E2M1 (halves), FP6 E2M3 (eighths), IQ4_NL and ternary; NF4, FP6 E3M2 and
// FP8 do not (irrational levels, or a range wider than a byte).
bool ExactByteLevels(std::span<const float> table, std::vector<int>& whole, float& step) {
  step = 0;
  for (const float v : table) {
    if (!std::isfinite(v)) return false;
    if (v != 0 && (step == 0 || std::fabs(v) < step)) step = std::fabs(v);
  }
  if (step == 0) step = 1;
  for (size_t c = 0; c < table.size(); ++c) {
    const float k = std::nearbyint(table[c] / step);
    if (std::fabs(k) > 255 || k * step != table[c]) return false;
    whole[c] = static_cast<int>(k);
  }
  return true;
}

// Otherwise a 16-level table may be rounded to 1/127 of its largest magnitude, as llama.cpp keeps
// IQ4_NL's non-linear levels as int8, when no level moves by more than 1/16 of the gap to its
// nearest neighbour: NF4 moves by at most 4.6 % of its smallest gap, 0.0037 of the group's scale
// (RMS 0.0023 on Gaussian groups of 64, against NF4's own 0.036: its error grows by 0.2 %); FP6
// E3M2 and FP8 would merge levels. Int8 activations already make these dots approximate.
bool RoundedByteLevels(std::span<const float> table, std::vector<int>& whole, float& step) {
  if (table.size() != 16) return false;
  float largest = 0;
  for (const float v : table) {
    if (!std::isfinite(v)) return false;
    largest = std::max(largest, std::fabs(v));
  }
  if (largest == 0) return false;
  std::vector<float> sorted(table.begin(), table.end());
  std::sort(sorted.begin(), sorted.end());
  float gap = std::numeric_limits<float>::infinity();
  for (size_t i = 1; i < sorted.size(); ++i) gap = std::min(gap, sorted[i] - sorted[i - 1]);
  step = largest / 127.0f;
  for (size_t c = 0; c < table.size(); ++c) {
    whole[c] = static_cast<int>(std::nearbyint(table[c] / step));
    if (std::fabs(static_cast<float>(whole[c]) * step - table[c]) > gap / 16) return false;
  }
  return true;
}

// The layout's byte levels for a code table, exact or rounded (false: neither).
bool ByteLevels(std::span<const float> table, Layout& l) {
  std::vector<int> whole(table.size());
  float step = 1;
  const bool exact = ExactByteLevels(table, whole, step);
  if (!exact && !RoundedByteLevels(table, whole, step)) return false;
  const auto [lo, hi] = std::minmax_element(whole.begin(), whole.end());
  if (*hi - *lo > 255) return false;
  l.step = step;
  l.offset = static_cast<float>(*lo);
  l.rounded = !exact;
  for (size_t c = 0; c < table.size(); ++c) l.lookup |= whole[c] - *lo != static_cast<int>(c);
  // Level tables at 2, 4 and 6 bits: ternary; FP4 E2M1 (MXFP4, NVFP4), IQ4_NL and NF4; FP6 E2M3. At 8
  // bits, two's complement codes (MXINT8) alone: their levels are the codes with the sign bit flipped.
  if (l.lookup && l.bits == 8) {
    for (size_t c = 0; c < table.size(); ++c)
      if (whole[c] - *lo != static_cast<int>(c ^ 0x80)) return false;
    return true;
  }
  if (l.lookup && l.bits != 2 && l.bits != 4 && l.bits != 6) return false;
  for (size_t c = 0; l.lookup && c < table.size(); ++c) l.level[c] = static_cast<uint8_t>(whole[c] - *lo);
  return true;
}

}  // namespace

namespace int8dot {

std::optional<Layout> LayoutOf(const QuantizedTensor& w) {
  const ElementFormat& e = *w.scheme().element;
  if (e.bits > 8) return std::nullopt;
  Layout l;
  l.bits = e.bits;
  // The levels depend on the code table alone; the last table seen on this thread is remembered,
  // since working them out (256 divisions at 8 bits) cost 5 % of a small model's decode.
  struct Memo {
    std::array<float, 256> table;
    size_t size = 0;
    bool fits = false;
    Layout levels;
  };
  thread_local Memo memo;
  const std::span<const float> table = w.decode_table().first(size_t{1} << e.bits);
  // Compared as bytes (one vectorized memcmp; a float loop over 256 entries was 3 % of a small model's decode).
  if (memo.size != table.size() || std::memcmp(table.data(), memo.table.data(), table.size_bytes()) != 0) {
    std::copy(table.begin(), table.end(), memo.table.begin());
    memo.size = table.size();
    memo.levels = l;
    memo.fits = ByteLevels(table, memo.levels);
  }
  if (!memo.fits) return std::nullopt;
  l = memo.levels;
  l.chunk = l.planes() ? 64 * 8 / e.bits : 64;
  l.groups = std::max<uint64_t>(w.grid().grid_cols, 1);
  l.group = l.groups == 1 ? w.cols() : w.grid().cell_cols;
  l.block = std::min(l.group, l.chunk);
  // Smaller groups split a chunk into whole dpbusd lanes (of 4 bytes: 16 / 8 / 4 codes at 2 / 4 /
  // 8 bits, 4 codes at other widths) of one group each.
  if (w.cols() % l.chunk != 0 || l.block % 16 != 0 || l.chunk % l.block != 0 || l.group % l.block != 0)
    return std::nullopt;
  const uint64_t per_super = w.scheme().super_groups();  // RowScaleSource::SuperLanes' two cases
  if (per_super && 16 % per_super != 0 && per_super % 16 != 0) return std::nullopt;
  // One activation scale per super-block of i8 sub-scales (Q2_K..Q6_K): whole chunks, whole rows.
  const size_t super = per_super * l.group;
  if (w.scheme().scale_type == ScaleType::kI8 && per_super && super % l.chunk == 0 && w.cols() % super == 0)
    l.shared_blocks = super / l.block;
  return l;
}

// Position of element i of a row in the activation layout. For 2/4/8 bits a chunk's byte k holds
// its codes k * per .. k * per + per - 1 (per = 8 / bits codes, LSB first), and the kernel
// multiplies one bit plane of the 64 bytes at a time, so each chunk stores its inputs plane by
// plane: for int4 the even inputs first, then the odd ones. Other widths are spread to one code
// per byte in order.
size_t ActivationSlot(const Layout& l, size_t i) {
  if (!l.planes()) return i;
  const size_t per = 8 / l.bits, k = i % l.chunk;
  return i - k + (k % per) * 64 + k / per;
}

// Per row: group scales and biases (offset and zero-point, times scale), as the fp32 kernel does.
void RowScales(const QuantizedTensor& w, const Layout& l, size_t r, float* scales, float* biases) {
  const bool asym = w.scheme().asymmetric();
  w.RowScales(r, scales, asym ? biases : nullptr);
  for (size_t g = 0; g < l.groups; ++g) {
    scales[g] *= l.step;
    biases[g] = (asym ? biases[g] : 0.0f) + l.offset * scales[g];
  }
}

}  // namespace int8dot

namespace {

// kLookup: codes become their levels by a byte shuffle (vpshufb up to 4 bits, vpermb for 5-6).
// kSplit: scale blocks per chunk (1, or up to 16 for groups of 16 at int2). Every chunk is scaled
// by weight x activation scale per block, multiplied for the whole row before its loop (16 blocks
// a vector); a split chunk spreads its blocks' products over the dpbusd lanes they cover. Groups
// of several chunks (per-channel int8) instead sum dot x activation scale over the group and take
// the weight scale once.
template <int kBits, size_t kTokens, size_t kSplit, bool kLookup>
LOWBIT_VNNI void RowsVnni(const QuantizedTensor& w, const Layout& l, const Int8Activations& a, size_t t0,
                          size_t row_begin, size_t row_end, float* y, size_t y_stride) {
  const size_t cols = w.cols(), chunks = cols / l.chunk, blocks = cols / l.block, chunks_per_group = l.group / l.chunk;
  // A per-row scalar pass over every chunk's product cost per-channel int8 40 % of its row, hence
  // the group sums there.
  const bool per_block_scales = chunks_per_group <= 1;  // else groups of several chunks
  // Padded to whole vectors, stored without masks: a masked store stalled the loads after it on
  // Zen 4 (16 % of a per-channel int8 row, for its one scale). 16 more for a spread's 4-float read.
  const size_t padded_groups = (l.groups + 15) / 16 * 16;
  std::vector<float> scales(per_block_scales ? 0 : padded_groups), block_scales(per_block_scales ? kTokens * padded_groups + 16 : 0);
  const LevelDecoder<kBits, kLookup> decoder(l);
  constexpr bool kPlanes = decltype(decoder)::kPlanes;
  constexpr size_t kChunkBytes = decltype(decoder)::kChunkBytes;
  constexpr size_t kChunkCodes = kPlanes ? 512 / kBits : 64;  // l.chunk
  // Lane j of a split chunk belongs to block j / (16 / kSplit): up to 4 blocks, an in-lane
  // permute of the 4 block scales broadcast to every 128-bit lane (cheaper than a cross-lane one).
  const __m512i lane_block = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               std::countr_zero(16 / kSplit));
  auto spread = [&](const float* blocks_of_chunk) LOWBIT_VNNI __attribute__((always_inline)) {
    if constexpr (kSplit <= 4) return _mm512_permutevar_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(blocks_of_chunk)), lane_block);
    else if constexpr (kSplit == 8) return _mm512_permutexvar_ps(lane_block, _mm512_castps256_ps512(_mm256_loadu_ps(blocks_of_chunk)));
    else return _mm512_loadu_ps(blocks_of_chunk);
  };
  const int8_t* inputs[kTokens];
  for (size_t t = 0; t < kTokens; ++t) inputs[t] = a.values.data() + (t0 + t) * cols;
  const RowScaleSource<kBits> row_scales(w, l);
  __m512 pending[kTokens][16];  // row sums not yet reduced
  for (size_t r = row_begin; r < row_end; ++r) {
    row_scales.Prefetch(r + 4);
    // Two accumulators per token, for even and odd chunks: one FMA chain would bound a chunk to its
    // latency. The second starts with the row's offsets: each group's bias times its sum of inputs.
    __m512 acc[kTokens][2];
    for (size_t t = 0; t < kTokens; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    row_scales.ForRow(r, [&](size_t g, __mmask16 m, __m512 s, __m512 bias) LOWBIT_VNNI __attribute__((always_inline)) {
      for (size_t t = 0; t < kTokens; ++t) {
        const size_t at = (t0 + t) * l.groups + g;
        acc[t][1] = _mm512_fmadd_ps(bias, _mm512_maskz_loadu_ps(m, &a.group_sums[at]), acc[t][1]);
        if (per_block_scales)  // a group is a block
          _mm512_storeu_ps(&block_scales[t * padded_groups + g], _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, &a.scales[at])));
      }
      if (!per_block_scales) _mm512_storeu_ps(&scales[g], s);
    });
    const uint8_t* row = w.codes().data() + r * w.row_bytes();
    auto step = [&](size_t c, size_t parity, __m512 (&into)[kTokens][2]) LOWBIT_VNNI __attribute__((always_inline)) {
      const uint8_t* at = row + c * kChunkBytes;
      __m512i codes;
      if constexpr (kPlanes) {
        codes = _mm512_loadu_si512(at);
        // One load per chunk: GCC would fold it into each bit plane's instruction, a second load.
        if constexpr (kBits < 8) asm("" : "+v"(codes));
        else codes = decoder.Plane(codes, 0);  // two's complement codes: their sign bit flipped
      } else
        codes = decoder.Spread(at);
      // The hardware prefetcher falls behind one stream per thread: a software prefetch 2 KB ahead
      // gained 15-20 % at g32, 65 % at int3 g128 and 45 % at int4 g128.
      // int3's 24-byte chunks: one prefetch per pair (still one per line or more).
      if (kChunkBytes > 32 || parity == 0) _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
      for (size_t t = 0; t < kTokens; ++t) {
        const int8_t* xq = inputs[t] + c * kChunkCodes;
        __m512i dot = _mm512_setzero_si512();
        if constexpr (kBits == 8 || !kPlanes) {
          dot = _mm512_dpbusd_epi32(dot, codes, _mm512_loadu_si512(xq));
        } else {
          for (int p = 0; p < 8 / kBits; ++p)  // bit plane p against the inputs stored for it
            dot = _mm512_dpbusd_epi32(dot, decoder.Plane(codes, p), _mm512_loadu_si512(xq + 64 * p));
        }
        const __m512 s = kSplit > 1        ? spread(&block_scales[t * padded_groups + c * kSplit])
                         : per_block_scales ? _mm512_set1_ps(block_scales[t * padded_groups + c])
                                            : _mm512_set1_ps(a.scales[(t0 + t) * blocks + c]);
        into[t][parity] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, into[t][parity]);
      }
    };
    auto steps = [&](size_t& c, size_t end, __m512 (&into)[kTokens][2]) LOWBIT_VNNI __attribute__((always_inline)) {
      for (; c + 2 <= end; c += 2) {
        step(c, 0, into);
        step(c + 1, 1, into);
      }
      if (c < end) step(c++, 0, into);
    };
    size_t c = 0;
    if (per_block_scales) {
      steps(c, chunks, acc);
    } else {
      for (size_t g = 0; g < l.groups; ++g) {
        __m512 in_group[kTokens][2];
        for (size_t t = 0; t < kTokens; ++t) in_group[t][0] = in_group[t][1] = _mm512_setzero_ps();
        steps(c, c + chunks_per_group, in_group);
        for (size_t t = 0; t < kTokens; ++t)
          acc[t][0] = _mm512_fmadd_ps(_mm512_add_ps(in_group[t][0], in_group[t][1]), _mm512_set1_ps(scales[g]), acc[t][0]);
      }
    }
    // Each row's sum is reduced with 15 others': a reduction per row was a latency chain at every
    // row's end (10-20 % of an int4 row).
    const size_t slot = (r - row_begin) % 16;
    for (size_t t = 0; t < kTokens; ++t) pending[t][slot] = _mm512_add_ps(acc[t][0], acc[t][1]);
    if (slot == 15 || r + 1 == row_end) {
      const size_t first = r - slot;
      for (size_t t = 0; t < kTokens; ++t) {
        for (size_t i = slot + 1; i < 16; ++i) pending[t][i] = _mm512_setzero_ps();
        _mm512_mask_storeu_ps(y + (t0 + t) * y_stride + first, static_cast<__mmask16>((2u << slot) - 1), ReduceEach16(pending[t], AddPs{}));
      }
    }
  }
}

}  // namespace

bool Int8DotKernelFits(const QuantizedTensor& w) { return int8dot::LayoutOf(w).has_value(); }

bool HasInt8DotKernel(const QuantizedTensor& w) {
  return (int8dot::CpuHasVnni() && Int8DotKernelFits(w)) || HasInt8DotKernelAvx2(w);
}

bool HasInt8GemmKernel(const QuantizedTensor& w) { return int8dot::CpuHasVnni() && Int8DotKernelFits(w); }

namespace int8dot {

Int8Activations EmptyActivations(const Layout& l, size_t cols, size_t n_tokens) {
  Int8Activations a;
  a.layout = l;
  a.n_tokens = n_tokens;
  a.cols = cols;
  a.values.resize(n_tokens * cols);
  a.scales.resize(n_tokens * cols / l.block);
  a.group_sums.assign(n_tokens * l.groups, 0.0f);
  return a;
}

// Adds block b's scale x (sum of its int8 values) to its group's sum. The product is exact in
// double, so the FMA the compiler may form in the AVX-512 version rounds the same as the reference.
void AddToGroupSum(Int8Activations& a, const Layout& l, size_t t, size_t b, float scale, int sum) {
  float& group_sum = a.group_sums[t * l.groups + b * l.block / l.group];
  group_sum = static_cast<float>(static_cast<double>(group_sum) + static_cast<double>(scale) * sum);
}

}  // namespace int8dot

namespace {

// Bytes 0, 2, .., 126 (even) or 1, 3, .., 127 (odd) of the 128 bytes lo:hi.
LOWBIT_VNNI __m512i Deinterleave(__m512i lo, __m512i hi, int parity) {
  alignas(64) uint8_t index[64];
  for (int i = 0; i < 64; ++i) index[i] = static_cast<uint8_t>(2 * i + parity);
  return _mm512_permutex2var_epi8(lo, _mm512_load_si512(index), hi);
}

// One chunk of inputs, quantized in natural order, into the kernel's bit-plane order
// (ActivationSlot): plane p holds inputs p, p + per, p + 2 per, ...
LOWBIT_VNNI void StorePlanes(const int8_t* natural, size_t per, int8_t* out) {
  __m512i v[4];
  for (size_t i = 0; i < per; ++i) v[i] = _mm512_loadu_si512(natural + 64 * i);
  if (per == 2) {
    v[2] = Deinterleave(v[0], v[1], 0);
    v[3] = Deinterleave(v[0], v[1], 1);
    v[0] = v[2];
    v[1] = v[3];
  } else if (per == 4) {  // split into even and odd inputs, then each of those again
    const __m512i even_lo = Deinterleave(v[0], v[1], 0), odd_lo = Deinterleave(v[0], v[1], 1);
    const __m512i even_hi = Deinterleave(v[2], v[3], 0), odd_hi = Deinterleave(v[2], v[3], 1);
    v[0] = Deinterleave(even_lo, even_hi, 0);
    v[1] = Deinterleave(odd_lo, odd_hi, 0);
    v[2] = Deinterleave(even_lo, even_hi, 1);
    v[3] = Deinterleave(odd_lo, odd_hi, 1);
  }
  for (size_t p = 0; p < per; ++p) _mm512_storeu_si512(out + 64 * p, v[p]);
}

// QuantizeActivationsInt8Ref with AVX-512: the same arithmetic (max |x|, the same scale and
// inverse, round half to even), so the same bytes.
LOWBIT_VNNI Int8Activations QuantizeActivationsVnni(const Layout& l, size_t cols, const float* x, size_t n_tokens) {
  Int8Activations a = EmptyActivations(l, cols, n_tokens);
  const size_t blocks = cols / l.block;
  AlignedVector<int8_t> natural(l.planes() ? l.chunk : 0);
  float scale = 0;
  __m512 inverse = _mm512_setzero_ps();
  for (size_t t = 0; t < n_tokens; ++t) {
    int8_t* values = a.values.data() + t * cols;
    for (size_t b = 0; b < blocks; ++b) {
      const float* src = x + t * cols + b * l.block;
      if (b % l.shared_blocks == 0) {  // a new activation scale
        __m512 amax = _mm512_setzero_ps();
        for (size_t i = 0; i < l.shared_blocks * l.block; i += 16)
          amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + i)), amax);  // NaN: keeps amax, as std::max
        const float m = _mm512_reduce_max_ps(amax);
        scale = m / 127.0f;
        inverse = _mm512_set1_ps(m > 0 ? 127.0f / m : 0.0f);
      }
      // A chunk in plane order is written once its last block is quantized; others go straight in.
      const size_t in_chunk = b * l.block % l.chunk;
      int8_t* dst = l.planes() && l.bits < 8 ? natural.data() + in_chunk : values + b * l.block;
      __m512i sum = _mm512_setzero_si512();
      for (size_t i = 0; i < l.block; i += 16) {
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + i), inverse));
        sum = _mm512_add_epi32(sum, q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtepi32_epi8(q));
      }
      if (dst != values + b * l.block && in_chunk + l.block == l.chunk)
        StorePlanes(natural.data(), 8 / l.bits, values + (b * l.block - in_chunk));
      a.scales[t * blocks + b] = scale;
      AddToGroupSum(a, l, t, b, scale, _mm512_reduce_add_epi32(sum));
    }
  }
  return a;
}

}  // namespace

Int8Activations QuantizeActivationsInt8(const QuantizedTensor& w, const float* x, size_t n_tokens) {
  if (!CpuHasVnni()) return HasInt8DotKernelAvx2(w) ? QuantizeActivationsInt8Avx2(w, x, n_tokens) : QuantizeActivationsInt8Ref(w, x, n_tokens);
  const std::optional<Layout> l = LayoutOf(w);
  LOWBIT_CHECK(l.has_value());
  return QuantizeActivationsVnni(*l, w.cols(), x, n_tokens);
}

bool SameInt8Activations(const QuantizedTensor& a, const QuantizedTensor& b) {
  if (a.cols() != b.cols()) return false;
  const std::optional<Layout> la = LayoutOf(a), lb = LayoutOf(b);
  return la && lb && *la == *lb;
}

Int8Activations QuantizeActivationsInt8Ref(const QuantizedTensor& w, const float* x, size_t n_tokens) {
  const std::optional<Layout> l = LayoutOf(w);
  LOWBIT_CHECK(l.has_value());
  const size_t cols = w.cols(), blocks = cols / l->block;
  Int8Activations a = EmptyActivations(*l, cols, n_tokens);
  float scale = 0, inverse = 0;
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t b = 0; b < blocks; ++b) {
      const float* src = x + t * cols + b * l->block;
      int8_t* dst = a.values.data() + t * cols;
      if (b % l->shared_blocks == 0) {  // a new activation scale, over the blocks that share it
        float amax = 0;
        for (size_t i = 0; i < l->shared_blocks * l->block; ++i) amax = std::max(amax, std::fabs(src[i]));
        scale = amax / 127.0f;
        inverse = amax > 0 ? 127.0f / amax : 0.0f;
      }
      int sum = 0;
      for (size_t i = 0; i < l->block; ++i) {
        const int q = static_cast<int>(std::nearbyint(src[i] * inverse));
        sum += q;
        dst[ActivationSlot(*l, b * l->block + i)] = static_cast<int8_t>(q);
      }
      a.scales[t * blocks + b] = scale;
      AddToGroupSum(a, *l, t, b, scale, sum);
    }
  return a;
}

void Int8DotRows(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride) {
  const Layout* l = &a.layout;  // LayoutOf(w), made once with the activations (a per-call cost on small matrices)
  LOWBIT_CHECK(a.cols == w.cols() && l->bits == w.scheme().element->bits);
  if (!CpuHasVnni()) return Int8DotRowsAvx2(w, a, row_begin, row_end, y, y_stride);
  DispatchLayout(*l, [&]<int kBits, bool kLookup, size_t kSplit>() {
    size_t t = 0;
    for (; t + 4 <= a.n_tokens; t += 4) RowsVnni<kBits, 4, kSplit, kLookup>(w, *l, a, t, row_begin, row_end, y, y_stride);
    for (; t < a.n_tokens; ++t) RowsVnni<kBits, 1, kSplit, kLookup>(w, *l, a, t, row_begin, row_end, y, y_stride);
  });
}

void Int8DotRowsRef(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                    size_t y_stride) {
  const Layout* l = &a.layout;
  LOWBIT_CHECK(a.cols == w.cols() && l->bits == w.scheme().element->bits);
  const size_t cols = w.cols(), blocks = cols / l->block;
  std::vector<float> scales(l->groups), biases(l->groups);
  for (size_t r = row_begin; r < row_end; ++r) {
    RowScales(w, *l, r, scales.data(), biases.data());
    const uint8_t* row = w.codes().data() + r * w.row_bytes();
    for (size_t t = 0; t < a.n_tokens; ++t) {
      double sum = 0;
      for (size_t b = 0; b < blocks; ++b) {
        int64_t dot = 0;
        for (size_t e = b * l->block; e < (b + 1) * l->block; ++e) {
          const int level = static_cast<int>(l->Level(ReadCode(row, e, l->bits)));
          dot += level * a.values[t * cols + ActivationSlot(*l, e)];
        }
        sum += static_cast<double>(dot) * scales[b * l->block / l->group] * a.scales[t * blocks + b];
      }
      for (size_t g = 0; g < l->groups; ++g) sum += static_cast<double>(biases[g]) * a.group_sums[t * l->groups + g];
      y[t * y_stride + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace lowbit
