#include "kernels/qgemm_int8.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/qmatmul_int8-inl.h"

namespace lowbit {
namespace {

using namespace int8dot;  // NOLINT: the integer-dot kernels' shared pieces

constexpr size_t kTile = Int8TokenTiles::kTokens;
// 6 rows x 32 tokens (two tiles): 12 int32 block sums and 12 fp32 totals in registers beside the
// inputs, 8 loads (2 input vectors, 6 broadcasts) per 12 dot instructions where 8 rows x 16 tokens
// took 9 per 8. Within this machine's noise the two ran alike (0.21-0.30 against 0.29-0.32 GB/s
// of Q6_K weights at 256 tokens, alternated).
constexpr size_t kBandRows = 6;
constexpr size_t kBandTiles = 2;
// Rows decoded at a time, reused by every tile of tokens: 36 x 11008 levels (387 KiB) stay in L2.
// A whole number of bands: with 32, two rows of every panel ran as single-row bands, which took
// 15 % of a Q5_K GEMM's time for 6 % of its rows.
constexpr size_t kPanelRows = 6 * kBandRows;

// The first 4-byte unit of block b in the activations' order: a chunk holds `split` blocks and
// `planes` bit planes (2/4/8 bits; one otherwise) of 16 units each, and block b takes 16 / split
// units from first + 16 * p in every plane p (as Int8DotRows splits a chunk's lanes).
constexpr size_t FirstUnit(size_t b, size_t split, size_t planes) { return b / split * planes * 16 + b % split * (16 / split); }

// Rows [r0, r0 + n) as byte levels in the activations' order, and their group scales and biases.
template <int kBits, bool kLookup>
LOWBIT_VNNI void DecodePanel(const QuantizedTensor& w, const Layout& l, size_t r0, size_t n, uint8_t* levels,
                             float* scales, float* biases, size_t padded_groups) {
  using Decoder = LevelDecoder<kBits, kLookup>;
  const Decoder decoder(l);
  const RowScaleSource<kBits> row_scales(w, l);
  const __m512 offset = _mm512_set1_ps(l.offset);
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
      // The offset's part of the bias is in the integer sums (offset_sums).
      _mm512_storeu_ps(biases + i * padded_groups + g, _mm512_fnmadd_ps(s, offset, bias));
    });
  }
}

// Where a tile of tokens starts in each of Int8TokenTiles' arrays, and the distances to the next.
struct TileInputs {
  const int8_t* values;
  const float* scales;
  const float* group_sums;
  const int32_t* offset_sums;
  size_t values_stride, scales_stride, group_sums_stride;  // offset_sums: as scales
};

