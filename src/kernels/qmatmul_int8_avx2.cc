// The integer-dot kernel (qmatmul_int8.h) for CPUs with AVX2 and no VNNI: the same int8
// activations, in the same order, and the same scale blocks. vpmaddubsw multiplies 32 unsigned
// levels by 32 int8 inputs and adds them in pairs to int16, vpmaddwd adds those pairs to int32 (as
// llama.cpp's AVX2 dots do); a 64-byte plane is two 32-byte halves, whose int32 lanes belong to
// the scale blocks the VNNI kernel gives them. vpmaddubsw saturates its int16 sums, so:
//   narrow levels (planes x largest level <= 128: int2, int4, FP4 E2M1, ternary) add their planes
//   in int16 and widen once;
//   wide levels (8-bit codes, IQ4_NL) are made signed, level - 128, and multiplied as |level| by
//   input x sign(level), each plane widened alone; the 128 is added back through the groups' sums
//   of inputs, as the layout's offset is. The inputs are within +-127, so no product overflows.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/qmatmul_int8-inl.h"
#include "kernels/qmatmul_int8_avx2-inl.h"
#include "kernels/qmatmul_int8.h"

namespace lowbit {
namespace {

using namespace int8dot;  // NOLINT: the integer-dot kernels' shared pieces

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && CpuLevelAllowed(CpuLevel::kAvx2);
}

// As in qmatmul_int8.cc: the hardware prefetcher falls behind one stream per thread.
constexpr size_t kPrefetchAhead = 2048;

// 2/4/8-bit codes, level tables among them (one byte shuffle holds 16 levels; not two's complement
// 8-bit codes, which stay on the fp32 kernel); integers of other
// widths (Q3_K, Q5_0, Q5_K, Q6_K), spread to a byte each.
bool Avx2Fits(const Layout& l) { return (l.planes() || !l.lookup) && !(l.lookup && l.bits == 8); }

int Planes(const Layout& l) { return l.planes() ? 8 / l.bits : 1; }

int LargestLevel(const Layout& l) {
  if (!l.lookup) return (1 << l.bits) - 1;
  return *std::max_element(l.level.begin(), l.level.begin() + (1 << l.bits));
}

bool WideLevels(const Layout& l) { return LargestLevel(l) * Planes(l) > 128; }

// int16 pair sums of 32 levels times 32 inputs.
template <bool kWide>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256i PairSums(__m256i levels, const int8_t* x) {
  const __m256i in = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  if constexpr (kWide) return _mm256_maddubs_epi16(_mm256_abs_epi8(levels), _mm256_sign_epi8(in, levels));
  else return _mm256_maddubs_epi16(levels, in);
}

// The int32 sums (8 lanes, 4 products each) of half a chunk's levels times their inputs: plane p's
// inputs at x + 64 p.
template <bool kWide, int kPlanes>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256i HalfSums(const __m256i (&levels)[kPlanes], const int8_t* x,
                                                                  __m256i ones) {
  if constexpr (kWide) {  // each plane widened alone: its pair sums may be near the int16 limit
    __m256i sums = _mm256_madd_epi16(PairSums<true>(levels[0], x), ones);
    for (int p = 1; p < kPlanes; ++p) sums = _mm256_add_epi32(sums, _mm256_madd_epi16(PairSums<true>(levels[p], x + 64 * p), ones));
    return sums;
  } else {
    __m256i pairs = PairSums<false>(levels[0], x);
    for (int p = 1; p < kPlanes; ++p) pairs = _mm256_add_epi16(pairs, PairSums<false>(levels[p], x + 64 * p));
    return _mm256_madd_epi16(pairs, ones);
  }
}

// The sums of kTokens tokens' int32 vectors side by side: lane j holds (a part of) token j % kTokens's.
// One vector of sums, scaled by TokenLanes of the tokens' factors, takes one conversion and one FMA for
// every token, where each token's vector took its own: those ran on the ports the dots need.
template <size_t kTokens>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256i TokenSums(const __m256i (&v)[kTokens]) {
  if constexpr (kTokens == 1) {
    return v[0];
  } else if constexpr (kTokens == 4) {  // (t0, t1, t2, t3 | t0, t1, t2, t3)
    return _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  } else {
    static_assert(kTokens == 8);
    const __m256i low = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i high = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20), _mm256_permute2x128_si256(low, high, 0x31));
  }
}
// kTokens floats laid out as TokenSums lays out the tokens.
template <size_t kTokens>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256 TokenLanes(const float* p) {
  if constexpr (kTokens == 1) return _mm256_broadcast_ss(p);
  else if constexpr (kTokens == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
  else return _mm256_loadu_ps(p);
}

// The block scale of each int32 lane of half h of a chunk split into kSplit blocks: lane j of the
// 16 in a 64-byte plane belongs to block j / (16 / kSplit).
template <size_t kSplit>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256 LaneScales(const float* blocks_of_chunk, int h) {
  if constexpr (kSplit == 1) return _mm256_broadcast_ss(blocks_of_chunk);
  else if constexpr (kSplit == 2) return _mm256_broadcast_ss(blocks_of_chunk + h);
  else if constexpr (kSplit == 16) return _mm256_loadu_ps(blocks_of_chunk + 8 * h);
  else {
    constexpr int kPerBlock = 16 / kSplit;  // lanes per block: 4 (kSplit 4) or 2 (kSplit 8)
    const __m256i lane_block = _mm256_setr_epi32(0 / kPerBlock, 1 / kPerBlock, 2 / kPerBlock, 3 / kPerBlock,
                                                 4 / kPerBlock, 5 / kPerBlock, 6 / kPerBlock, 7 / kPerBlock);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(blocks_of_chunk + h * kSplit / 2)), lane_block);
  }
}

