#include "kernels/matmul.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "formats/codec.h"
#include "kernels/dot.h"
#include "kernels/gemm_f32.h"
#include "kernels/input_transform.h"
#include "kernels/qgemm_int8.h"
#include "kernels/qmatmul.h"
#include "kernels/qmatmul_bf16.h"
#include "kernels/qmatmul_int8.h"
#include "quant/rtn.h"

namespace lowbit {

namespace {
// Up to this many tokens the fused kernel (codes decoded in registers per token tile) wins; past
// it, the GEMMs (tokens in vector lanes, tiles of 16) do. On an 11008 x 4096 matrix, one thread,
// the int8 GEMM ran 0.8-1.1x the integer row kernel at 8 tokens, 1.0-1.1x at 12, 1.3-1.8x at 10
// and 1.8-3.1x at 16 (int4 g128, Q4_K, Q8_0).
constexpr size_t kFusedMaxTokens = 8, kGemmMinTokens = kFusedMaxTokens + 1;
// Exact prefill without AVX-512 decodes up to this many bytes of fp32 rows at a time: each token
// chunk is then reused over many rows (with 4 rows a tile, every 4 rows re-streamed all tokens from L3).
constexpr size_t kDecodeTileBytes = 256 << 10;
}  // namespace

std::vector<float> FakeQuantizeInput(const InputQuant& iq, const float* x, size_t n_tokens, size_t cols) {
  const std::span<const float> in(x, n_tokens * cols);
  const bool per_tensor = iq.scheme.granularity.kind == GranularityKind::kTensor;
  if (!per_tensor && !(iq.scheme.tensor_scale && iq.static_scale > 0))
    return QuantizeRtn(in, n_tokens, cols, iq.scheme, "activations").Dequantize();
  QuantizedTensor q(iq.scheme, n_tokens, cols);
  if (per_tensor) {
    q.SetScale(0, iq.static_scale);
    if (iq.scheme.asymmetric()) q.SetZero(0, iq.static_zero);
  } else {  // the calibrated tensor scale, each block's own scale under it
    q.set_tensor_scale(iq.static_scale);
    const ScaleGrid g = q.grid();
    for (size_t t = 0; t < n_tokens; ++t)
      for (uint64_t gc = 0; gc < g.grid_cols; ++gc) {
        const uint64_t c0 = gc * g.cell_cols;
        ChooseCellScale(q, t * g.grid_cols + gc, in.subspan(t * cols + c0, std::min<uint64_t>(g.cell_cols, cols - c0)));
      }
  }
  for (size_t t = 0; t < n_tokens; ++t) EncodeRow(q, t, x + t * cols);
  return q.Dequantize();
}

namespace {

// A linear's input made ready for its kernels: rotated, gathered, outlier columns split off
// (input_transform.h), then fake-quantized under its input quantization.
struct LinearInput {
  std::vector<float> transformed, outlier_columns, quantized;
  const float* x;
  LinearInput(const Linear& w, const float* raw, size_t n_tokens) {
    x = PrepareLinearInput(w, raw, n_tokens, transformed, outlier_columns);
    if (w.input_quant) {
      quantized = FakeQuantizeInput(*w.input_quant, x, n_tokens, w.cols());
      x = quantized.data();
    }
  }
};

void FinishLinear(const Linear& w, const LinearInput& in, size_t n_tokens, float* y) {
  if (w.outliers) AddOutlierProducts(*w.outliers, in.outlier_columns, n_tokens, y);
  if (!w.bias.empty())
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t r = 0; r < w.rows(); ++r) y[t * w.rows() + r] += w.bias[r];
}

// Int8 activations already made in one MatMulShared call, with their input and the weight they were
// laid out for: q, k and v of one scheme read the same quantized input.
struct Int8Made {
  const float* x;
  const QuantizedTensor* for_weight;
  std::shared_ptr<const Int8Activations> activations;
};

using RowRange = std::function<void(size_t begin, size_t end)>;

// Rows [begin, end) of y = x W^T with W's rows decoded a tile at a time into a small fp32 buffer, each
// tile reused for every token.
RowRange DecodedTileRows(const QuantizedTensor& q, const float* x, size_t n_tokens, float* y) {
  const size_t rows = q.rows(), cols = q.cols();
  const size_t tile_rows = std::clamp<size_t>(kDecodeTileBytes / (cols * sizeof(float)) / 4 * 4, 4, 64);
  return [&q, x, n_tokens, y, rows, cols, tile_rows](size_t begin, size_t end) {
    AlignedVector<float> tile(tile_rows * cols);
    for (size_t r = begin; r < end; r += tile_rows) {
      const size_t n = std::min(tile_rows, end - r);
      for (size_t i = 0; i < n; ++i) q.DequantizeRow(r + i, &tile[i * cols]);
      DotRows(tile.data(), cols, 0, n, x, n_tokens, y + r, rows);
    }
  };
}

// The kernel of rows [begin, end) of y = x W^T for up to kFusedMaxTokens tokens (one parallel pass,
// its input prepared here once).
RowRange DecodeRows(const Linear& w, const float* x, size_t n_tokens, float* y, Activations activations,
                    std::vector<Int8Made>& made) {
  const size_t rows = w.rows(), cols = w.cols();
  if (const auto* dense = std::get_if<DenseMatrix>(&w.weight))
    return [=](size_t begin, size_t end) { DotRows(dense->values.data(), cols, begin, end, x, n_tokens, y, rows); };
  const QuantizedTensor& q = std::get<QuantizedTensor>(w.weight);
  const bool fast = activations == Activations::kFast;
  if (fast && HasBf16DotKernel(q)) {
    auto in = std::make_shared<const Bf16Input>(PrepareBf16Input(q, x, n_tokens));
    return [&q, in, y, rows](size_t begin, size_t end) { Bf16DotRows(q, *in, begin, end, y, rows); };
  }
  if (fast && HasInt8DotKernel(q)) {
    std::shared_ptr<const Int8Activations> a;
    for (const Int8Made& m : made)
      if (m.x == x && SameInt8Activations(*m.for_weight, q)) a = m.activations;
    if (!a) {
      a = std::make_shared<const Int8Activations>(QuantizeActivationsInt8(q, x, n_tokens));
      made.push_back({x, &q, a});
    }
    return [&q, a, y, rows](size_t begin, size_t end) { Int8DotRows(q, *a, begin, end, y, rows); };
  }
  if (HasFusedKernel(q)) {
    auto in = std::make_shared<const QuantInput>(PrepareQuantInput(q, x, n_tokens));
    return [&q, in, y, rows](size_t begin, size_t end) { QuantDotRows(q, *in, begin, end, y, rows); };
  }
  return DecodedTileRows(q, x, n_tokens, y);
}

// More tokens: GEMMs (tokens in vector lanes) where the CPU has them, else rows decoded in tiles.
void MatMulMany(const Linear& w, const float* x, size_t n_tokens, float* y, ThreadPool& pool,
                Activations activations) {
  const LinearInput input(w, x, n_tokens);
  x = input.x;
  const size_t rows = w.rows(), cols = w.cols();
  const bool gemm = n_tokens >= kGemmMinTokens;
  if (const auto* dense = std::get_if<DenseMatrix>(&w.weight)) {
    if (gemm && CpuHasF32Gemm()) {
      F32TokenTiles tiles(n_tokens, cols);
      pool.ParallelFor(tiles.tiles(), [&](size_t begin, size_t end) { tiles.Fill(x, begin, end); });
      pool.ParallelFor(rows, [&](size_t begin, size_t end) {
        F32GemmRows(dense->values.data(), cols, tiles, begin, end, y, rows);
      });
    } else {
      pool.ParallelFor(rows, [&](size_t begin, size_t end) {
        DotRows(dense->values.data(), cols, begin, end, x, n_tokens, y, rows);
      });
    }
  } else {
    const QuantizedTensor& q = std::get<QuantizedTensor>(w.weight);
    const bool fast = activations == Activations::kFast;
    if (fast && HasInt8DotKernel(q)) {
      // Every batch, prefill included (from 9 tokens as a GEMM, where VNNI is): at 256 tokens the
      // integer dots ran 1.3-2.4x a bf16 route (int4 g128 229 vs 96 tokens/s, Q4_K_M 131 vs 99)
      // before the GEMM.
      const Int8Activations a = QuantizeActivationsInt8(q, x, n_tokens);
      if (gemm && HasInt8GemmKernel(q)) {
        Int8TokenTiles tiles(a);
        pool.ParallelFor(tiles.tiles(), [&](size_t begin, size_t end) { tiles.Fill(a, begin, end); });
        pool.ParallelFor(rows, [&](size_t begin, size_t end) { Int8GemmRows(q, tiles, begin, end, y, rows); });
      } else {
        pool.ParallelFor(rows, [&](size_t begin, size_t end) { Int8DotRows(q, a, begin, end, y, rows); });
      }
    } else if (gemm && CpuHasF32Gemm()) {
      // Every other weight (16-bit, FP8, NF4, exact activations): rows decoded to fp32 a block at a
      // time, each block against every token.
      F32TokenTiles tiles(n_tokens, cols);
      pool.ParallelFor(tiles.tiles(), [&](size_t begin, size_t end) { tiles.Fill(x, begin, end); });
      pool.ParallelFor(rows, [&](size_t begin, size_t end) {
        const size_t block_rows = F32GemmBlockRows(cols);
        AlignedVector<float> block(block_rows * cols);
        for (size_t r = begin; r < end; r += block_rows) {
          const size_t n = std::min(block_rows, end - r);
          for (size_t i = 0; i < n; ++i) q.DequantizeRow(r + i, &block[i * cols]);
          F32GemmRows(block.data(), cols, tiles, 0, n, y + r, rows);
        }
      });
    } else {
      pool.ParallelFor(rows, DecodedTileRows(q, x, n_tokens, y));
    }
  }
  FinishLinear(w, input, n_tokens, y);
}

}  // namespace