// kRows decoded rows against kTiles tiles of 16 tokens over the whole row; lane t of out[r][i] is
// token t of tile i, row r. A block's int32 sums start from the offset's share (offset_sums), so
// without zero-points (kZeroPoints false) the biases are all zero and the groups' sums of inputs
// are not needed.
template <size_t kSplit, int kPer, size_t kRows, size_t kTiles, bool kZeroPoints, bool kShared>
LOWBIT_VNNI void Band(const Layout& l, size_t cols, const uint8_t* levels, const float* scales, const float* biases,
                      size_t padded_groups, const TileInputs& x, __m512 (&out)[kRows][kTiles]) {
  constexpr size_t kLanes = 16 / kSplit;
  const size_t blocks_per_group = l.group / l.block;
  // kShared: blocks that share an activation scale (a K-quant's super-block) sum their weight-scaled
  // products here first, and the activation scale is applied once at the last of them.
  __m512 shared[kRows][kTiles];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t i = 0; i < kTiles; ++i) {
      out[r][i] = _mm512_setzero_ps();
      if constexpr (kShared) shared[r][i] = _mm512_setzero_ps();
    }
  size_t left_in_span = l.shared_blocks;  // kShared: blocks until the activation scale applies (no division per block)
  for (size_t g = 0, b = 0; g < l.groups; ++g) {
    for (size_t in_group = 0; in_group < blocks_per_group; ++in_group, ++b) {
      const size_t first = FirstUnit(b, kSplit, kPer);
      __m512i sums[kRows][kTiles];
      for (size_t i = 0; i < kTiles; ++i) {
        const __m512i offset_sum = _mm512_load_si512(x.offset_sums + i * x.scales_stride + b * kTile);
        for (size_t r = 0; r < kRows; ++r) sums[r][i] = offset_sum;
      }
      for (int p = 0; p < kPer; ++p)
        for (size_t j = 0; j < kLanes; ++j) {
          const size_t unit = first + p * 16 + j;  // 4 bytes of each row, 4 bytes of each token
          __m512i inputs[kTiles];
          for (size_t i = 0; i < kTiles; ++i) inputs[i] = _mm512_load_si512(x.values + i * x.values_stride + unit * 4 * kTile);
          for (size_t r = 0; r < kRows; ++r) {
            int32_t four;
            std::memcpy(&four, levels + r * cols + unit * 4, 4);
            const __m512i weights = _mm512_set1_epi32(four);
            for (size_t i = 0; i < kTiles; ++i) sums[r][i] = _mm512_dpbusd_epi32(sums[r][i], weights, inputs[i]);
          }
        }
      if constexpr (kShared) {
        for (size_t r = 0; r < kRows; ++r)
          for (size_t i = 0; i < kTiles; ++i)
            shared[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][i]), _mm512_set1_ps(scales[r * padded_groups + g]), shared[r][i]);
        if (--left_in_span == 0) {
          left_in_span = l.shared_blocks;
          for (size_t i = 0; i < kTiles; ++i) {
            const __m512 x_scale = _mm512_load_ps(x.scales + i * x.scales_stride + b * kTile);
            for (size_t r = 0; r < kRows; ++r) {
              out[r][i] = _mm512_fmadd_ps(shared[r][i], x_scale, out[r][i]);
              shared[r][i] = _mm512_setzero_ps();
            }
          }
        }
      } else {
        for (size_t i = 0; i < kTiles; ++i) {
          const __m512 x_scale = _mm512_load_ps(x.scales + i * x.scales_stride + b * kTile);
          for (size_t r = 0; r < kRows; ++r)
            out[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][i]),
                                        _mm512_mul_ps(x_scale, _mm512_set1_ps(scales[r * padded_groups + g])), out[r][i]);
        }
      }
    }
  }
  // Zero-points, through the groups' sums of inputs: after the blocks, where out's registers are
  // all that is live (inside, with kShared's sums beside them, they spilled).
  if constexpr (kZeroPoints)
    for (size_t g = 0; g < l.groups; ++g)
      for (size_t i = 0; i < kTiles; ++i) {
        const __m512 group_sum = _mm512_load_ps(x.group_sums + i * x.group_sums_stride + g * kTile);
        for (size_t r = 0; r < kRows; ++r)
          out[r][i] = _mm512_fmadd_ps(_mm512_set1_ps(biases[r * padded_groups + g]), group_sum, out[r][i]);
      }
}