// The scales of two chunks' blocks as RowsAvx2 folds their sums: a half's lanes belong to one block
// (kSplit 2) or two (kSplit 4: lanes 0-3 and 4-7), and hadd(hadd(c0 h0, c0 h1), hadd(c1 h0, c1 h1))
// leaves blocks (0, 1, 2, 3 | 0, 1, 2, 3) or (0, 2, 4, 6 | 1, 3, 5, 7) in its lanes.
template <size_t kSplit>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256 FoldedBlockScales(const float* blocks) {
  if constexpr (kSplit == 2) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(blocks));
  else return _mm256_permutevar8x32_ps(_mm256_loadu_ps(blocks), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

// The K-quants' i8 sub-scales of one chunk (kSplit groups) as int16 multipliers for half h's pair
// sums: int16 lanes 2j and 2j + 1 make int32 lane j, of group (8h + j) / (16 / kSplit).
template <size_t kSplit>
LOWBIT_AVX2 __attribute__((always_inline)) inline __m128i SubScaleBytes(const int8_t* p) {
  if constexpr (kSplit == 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  else if constexpr (kSplit == 8) return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  else {
    int32_t bytes = 0;
    std::memcpy(&bytes, p, kSplit);
    return _mm_cvtsi32_si128(bytes);
  }
}
// The same for a chunk spread as its even codes then its odd ones: int16 lane j of either half covers
// codes 4j .. 4j + 3, of group 4j / (64 / kSplit).
template <size_t kSplit>
LOWBIT_AVX2 inline __m128i EvenOddScaleIndex() {
  alignas(16) int8_t index[16];
  for (int j = 0; j < 16; ++j) index[j] = static_cast<int8_t>(j * static_cast<int>(kSplit) / 16);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(index));
}
template <size_t kSplit>
LOWBIT_AVX2 inline __m128i SubScaleIndex(int h) {
  alignas(16) int8_t index[16];
  for (int i = 0; i < 16; ++i) index[i] = static_cast<int8_t>((8 * h + i / 2) * static_cast<int>(kSplit) / 16);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(index));
}

// n floats from p, and zeros for the rest of 8 (not read).
LOWBIT_AVX2 __attribute__((always_inline)) inline __m256 LoadFloats(const float* p, size_t n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes));
}

LOWBIT_AVX2 inline float Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// sum a[i] * b[i], 8 lanes at a time.
LOWBIT_AVX2 float DotF32(const float* a, const float* b, size_t n) {
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float sum = Sum(acc);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// to[b] = weight_scales[b / per_group] * x_scales[b]: the scale of each block's int32 dot. A scalar
// loop here took a quarter of an int6 g128 row.
LOWBIT_AVX2 void BlockScales(const float* weight_scales, const float* x_scales, size_t blocks, size_t per_group, float* to) {
  size_t b = 0;
  if (per_group == 1) {
    for (; b + 8 <= blocks; b += 8) _mm256_storeu_ps(to + b, _mm256_mul_ps(_mm256_loadu_ps(weight_scales + b), _mm256_loadu_ps(x_scales + b)));
  } else if (per_group == 2 || per_group == 4) {  // each weight scale repeated per_group times
    const __m256i repeat = per_group == 2 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3) : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    for (; b + 8 <= blocks; b += 8) {
      const __m256 w = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(weight_scales + b / per_group)), repeat);
      _mm256_storeu_ps(to + b, _mm256_mul_ps(w, _mm256_loadu_ps(x_scales + b)));
    }
  } else if (per_group % 8 == 0) {
    for (; b < blocks; b += 8)
      _mm256_storeu_ps(to + b, _mm256_mul_ps(_mm256_broadcast_ss(weight_scales + b / per_group), _mm256_loadu_ps(x_scales + b)));
  }
  for (; b < blocks; ++b) to[b] = weight_scales[b / per_group] * x_scales[b];
}