void MatMul(const Linear& w, const float* x, size_t n_tokens, float* y, ThreadPool& pool, Activations activations) {
  const LinearOutput output{w, y};
  MatMulShared({&output, 1}, x, n_tokens, pool, activations);
}

void MatMulShared(std::span<const LinearOutput> outputs, const float* x, size_t n_tokens, ThreadPool& pool,
                  Activations activations) {
  if (n_tokens > kFusedMaxTokens) {
    for (const LinearOutput& out : outputs) MatMulMany(out.w, x, n_tokens, out.y, pool, activations);
    return;
  }
  std::vector<LinearInput> inputs;
  inputs.reserve(outputs.size());  // the kernels hold pointers into them
  std::vector<RowRange> kernels;
  std::vector<size_t> first_row{0};  // of each linear in the rows of all
  std::vector<Int8Made> made;
  for (const LinearOutput& out : outputs) {
    inputs.emplace_back(out.w, x, n_tokens);
    kernels.push_back(DecodeRows(out.w, inputs.back().x, n_tokens, out.y, activations, made));
    first_row.push_back(first_row.back() + out.w.rows());
  }
  pool.ParallelFor(first_row.back(), [&](size_t begin, size_t end) {
    for (size_t i = 0; i < kernels.size(); ++i) {
      const size_t lo = std::max(begin, first_row[i]), hi = std::min(end, first_row[i + 1]);
      if (lo < hi) kernels[i](lo - first_row[i], hi - first_row[i]);
    }
  });
  for (size_t i = 0; i < outputs.size(); ++i) FinishLinear(outputs[i].w, inputs[i], n_tokens, outputs[i].y);
}

}  // namespace lowbit
