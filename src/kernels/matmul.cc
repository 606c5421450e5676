#include "kernels/matmul.h"

#include <vector>

#include "kernels/dot.h"

namespace lowbit {

void MatMul(const Linear& w, const float* x, size_t n_tokens, float* y, ThreadPool& pool) {
  const size_t rows = w.rows(), cols = w.cols();
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
  if (!w.bias.empty())
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t r = 0; r < rows; ++r) y[t * rows + r] += w.bias[r];
}

}  // namespace lowbit