// Whether rows spread for integer sub-scales (kIntScales, kSpreadIn) hold each 64 codes as their even
// codes then their odd ones: where two pair sums of levels times inputs fit int16 (2 * 2 * 63 * 127).
template <int kBits>
constexpr bool kEvenOddSpread = kBits <= 6;

// Groups of 4 or 8 tokens on chunks of 2 or 4 blocks, each block under one weight scale (a block is
// shorter than a chunk only where it is the group): each half's sums summed across lanes 4 tokens at
// a time (RowsAvx2), where a lone token folds two chunks' blocks.
template <size_t kSplit, size_t kTokens, bool kIntScales>
constexpr bool kTokenLanes = !kIntScales && (kSplit == 2 || kSplit == 4) && kTokens % 4 == 0;

// Where block b's activation scale for token t lies for kTokenLanes: the 8 floats (kSplit 4) or 4
// (kSplit 2: one block a half, both 128-bit lanes) of a half and 4 tokens in TokenSums<4>'s order.
template <size_t kSplit, size_t kTokens>
constexpr size_t LaneIndex(size_t b, size_t t) {
  constexpr size_t kPair = kSplit / 2;  // blocks a half
  return ((b / kPair) * (kTokens / 4) + t / 4) * 4 * kPair + b % kPair * 4 + t % 4;
}

// Bytes read past a chunk of 64 codes: SpreadDecoder's last load, else none.
template <int kBits>
constexpr size_t kOverread = 8 % kBits == 0 ? 0 : 16 - kBits;

