#include "kernels/matmul.h"

#include <vector>

#include "kernels/dot.h"
#include "kernels/input_transform.h"
#include "quant/rtn.h"

namespace lowbit {

std::vector<float> FakeQuantizeInput(const InputQuant& iq, const float* x, size_t n_tokens, size_t cols) {
  const std::span<const float> in(x, n_tokens * cols);
  if (iq.scheme.granularity.kind != GranularityKind::kTensor)
    return QuantizeRtn(in, n_tokens, cols, iq.scheme, "activations").Dequantize();
  QuantizedTensor q(iq.scheme, n_tokens, cols);
  q.SetScale(0, iq.static_scale);
  for (size_t t = 0; t < n_tokens; ++t) EncodeRow(q, t, x + t * cols);
  return q.Dequantize();
}

void MatMul(const Linear& w, const float* x, size_t n_tokens, float* y, ThreadPool& pool) {
  const size_t rows = w.rows(), cols = w.cols();
  std::vector<float> transformed_input, outlier_input;  // online Hadamard / LLM.int8() (input_transform.h)
  x = PrepareLinearInput(w, x, n_tokens, transformed_input, outlier_input);
  std::vector<float> quantized_input;
  if (w.input_quant) {
    quantized_input = FakeQuantizeInput(*w.input_quant, x, n_tokens, cols);
    x = quantized_input.data();
  }
  if (const auto* dense = std::get_if<DenseMatrix>(&w.weight)) {
    pool.ParallelFor(rows, [&](size_t begin, size_t end) {
      DotRows(dense->values.data(), cols, begin, end, x, n_tokens, y, rows);
    });
  } else {
    const QuantizedTensor& q = std::get<QuantizedTensor>(w.weight);
    pool.ParallelFor(rows, [&](size_t begin, size_t end) {
      std::vector<float> row(cols);
      for (size_t r = begin; r < end; ++r) {
        q.DequantizeRow(r, row.data());
        DotRows(row.data(), cols, 0, 1, x, n_tokens, y + r, rows);
      }
    });
  }
  if (w.outliers) AddOutlierProducts(*w.outliers, outlier_input, n_tokens, y);
  if (!w.bias.empty())
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t r = 0; r < rows; ++r) y[t * rows + r] += w.bias[r];
}

}  // namespace lowbit
