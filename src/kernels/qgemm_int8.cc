#include "kernels/qgemm_int8.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/qmatmul_int8-inl.h"

namespace lowbit {
namespace {

using namespace int8dot;  // NOLINT: the integer-dot kernels' shared pieces

constexpr size_t kTile = Int8TokenTiles::kTokens;
// 8 rows x 16 tokens: 8 int32 block sums and 8 fp32 totals in registers beside the inputs.
constexpr size_t kBandRows = 8;
// Rows decoded at a time, reused by every tile of tokens: 32 x 11008 levels (344 KiB) stay in L2.
constexpr size_t kPanelRows = 32;

// Rows [r0, r0 + n) as byte levels in the activations' order, and their group scales and biases.
template <int kBits, bool kLookup>
LOWBIT_VNNI void DecodePanel(const QuantizedTensor& w, const Layout& l, size_t r0, size_t n, uint8_t* levels,
                             float* scales, float* biases, size_t padded_groups) {
  using Decoder = LevelDecoder<kBits, kLookup>;
  const Decoder decoder(l);
  const RowScaleSource<kBits> row_scales(w, l);
  const size_t cols = w.cols(), chunks = cols / l.chunk;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* row = w.codes().data() + (r0 + i) * w.row_bytes();
    uint8_t* out = levels + i * cols;
    for (size_t c = 0; c < chunks; ++c) {
      const uint8_t* at = row + c * Decoder::kChunkBytes;
      if constexpr (Decoder::kPlanes) {
        const __m512i codes = _mm512_loadu_si512(at);
        for (int p = 0; p < Decoder::kPer; ++p) _mm512_storeu_si512(out + c * l.chunk + 64 * p, decoder.Plane(codes, p));
      } else {
        _mm512_storeu_si512(out + c * l.chunk, decoder.Spread(at));
      }
    }
    row_scales.ForRow(r0 + i, [&](size_t g, __mmask16, __m512 s, __m512 bias) LOWBIT_VNNI __attribute__((always_inline)) {
      _mm512_storeu_ps(scales + i * padded_groups + g, s);
      _mm512_storeu_ps(biases + i * padded_groups + g, bias);
    });
  }
}

// kRows decoded rows against one tile of 16 tokens over the whole row; lane t of out[r] is token
// t's output of row r. Block b of chunk c holds, in each of the chunk's kPer planes, the 4-byte
// lanes b % kSplit * 16 / kSplit onwards (as Int8DotRows splits a chunk's lanes).
template <size_t kSplit, int kPer, size_t kRows>
LOWBIT_VNNI void Band(const Layout& l, size_t cols, const uint8_t* levels, const float* scales, const float* biases,
                      size_t padded_groups, const int8_t* x, const float* x_scales, const float* x_group_sums,
                      __m512 (&out)[kRows]) {
  constexpr size_t kLanes = 16 / kSplit;
  const size_t blocks = cols / l.block, blocks_per_group = l.group / l.block;
  for (size_t r = 0; r < kRows; ++r) out[r] = _mm512_setzero_ps();
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = (b / kSplit * kPer) * 16 + b % kSplit * kLanes, g = b / blocks_per_group;
    __m512i sums[kRows];
    for (size_t r = 0; r < kRows; ++r) sums[r] = _mm512_setzero_si512();
    for (int p = 0; p < kPer; ++p)
      for (size_t j = 0; j < kLanes; ++j) {
        const size_t unit = first + p * 16 + j;  // 4 bytes of each row, 4 bytes of each token
        const __m512i inputs = _mm512_load_si512(x + unit * 4 * kTile);
        for (size_t r = 0; r < kRows; ++r) {
          int32_t four;
          std::memcpy(&four, levels + r * cols + unit * 4, 4);
          sums[r] = _mm512_dpbusd_epi32(sums[r], _mm512_set1_epi32(four), inputs);
        }
      }
    const __m512 x_scale = _mm512_load_ps(x_scales + b * kTile);
    for (size_t r = 0; r < kRows; ++r)
      out[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_mul_ps(x_scale, _mm512_set1_ps(scales[r * padded_groups + g])), out[r]);
    if (b % blocks_per_group == 0) {  // the group's offset and zero-point, through its sum of inputs
      const __m512 group_sum = _mm512_load_ps(x_group_sums + g * kTile);
      for (size_t r = 0; r < kRows; ++r)
        out[r] = _mm512_fmadd_ps(_mm512_set1_ps(biases[r * padded_groups + g]), group_sum, out[r]);
    }
  }
}