// kIntScales (the K-quants, whose activations share one scale per super-block): each pair sum is
// multiplied by its group's i8 sub-scale in the vpmaddwd that widens it, and the int32 sums of a
// super-block are converted and scaled once, as llama.cpp's AVX2 K-quant dots do; otherwise each
// chunk's int32 sums are converted and scaled by block. kSpreadIn: the rows' 3/5/6/7-bit codes come
// spread to a byte each (SpreadRows), rows [row_begin, row_end) at `spread_rows`; with kIntScales
// (and kEvenOddSpread) each chunk's even codes then its odd ones, and `values` (the activations the
// kernel reads, else a.values) in the same order (EvenOdd).
template <int kBits, bool kLookup, bool kWide, size_t kSplit, size_t kTokens, bool kIntScales, bool kSpreadIn>
LOWBIT_AVX2 void RowsAvx2(const QuantizedTensor& w, const Layout& l, const Int8Activations& a, const int8_t* values,
                          size_t t0, size_t row_begin, size_t row_end, const uint8_t* spread_rows, float* y,
                          size_t y_stride) {
  constexpr bool kPlaneLayout = 8 % kBits == 0;
  static_assert(!(kPlaneLayout && kSpreadIn));
  constexpr int kPlanes = kPlaneLayout ? 8 / kBits : 1;
  constexpr size_t kChunkBytes = kPlaneLayout || kSpreadIn ? 64 : 8 * kBits;
  const size_t cols = w.cols(), chunks = cols / l.chunk, blocks = cols / l.block, blocks_per_group = l.group / l.block;
  const size_t padded_groups = (l.groups + 7) / 8 * 8;
  std::vector<float> scales(padded_groups + 8), biases(padded_groups + 8);  // 8 more: BlockScales reads 4 at a time
  const RowScalesAvx2<kBits, kWide> row_scales(w, l);
  const bool vector_scales = row_scales.Fits(), has_biases = row_scales.HasBiases();
  // Each token's block scales, whole vectors apart (ForRow's stores), 8 more at the end: LaneScales reads 4.
  const size_t block_stride = (blocks + 7) / 8 * 8;
  std::vector<float> block_scales(kTokens * block_stride + 8);
  const PlaneDecoder<kBits, kLookup, kWide> decoder(l);
  const SpreadDecoder<kBits> spread;
  const size_t super_codes = l.shared_blocks * l.block, chunks_per_super = super_codes / l.chunk;
  // The tensor's last row, copied where the spread's loads may run past it.
  std::vector<uint8_t> last_row;
  if (!kSpreadIn && kOverread<kBits> && row_end == w.rows()) {
    last_row.assign(w.row_bytes() + kOverread<kBits>, 0);
    std::memcpy(last_row.data(), w.codes().data() + (w.rows() - 1) * w.row_bytes(), w.row_bytes());
  }
  const __m256i ones = _mm256_set1_epi16(1);
  // The levels of half kHalf of the chunk at `at`: planes of 2/4/8-bit codes, or spread codes.
  auto half_levels = [&]<int kHalf>(const uint8_t* at, __m256i (&levels)[kPlanes]) LOWBIT_AVX2 __attribute__((always_inline)) {
    if constexpr (kPlaneLayout) {
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32 * kHalf));
      for (int p = 0; p < kPlanes; ++p) levels[p] = decoder.Plane(codes, p);
    } else if constexpr (kSpreadIn) {
      levels[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32 * kHalf));
    } else {
      levels[0] = spread.Codes(at + 4 * kBits * kHalf);
    }
  };
  const int8_t* inputs[kTokens];
  for (size_t t = 0; t < kTokens; ++t) inputs[t] = values + (t0 + t) * cols;
  // kIntScales: each super-block's activation scales, the tokens side by side.
  std::vector<float> token_scales(kIntScales ? cols / super_codes * kTokens : 0);
  for (size_t k = 0; k < token_scales.size() / kTokens; ++k)
    for (size_t t = 0; t < kTokens; ++t) token_scales[k * kTokens + t] = a.scales[(t0 + t) * blocks + k * l.shared_blocks];
  // kTokenLanes: the activation scales as the half's blocks and four tokens lie in TokenSums<4>'s lanes
  // (LaneIndex).
  constexpr bool kLanes = kTokenLanes<kSplit, kTokens, kIntScales>;
  LOWBIT_CHECK(!kLanes || blocks_per_group == 1);
  std::vector<float> lane_scales(kLanes ? blocks * kTokens : 0);
  for (size_t b = 0; b < lane_scales.size() / kTokens; ++b)
    for (size_t t = 0; t < kTokens; ++t) lane_scales[LaneIndex<kSplit, kTokens>(b, t)] = a.scales[(t0 + t) * blocks + b];
  for (size_t r = row_begin; r < row_end; ++r) {
    float bias_sums[kTokens];
    if (vector_scales) {
      // One pass over the row's groups: each group's scale times the tokens' block scales, and its
      // bias times their group sums. Three passes (decode, scale, bias) took a third of a Q4_K row.
      __m256 bias_acc[kTokens];
      for (size_t t = 0; t < kTokens; ++t) bias_acc[t] = _mm256_setzero_ps();
      row_scales.ForRow(r, [&](size_t g, size_t n, __m256 s, __m256 bias) LOWBIT_AVX2 __attribute__((always_inline)) {
        for (size_t t = 0; t < kTokens; ++t) {
          if (has_biases) bias_acc[t] = _mm256_fmadd_ps(bias, LoadFloats(&a.group_sums[(t0 + t) * l.groups + g], n), bias_acc[t]);
          if (!kIntScales && blocks_per_group == 1 && !kLanes)  // a group is a block
            _mm256_storeu_ps(&block_scales[t * block_stride + g], _mm256_mul_ps(s, LoadFloats(&a.scales[(t0 + t) * blocks + g], n)));
        }
        if (!kIntScales && (blocks_per_group != 1 || kLanes)) _mm256_storeu_ps(&scales[g], s);
      });
      for (size_t t = 0; t < kTokens; ++t) {
        if (!kIntScales && blocks_per_group != 1) BlockScales(scales.data(), &a.scales[(t0 + t) * blocks], blocks, blocks_per_group, &block_scales[t * block_stride]);
        bias_sums[t] = Sum(bias_acc[t]);
      }
    } else {
      RowScales(w, l, r, scales.data(), biases.data());
      if constexpr (kWide)
        for (size_t g = 0; g < l.groups; ++g) biases[g] += 128.0f * scales[g];
      for (size_t t = 0; t < kTokens; ++t) {
        BlockScales(scales.data(), &a.scales[(t0 + t) * blocks], blocks, blocks_per_group, &block_scales[t * block_stride]);
        bias_sums[t] = DotF32(biases.data(), &a.group_sums[(t0 + t) * l.groups], l.groups);
      }
    }
    const uint8_t* row = kSpreadIn                                   ? spread_rows + (r - row_begin) * cols
                         : !last_row.empty() && r + 1 == w.rows() ? last_row.data()
                                                                  : w.codes().data() + r * w.row_bytes();
    if constexpr (kIntScales) {
      __m256 token_acc = _mm256_setzero_ps();  // lane j: token j % kTokens
      const int8_t* sub = row_scales.SubScales(r);
      const __m128i index[2] = {SubScaleIndex<kSplit>(0), SubScaleIndex<kSplit>(1)};
      for (size_t k = 0; k < cols / super_codes; ++k) {
        __m256i dot[kTokens];
        for (size_t t = 0; t < kTokens; ++t) dot[t] = _mm256_setzero_si256();
        for (size_t c = k * chunks_per_super; c < (k + 1) * chunks_per_super; ++c) {
          const uint8_t* at = row + c * kChunkBytes;
          _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
          const __m128i sub_bytes = SubScaleBytes<kSplit>(sub + c * kSplit);
          if constexpr (kSpreadIn && kEvenOddSpread<kBits>) {
            // Even and odd codes: int16 lane j of both halves' pair sums covers codes 4j .. 4j + 3, one
            // group, so the two add before the one vpmaddwd (each at most 2 * 63 * 127: the sum fits).
            const __m256i multipliers = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sub_bytes, EvenOddScaleIndex<kSplit>()));
            const __m256i even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
            const __m256i odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32));
            for (size_t t = 0; t < kTokens; ++t) {
              const int8_t* x = inputs[t] + c * l.chunk;
              const __m256i pairs = _mm256_add_epi16(PairSums<false>(even, x), PairSums<false>(odd, x + 32));
              dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(pairs, multipliers));
            }
            continue;
          }
          auto half = [&]<int kHalf>() LOWBIT_AVX2 __attribute__((always_inline)) {
            const __m256i multipliers = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sub_bytes, index[kHalf]));
            __m256i levels[kPlanes];
            half_levels.template operator()<kHalf>(at, levels);
            for (size_t t = 0; t < kTokens; ++t) {
              const int8_t* x = inputs[t] + c * l.chunk + 32 * kHalf;  // plane p's inputs at x + 64 p
              __m256i pairs = PairSums<false>(levels[0], x);
              for (int p = 1; p < kPlanes; ++p) pairs = _mm256_add_epi16(pairs, PairSums<false>(levels[p], x + 64 * p));
              dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(pairs, multipliers));
            }
          };
          half.template operator()<0>();
          half.template operator()<1>();
        }
        const __m256 factors = _mm256_mul_ps(_mm256_set1_ps(row_scales.SuperScale(r, k)), TokenLanes<kTokens>(&token_scales[k * kTokens]));
        token_acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(TokenSums<kTokens>(dot)), factors, token_acc);
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, token_acc);
      for (size_t t = 0; t < kTokens; ++t) {
        float sum = 0;
        for (size_t lane = t; lane < 8; lane += kTokens) sum += lanes[lane];
        y[(t0 + t) * y_stride + r] = sum + bias_sums[t];
      }
      continue;
    }
    if constexpr (kLanes) {
      // Four tokens' int32 sums of a half summed across lanes by the hadds of TokenSums<4>, which lay
      // them side by side: (the half's low block: tokens 0-3 | its high block: tokens 0-3). One
      // conversion and one FMA per half and 4 tokens, and 1 or 2 accumulators, where the folds of two
      // chunks held 2 vectors per token and spilled on AVX2's 16 registers.
      __m256 lane_acc[kTokens / 4];
      for (auto& v : lane_acc) v = _mm256_setzero_ps();
      for (size_t c = 0; c < chunks; ++c) {
        const uint8_t* at = row + c * kChunkBytes;
        _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
        auto half = [&]<int kHalf>() LOWBIT_AVX2 __attribute__((always_inline)) {
          __m256i levels[kPlanes];
          half_levels.template operator()<kHalf>(at, levels);
          const size_t b = c * kSplit + kHalf * kSplit / 2;  // the block of the half's low 128 bits
          const __m256 weight = kSplit == 4
                                    ? _mm256_set_m128(_mm_broadcast_ss(&scales[b + 1]), _mm_broadcast_ss(&scales[b]))
                                    : _mm256_broadcast_ss(&scales[b]);
          for (size_t q = 0; q < kTokens / 4; ++q) {
            __m256i sums[4];
            for (size_t i = 0; i < 4; ++i)
              sums[i] = HalfSums<kWide, kPlanes>(levels, inputs[4 * q + i] + c * l.chunk + 32 * kHalf, ones);
            const float* xs = &lane_scales[LaneIndex<kSplit, kTokens>(b, 4 * q)];
            const __m256 token_scales_of_half =
                kSplit == 4 ? _mm256_loadu_ps(xs) : _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xs));
            const __m256 factors = _mm256_mul_ps(weight, token_scales_of_half);
            lane_acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(TokenSums<4>(sums)), factors, lane_acc[q]);
          }
        };
        half.template operator()<0>();
        half.template operator()<1>();
      }
      for (size_t q = 0; q < kTokens / 4; ++q) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, lane_acc[q]);
        for (size_t i = 0; i < 4; ++i) y[(t0 + 4 * q + i) * y_stride + r] = lanes[i] + lanes[i + 4] + bias_sums[4 * q + i];
      }
      continue;
    }
    __m256 acc[kTokens][2];
    for (size_t t = 0; t < kTokens; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    size_t c = 0;
    if constexpr (!kIntScales && (kSplit == 2 || kSplit == 4) && kTokens == 1) {
      // A lone token, two chunks at a time: each half's int32 lanes folded by vphaddd, twice, into one
      // vector of one sum per block (FoldedBlockScales gives the order), converted and scaled once per
      // 2 kSplit blocks. A conversion and an FMA per block ran on the same two ports as the dots
      // themselves; the folds run mostly on the shuffle port.
      for (; c + 2 <= chunks; c += 2) {
        __m256i folded[2][kTokens];  // per chunk: hadd(half 0, half 1)
        auto chunk = [&]<int kChunk>() LOWBIT_AVX2 __attribute__((always_inline)) {
          const uint8_t* at = row + (c + kChunk) * kChunkBytes;
          _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
          auto half = [&]<int kHalf>() LOWBIT_AVX2 __attribute__((always_inline)) {
            __m256i levels[kPlanes];
            half_levels.template operator()<kHalf>(at, levels);
            for (size_t t = 0; t < kTokens; ++t) {
              const int8_t* x = inputs[t] + (c + kChunk) * l.chunk + 32 * kHalf;
              const __m256i sums = HalfSums<kWide, kPlanes>(levels, x, ones);
              folded[kChunk][t] = kHalf == 0 ? sums : _mm256_hadd_epi32(folded[kChunk][t], sums);
            }
          };
          half.template operator()<0>();
          half.template operator()<1>();
        };
        chunk.template operator()<0>();
        chunk.template operator()<1>();
        for (size_t t = 0; t < kTokens; ++t) {
          const __m256 scales = FoldedBlockScales<kSplit>(&block_scales[t * block_stride + kSplit * c]);
          acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(folded[0][t], folded[1][t])), scales, acc[t][0]);
        }
      }
    }
    for (; c < chunks; ++c) {
      const uint8_t* at = row + c * kChunkBytes;
      _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
      __m256i whole_chunk[kTokens];  // kSplit 1: both halves are one block
      // Each half by name, not by a loop index: indexed, the accumulators lived on the stack.
      auto half = [&]<int kHalf>() LOWBIT_AVX2 __attribute__((always_inline)) {
        __m256i levels[kPlanes];
        half_levels.template operator()<kHalf>(at, levels);
        for (size_t t = 0; t < kTokens; ++t) {
          const int8_t* x = inputs[t] + c * l.chunk + 32 * kHalf;  // plane p's inputs at x + 64 p
          const __m256i sums = HalfSums<kWide, kPlanes>(levels, x, ones);
          if constexpr (kSplit == 1) {
            whole_chunk[t] = kHalf == 0 ? sums : _mm256_add_epi32(whole_chunk[t], sums);
          } else {
            const float* s = &block_scales[t * block_stride + c * kSplit];
            acc[t][kHalf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), LaneScales<kSplit>(s, kHalf), acc[t][kHalf]);
          }
        }
      };
      half.template operator()<0>();
      half.template operator()<1>();
      if constexpr (kSplit == 1)
        for (size_t t = 0; t < kTokens; ++t)
          acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole_chunk[t]), _mm256_broadcast_ss(&block_scales[t * block_stride + c]), acc[t][0]);
    }
    for (size_t t = 0; t < kTokens; ++t) y[(t0 + t) * y_stride + r] = Sum(_mm256_add_ps(acc[t][0], acc[t][1])) + bias_sums[t];
  }
}