template <int kBits, bool kLookup, size_t kSplit>
LOWBIT_VNNI void GemmRows(const QuantizedTensor& w, const Layout& l, const Int8TokenTiles& a, size_t row_begin,
                          size_t row_end, float* y, size_t y_stride) {
  constexpr int kPer = LevelDecoder<kBits, kLookup>::kPer;
  const size_t cols = w.cols(), blocks = cols / l.block, padded_groups = (l.groups + 15) / 16 * 16;
  const bool zero_points = w.scheme().asymmetric(), shared = l.shared_blocks > 1;
  AlignedVector<uint8_t> levels(kPanelRows * cols);
  // 16 floats past the last row: ForRow stores whole vectors.
  AlignedVector<float> scales(kPanelRows * padded_groups + 16), biases(kPanelRows * padded_groups + 16);
  const __m512i token_offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32(static_cast<int>(y_stride)));
  for (size_t p0 = row_begin; p0 < row_end; p0 += kPanelRows) {
    const size_t n = std::min(kPanelRows, row_end - p0);
    DecodePanel<kBits, kLookup>(w, l, p0, n, levels.data(), scales.data(), biases.data(), padded_groups);
    auto tiles = [&]<size_t kTiles>(size_t tile) LOWBIT_VNNI {
      const TileInputs x{a.values.data() + tile * cols * kTile,        a.scales.data() + tile * blocks * kTile,
                         a.group_sums.data() + tile * l.groups * kTile, a.offset_sums.data() + tile * blocks * kTile,
                         cols * kTile,                                 blocks * kTile,
                         l.groups * kTile};
      auto band = [&]<size_t kRows>(size_t i) LOWBIT_VNNI {
        __m512 out[kRows][kTiles];
        auto run = [&]<bool kZeroPoints, bool kShared>() LOWBIT_VNNI {
          Band<kSplit, kPer, kRows, kTiles, kZeroPoints, kShared>(l, cols, levels.data() + i * cols, scales.data() + i * padded_groups,
                                                                  biases.data() + i * padded_groups, padded_groups, x, out);
        };
        if (shared) {
          if (zero_points) run.template operator()<true, true>();
          else run.template operator()<false, true>();
        } else {
          if (zero_points) run.template operator()<true, false>();
          else run.template operator()<false, false>();
        }
        for (size_t k = 0; k < kTiles; ++k) {
          const size_t t0 = (tile + k) * kTile, tokens = std::min(kTile, a.n_tokens - t0);
          const __mmask16 valid = static_cast<__mmask16>((1u << tokens) - 1);
          for (size_t r = 0; r < kRows; ++r)
            _mm512_mask_i32scatter_ps(y + t0 * y_stride + p0 + i + r, valid, token_offsets, out[r][k], 4);
        }
      };
      size_t i = 0;
      for (; i + kBandRows <= n; i += kBandRows) band.template operator()<kBandRows>(i);
      for (; i < n; ++i) band.template operator()<1>(i);
    };
    size_t tile = 0;
    for (; tile + kBandTiles <= a.tiles(); tile += kBandTiles) tiles.template operator()<kBandTiles>(tile);
    for (; tile < a.tiles(); ++tile) tiles.template operator()<1>(tile);
  }
}

}  // namespace

Int8TokenTiles::Int8TokenTiles(const Int8Activations& a)
    : layout(a.layout),
      n_tokens(a.n_tokens),
      cols(a.cols),
      values(tiles() * cols * kTile, 0),
      scales(tiles() * cols / layout.block * kTile, 0.0f),
      group_sums(tiles() * layout.groups * kTile, 0.0f),
      offset_sums(tiles() * cols / layout.block * kTile, 0) {}

void Int8TokenTiles::Fill(const Int8Activations& a, size_t tile_begin, size_t tile_end) {
  const size_t units = cols / 4, blocks = cols / layout.block, split = layout.chunk / layout.block;
  const size_t planes = layout.planes() ? 8 / layout.bits : 1;
  for (size_t t = tile_begin * kTile; t < std::min(n_tokens, tile_end * kTile); ++t) {
    const size_t tile = t / kTile, lane = t % kTile;
    const int8_t* from = a.values.data() + t * cols;
    int8_t* to = values.data() + tile * cols * kTile + lane * 4;
    for (size_t u = 0; u < units; ++u) std::memcpy(to + u * 4 * kTile, from + u * 4, 4);
    for (size_t b = 0; b < blocks; ++b) {
      scales[(tile * blocks + b) * kTile + lane] = a.scales[t * blocks + b];
      int32_t sum = 0;
      for (size_t p = 0; p < planes; ++p)
        for (size_t k = 0; k < 4 * 16 / split; ++k) sum += from[(FirstUnit(b, split, planes) + 16 * p) * 4 + k];
      offset_sums[(tile * blocks + b) * kTile + lane] = static_cast<int32_t>(layout.offset) * sum;
    }
    for (size_t g = 0; g < layout.groups; ++g)
      group_sums[(tile * layout.groups + g) * kTile + lane] = a.group_sums[t * layout.groups + g];
  }
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
