// Prefill GEMM on fp32 values with the tokens in vector lanes: a band of 6 weight rows meets two
// tiles of 16 tokens, each weight is broadcast from memory against 32 tokens at once, 12
// accumulators live in registers. Row-shaped kernels (DotRows, Bf16DotRows) load a vector of
// weights and one of inputs per 16 products per 4x4 tile: at prefill they ran at the L2's 64
// bytes a cycle. vdpbf16ps issues at a fifth of vfmadd's rate on this machine (1.0 against 5.0 G
// instructions/s: 34 against 80 G products/s), so 16-bit weights, widened to fp32 a block of rows
// at a time, run here too: 2.0-2.5x the bf16 and fp32 row kernels at 256 tokens.
#pragma once

#include <cstddef>

#include "core/aligned.h"

namespace lowbit {

// Activations [n_tokens x cols] regrouped in tiles of 16 tokens: [tile][cols][16], a short last
// tile padded with zeros.
struct F32TokenTiles {
  static constexpr size_t kTokens = 16;
  F32TokenTiles(size_t n_tokens, size_t cols);  // zeros
  // Tiles [tile_begin, tile_end) from x: a share of the copy, so that a pool's threads split it
  // (done by one thread it was 6 % of the bundled model's prefill on two).
  void Fill(const float* x, size_t tile_begin, size_t tile_end);
  size_t tiles() const { return (n_tokens + kTokens - 1) / kTokens; }

  size_t n_tokens, cols;
  AlignedVector<float> values;
};

bool CpuHasF32Gemm();  // AVX-512F, or AVX2 and FMA (one 16-token tile a pass)

// y[t * y_stride + r] = dot(w + r * cols, x_t) for r in [row_begin, row_end) and every token, w
// row-major fp32. Rows are taken a cache-sized block at a time, each block against every tile.
void F32GemmRows(const float* w, size_t cols, const F32TokenTiles& x, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride);

// Rows per block that F32GemmRows keeps in L2 for a row length: callers that widen or decode rows
// first (16-bit or quantized weights) do so this many at a time.
size_t F32GemmBlockRows(size_t cols);

}  // namespace lowbit