// 64 bytes lo:hi as their 32 even bytes then their 32 odd ones, into out.
LOWBIT_AVX2 __attribute__((always_inline)) inline void EvenOdd(__m256i lo, __m256i hi, uint8_t* out) {
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i a = _mm256_shuffle_epi8(lo, split), b = _mm256_shuffle_epi8(hi, split);
  // Each 128-bit lane: 8 even bytes, 8 odd ones; the even qwords of (a, b) in order, then the odd.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(_mm256_unpacklo_epi64(a, b), 0xD8));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), _mm256_permute4x64_epi64(_mm256_unpackhi_epi64(a, b), 0xD8));
}

// Every token's int8 inputs with each 64 as EvenOdd orders them, for the spread K-quant rows.
LOWBIT_AVX2 void EvenOddInputs(const Int8Activations& a, int8_t* out) {
  const auto* in = reinterpret_cast<const uint8_t*>(a.values.data());
  for (size_t i = 0; i < a.values.size(); i += 64)
    EvenOdd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 32)), reinterpret_cast<uint8_t*>(out) + i);
}

// Rows [r0, r1) of 3/5/6/7-bit codes spread to a byte each, cols apart: done once per panel for every
// group of tokens that reads it, where each group decoded the packed codes again (the decode took
// more instructions than the dots of 8 tokens). kEvenOdd: each 64 codes in EvenOdd's order.
template <int kBits, bool kEvenOdd>
LOWBIT_AVX2 void SpreadRows(const QuantizedTensor& w, size_t r0, size_t r1, uint8_t* out) {
  const SpreadDecoder<kBits> spread;
  const size_t cols = w.cols(), row_bytes = w.row_bytes();
  std::vector<uint8_t> padded;  // the tensor's last row, where the decoder's loads would run past it
  for (size_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.codes().data() + r * row_bytes;
    if (r + 1 == w.rows()) {
      padded.assign(row_bytes + kOverread<kBits>, 0);
      std::memcpy(padded.data(), row, row_bytes);
      row = padded.data();
    }
    uint8_t* to = out + (r - r0) * cols;
    if constexpr (kEvenOdd)
      for (size_t i = 0; i < cols; i += 64) EvenOdd(spread.Codes(row + i / 8 * kBits), spread.Codes(row + (i + 32) / 8 * kBits), to + i);
    else
      for (size_t i = 0; i < cols; i += 32) _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i), spread.Codes(row + i / 8 * kBits));
  }
}