template <int kBits, bool kLookup, size_t kSplit>
LOWBIT_VNNI void GemmRows(const QuantizedTensor& w, const Layout& l, const Int8TokenTiles& a, size_t row_begin,
                          size_t row_end, float* y, size_t y_stride) {
  constexpr int kPer = LevelDecoder<kBits, kLookup>::kPer;
  const size_t cols = w.cols(), blocks = cols / l.block, padded_groups = (l.groups + 15) / 16 * 16;
  AlignedVector<uint8_t> levels(kPanelRows * cols);
  // 16 floats past the last row: ForRow stores whole vectors.
  AlignedVector<float> scales(kPanelRows * padded_groups + 16), biases(kPanelRows * padded_groups + 16);
  const __m512i token_offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32(static_cast<int>(y_stride)));
  for (size_t p0 = row_begin; p0 < row_end; p0 += kPanelRows) {
    const size_t n = std::min(kPanelRows, row_end - p0);
    DecodePanel<kBits, kLookup>(w, l, p0, n, levels.data(), scales.data(), biases.data(), padded_groups);
    for (size_t tile = 0; tile < a.tiles(); ++tile) {
      const int8_t* x = a.values.data() + tile * cols * kTile;
      const float* x_scales = a.scales.data() + tile * blocks * kTile;
      const float* x_group_sums = a.group_sums.data() + tile * l.groups * kTile;
      const size_t t0 = tile * kTile, tokens = std::min(kTile, a.n_tokens - t0);
      const __mmask16 valid = static_cast<__mmask16>((1u << tokens) - 1);
      auto band = [&]<size_t kRows>(size_t i) LOWBIT_VNNI {
        __m512 out[kRows];
        Band<kSplit, kPer, kRows>(l, cols, levels.data() + i * cols, scales.data() + i * padded_groups,
                                  biases.data() + i * padded_groups, padded_groups, x, x_scales, x_group_sums, out);
        for (size_t r = 0; r < kRows; ++r)
          _mm512_mask_i32scatter_ps(y + t0 * y_stride + p0 + i + r, valid, token_offsets, out[r], 4);
      };
      size_t i = 0;
      for (; i + kBandRows <= n; i += kBandRows) band.template operator()<kBandRows>(i);
      for (; i < n; ++i) band.template operator()<1>(i);
    }
  }
}

}  // namespace

Int8TokenTiles TileTokens(const Int8Activations& a) {
  const Int8DotLayout& l = a.layout;
  const size_t cols = a.cols, units = cols / 4, blocks = cols / l.block;
  Int8TokenTiles tiles;
  tiles.layout = l;
  tiles.n_tokens = a.n_tokens;
  tiles.cols = cols;
  tiles.values.assign(tiles.tiles() * cols * kTile, 0);
  tiles.scales.assign(tiles.tiles() * blocks * kTile, 0.0f);
  tiles.group_sums.assign(tiles.tiles() * l.groups * kTile, 0.0f);
  for (size_t t = 0; t < a.n_tokens; ++t) {
    const size_t tile = t / kTile, lane = t % kTile;
    const int8_t* from = a.values.data() + t * cols;
    int8_t* to = tiles.values.data() + tile * cols * kTile + lane * 4;
    for (size_t u = 0; u < units; ++u) std::memcpy(to + u * 4 * kTile, from + u * 4, 4);
    for (size_t b = 0; b < blocks; ++b) tiles.scales[(tile * blocks + b) * kTile + lane] = a.scales[t * blocks + b];
    for (size_t g = 0; g < l.groups; ++g)
      tiles.group_sums[(tile * l.groups + g) * kTile + lane] = a.group_sums[t * l.groups + g];
  }
  return tiles;
}

void Int8GemmRows(const QuantizedTensor& w, const Int8TokenTiles& a, size_t row_begin, size_t row_end, float* y,
                  size_t y_stride) {
  const Layout& l = a.layout;
  LOWBIT_CHECK(a.cols == w.cols() && l.bits == w.scheme().element->bits && HasInt8DotKernel(w));
  DispatchLayout(l, [&]<int kBits, bool kLookup, size_t kSplit>() {
    GemmRows<kBits, kLookup, kSplit>(w, l, a, row_begin, row_end, y, y_stride);
  });
}

}  // namespace lowbit
