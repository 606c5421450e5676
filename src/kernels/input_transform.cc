#include "kernels/input_transform.h"

#include <algorithm>

#include "quant/column_order.h"
#include "quant/hadamard.h"

namespace lowbit {

const float* PrepareLinearInput(const Linear& w, const float* x, size_t n_tokens, std::vector<float>& buffer,
                                std::vector<float>& outlier_x) {
  if (w.input_hadamard == 0 && !w.outliers && w.input_order.empty()) return x;
  const size_t cols = w.cols();
  if (w.input_hadamard != 0 || w.outliers) {
    buffer.assign(x, x + n_tokens * cols);
    if (w.input_hadamard != 0) HadamardRows(buffer, n_tokens, cols, w.input_hadamard);
    if (w.outliers) {
      const std::vector<uint32_t>& c = w.outliers->columns;
      outlier_x.resize(n_tokens * c.size());
      for (size_t t = 0; t < n_tokens; ++t)
        for (size_t i = 0; i < c.size(); ++i) {
          float& v = buffer[t * cols + c[i]];
          outlier_x[t * c.size() + i] = v;
          v = 0;
        }
    }
    if (w.input_order.empty()) return buffer.data();
    buffer = GatherColumns(buffer, cols, w.input_order);
    return buffer.data();
  }
  buffer.resize(n_tokens * cols);
  GatherColumns(x, n_tokens, cols, w.input_order, buffer.data());
  return buffer.data();
}

void AddOutlierProducts(const OutlierColumns& outliers, const std::vector<float>& outlier_x, size_t n_tokens,
                        float* y) {
  const size_t k = outliers.columns.size(), rows = outliers.weight.rows();
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t r = 0; r < rows; ++r) {
      const float* wr = &outliers.weight.values[r * k];
      const float* xt = &outlier_x[t * k];
      float s = 0;
      for (size_t i = 0; i < k; ++i) s += wr[i] * xt[i];
      y[t * rows + r] += s;
    }
}

}  // namespace lowbit