template <int kBits, bool kLookup, bool kWide>
void DispatchSplit(const QuantizedTensor& w, const Layout& l, const Int8Activations& a, size_t row_begin,
                   size_t row_end, float* y, size_t y_stride) {
  // Many tokens: panels of rows small enough to stay in L2 meet every token in turn, rather than
  // the whole matrix streaming from memory once per 4 tokens.
  const size_t panel = a.n_tokens > 4 ? std::max<size_t>(16, (256 << 10) / w.row_bytes()) : row_end - row_begin;
  // More than one group of 8 tokens on codes that straddle bytes: each panel spread to bytes first.
  const bool spread_first = 8 % kBits != 0 && a.n_tokens > 8;
  std::vector<uint8_t> spread_rows(spread_first ? std::min(panel, row_end - row_begin) * w.cols() : 0);
  // The spread K-quant rows pair even and odd codes (RowsAvx2), their inputs likewise.
  AlignedVector<int8_t> even_odd;
  auto panels = [&]<size_t kSplit, bool kIntScales>() {
    constexpr bool kEvenOddRows = kIntScales && kEvenOddSpread<kBits>;
    if (kEvenOddRows && spread_first) {
      even_odd.resize(a.values.size());
      EvenOddInputs(a, even_odd.data());
    }
    const int8_t* values = kEvenOddRows && spread_first ? even_odd.data() : a.values.data();
    auto tokens = [&]<bool kSpreadIn>(size_t r0, size_t r1) {
      const uint8_t* codes = kSpreadIn ? spread_rows.data() : nullptr;
      size_t t = 0;
      if constexpr (kIntScales || kTokenLanes<kSplit, 8, kIntScales>)
        for (; t + 8 <= a.n_tokens; t += 8)
          RowsAvx2<kBits, kLookup, kWide, kSplit, 8, kIntScales, kSpreadIn>(w, l, a, values, t, r0, r1, codes, y, y_stride);
      for (; t + 4 <= a.n_tokens; t += 4)
        RowsAvx2<kBits, kLookup, kWide, kSplit, 4, kIntScales, kSpreadIn>(w, l, a, values, t, r0, r1, codes, y, y_stride);
      for (; t < a.n_tokens; ++t)
        RowsAvx2<kBits, kLookup, kWide, kSplit, 1, kIntScales, kSpreadIn>(w, l, a, values, t, r0, r1, codes, y, y_stride);
    };
    for (size_t r0 = row_begin; r0 < row_end; r0 += panel) {
      const size_t r1 = std::min(row_end, r0 + panel);
      if constexpr (8 % kBits != 0) {
        if (spread_first) {
          SpreadRows<kBits, kEvenOddRows>(w, r0, r1, spread_rows.data());
          tokens.template operator()<true>(r0, r1);
          continue;
        }
      }
      tokens.template operator()<false>(r0, r1);
    }
  };
  // Sub-scales in integer: i8 sub-scales under super-blocks that share one activation scale (the
  // K-quants), narrow levels (int16 pair sums).
  const bool int_scales = !kWide && !kLookup && l.shared_blocks > 1 && RowScalesAvx2<kBits, kWide>(w, l).SubScalesFit();
  auto run = [&]<size_t kSplit>() {
    if constexpr (!kWide && !kLookup)
      if (int_scales) return panels.template operator()<kSplit, true>();
    panels.template operator()<kSplit, false>();
  };
  switch (l.chunk / l.block) {
    case 1: return run.template operator()<1>();
    case 2: return run.template operator()<2>();
    case 4: return run.template operator()<4>();
    case 8: if constexpr (kBits <= 4) return run.template operator()<8>(); break;
    case 16: if constexpr (kBits == 2) return run.template operator()<16>(); break;
  }
  LOWBIT_CHECK(false);  // LayoutOf admits no other split
}

