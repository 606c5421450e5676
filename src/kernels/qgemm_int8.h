// Prefill GEMM for the integer-dot layouts (qmatmul_int8.h): the same int8 activations and the
// same integer products per scale block, arranged so that one vector holds 16 tokens rather than
// 64 codes of one row. A band of 8 weight rows, decoded once to byte levels, meets a tile of 16
// tokens whose inputs are interleaved 4 bytes per token (vpdpbusd's unit): each 4 bytes of a row
// are broadcast against all 16 tokens, a scale block's int32 sums stay in registers, and the
// block's scales are applied once per 8 x 16 outputs (the row's weight scale times the vector of
// the 16 tokens' activation scales). Int8DotRows, shaped for decode, pays that scale work per 64
// codes per token, which held K-quant prefill (groups of 16 and 32) to 0.3-0.7x llama.cpp's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/aligned.h"
#include "kernels/qmatmul_int8.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// Int8Activations regrouped in tiles of 16 tokens (a short last tile is padded with zeros).
struct Int8TokenTiles {
  static constexpr size_t kTokens = 16;
  explicit Int8TokenTiles(const Int8Activations& a);  // zeros, the layout of a
  // Tiles [tile_begin, tile_end) from a: a share of the copy, for a pool's threads.
  void Fill(const Int8Activations& a, size_t tile_begin, size_t tile_end);
  size_t tiles() const { return (n_tokens + kTokens - 1) / kTokens; }

  Int8DotLayout layout;
  size_t n_tokens, cols;
  AlignedVector<int8_t> values;      // [tile][cols / 4][16 tokens][4 bytes], each token's bytes in Int8Activations' order
  AlignedVector<float> scales;       // [tile][cols / layout.block][16]
  AlignedVector<float> group_sums;   // [tile][layout.groups][16]
  // [tile][cols / layout.block][16]: the layout's offset (levels - offset = codes' values) times
  // the block's sum of int8 inputs, its share of every row's dot, added to the integer sums.
  AlignedVector<int32_t> offset_sums;
};

// What Int8DotRows computes (to fp32 rounding) for every token: y[t * y_stride + r], r in
// [row_begin, row_end). Needs the CPU HasInt8GemmKernel asks for (VNNI).
void Int8GemmRows(const QuantizedTensor& w, const Int8TokenTiles& a, size_t row_begin, size_t row_end, float* y,
                  size_t y_stride);

}  // namespace lowbit