// QuantizeActivationsInt8Ref with AVX2: the same arithmetic (max |x|, the same scale and inverse,
// round half to even), so the same bytes.
LOWBIT_AVX2 Int8Activations QuantizeAvx2(const Layout& l, size_t cols, const float* x, size_t n_tokens) {
  Int8Activations a = EmptyActivations(l, cols, n_tokens);
  const size_t blocks = cols / l.block, per = Planes(l);
  std::vector<int8_t> natural(l.chunk);
  std::vector<int32_t> q32(l.block);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  float scale = 0;
  __m256 inverse = _mm256_setzero_ps();
  for (size_t t = 0; t < n_tokens; ++t) {
    int8_t* values = a.values.data() + t * cols;
    for (size_t b = 0; b < blocks; ++b) {
      const float* src = x + t * cols + b * l.block;
      if (b % l.shared_blocks == 0) {  // a new activation scale
        __m256 amax = _mm256_setzero_ps();
        // max_ps returns its second operand when either is NaN: a NaN input keeps amax, as std::max.
        for (size_t i = 0; i < l.shared_blocks * l.block; i += 8)
          amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + i)), amax);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float m = std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_movehdup_ps(m4)));
        scale = m / 127.0f;
        inverse = _mm256_set1_ps(m > 0 ? 127.0f / m : 0.0f);
      }
      __m256i sum = _mm256_setzero_si256();
      for (size_t i = 0; i < l.block; i += 8) {
        const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + i), inverse));
        sum = _mm256_add_epi32(sum, q);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(&q32[i]), q);
      }
      // A chunk in plane order is written once its last block is quantized; 8-bit inputs go straight in.
      const size_t in_chunk = b * l.block % l.chunk;
      int8_t* dst = per > 1 ? natural.data() + in_chunk : values + b * l.block;
      for (size_t i = 0; i < l.block; ++i) dst[i] = static_cast<int8_t>(q32[i]);
      if (per > 1 && in_chunk + l.block == l.chunk) {
        int8_t* chunk = values + (b * l.block - in_chunk);
        for (size_t p = 0; p < per; ++p)
          for (size_t k = 0; k < 64; ++k) chunk[p * 64 + k] = natural[k * per + p];
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      a.scales[t * blocks + b] = scale;
      AddToGroupSum(a, l, t, b, scale, _mm_cvtsi128_si32(s4));
    }
  }
  return a;
}

}  // namespace

bool HasInt8DotKernelAvx2(const QuantizedTensor& w) {
  if (!CpuHasAvx2()) return false;
  const std::optional<Layout> l = LayoutOf(w);
  return l && Avx2Fits(*l);
}

Int8Activations QuantizeActivationsInt8Avx2(const QuantizedTensor& w, const float* x, size_t n_tokens) {
  const std::optional<Layout> l = LayoutOf(w);
  LOWBIT_CHECK(l && Avx2Fits(*l) && CpuHasAvx2());
  return QuantizeAvx2(*l, w.cols(), x, n_tokens);
}

void Int8DotRowsAvx2(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                     size_t y_stride) {
  const Layout& l = a.layout;
  LOWBIT_CHECK(a.cols == w.cols() && l.bits == w.scheme().element->bits && Avx2Fits(l) && CpuHasAvx2());
  const bool wide = WideLevels(l);
  auto by_levels = [&]<int kBits, bool kLookup>() {
    if (wide) DispatchSplit<kBits, kLookup, true>(w, l, a, row_begin, row_end, y, y_stride);
    else DispatchSplit<kBits, kLookup, false>(w, l, a, row_begin, row_end, y, y_stride);
  };
  switch (l.bits) {
    case 2: return l.lookup ? by_levels.template operator()<2, true>() : by_levels.template operator()<2, false>();
    case 3: return by_levels.template operator()<3, false>();
    case 4: return l.lookup ? by_levels.template operator()<4, true>() : by_levels.template operator()<4, false>();
    case 5: return by_levels.template operator()<5, false>();
    case 6: return by_levels.template operator()<6, false>();
    case 7: return by_levels.template operator()<7, false>();
    case 8: return by_levels.template operator()<8, false>();
  }
  LOWBIT_CHECK(false);  // Avx2Fits admits these widths only
}

}  // namespace lowbit
