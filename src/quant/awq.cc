#include "quant/awq.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/fake_quant.h"
#include "quant/rtn.h"

namespace lowbit {

QuantizedTensor QuantizeAwqClip(std::span<const float> w, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                                const std::vector<double>& h, const AwqOptions& options, std::string_view name,
                                float tensor_amax) {
  scheme.ValidateShape(rows, cols, name);
  if (w.size() != rows * cols) Fail("tensor '{}': {} values for shape [{} x {}]", name, w.size(), rows, cols);
  if (h.size() != cols * cols) Fail("tensor '{}': Hessian has {} entries, expected {}^2", name, h.size(), cols);
  QuantizedTensor q(scheme, rows, cols);
  ChooseScales(q, w, name, nullptr, tensor_amax);
  const ScaleGrid grid = q.grid();
  const bool per_row = grid.cell_rows == 1 && scheme.granularity.kind != GranularityKind::kNone &&
                       scheme.granularity.kind != GranularityKind::kTensor;
  if (options.clip && per_row && options.grid > 0) {
    const size_t steps = static_cast<size_t>(static_cast<double>(options.grid) * options.max_shrink);
    std::vector<float> clipped, delta;
    std::vector<double> block;  // H_gg of the current group
    for (uint64_t gc = 0; gc < grid.grid_cols; ++gc) {
      const uint64_t c0 = gc * grid.cell_cols, c1 = std::min(c0 + grid.cell_cols, cols), n = c1 - c0;
      block.resize(n * n);
      for (uint64_t i = 0; i < n; ++i)
        for (uint64_t j = 0; j < n; ++j) block[i * n + j] = h[(c0 + i) * cols + c0 + j];
      for (uint64_t r = 0; r < rows; ++r) {
        const float* row = &w[r * cols + c0];
        const uint64_t cell = r * grid.grid_cols + gc;
        float amax = 0;
        for (uint64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(row[i]));
        if (amax == 0) continue;
        double best_err = INFINITY;
        float best_limit = amax;
        for (size_t k = 0; k <= steps; ++k) {
          const float limit = amax * (1.0f - static_cast<float>(k) / static_cast<float>(options.grid));
          clipped.assign(row, row + n);
          for (float& v : clipped) v = std::clamp(v, -limit, limit);
          ChooseCellScale(q, cell, clipped);
          const CellFakeQuant fq(q, cell);
          delta.resize(n);
          for (uint64_t i = 0; i < n; ++i) delta[i] = row[i] - fq(clipped[i]);
          double err = 0;
          for (uint64_t i = 0; i < n; ++i) {
            double s = 0;
            for (uint64_t j = 0; j < n; ++j) s += block[i * n + j] * delta[j];
            err += delta[i] * s;
          }
          if (err < best_err) best_err = err, best_limit = limit;
        }
        clipped.assign(row, row + n);
        for (float& v : clipped) v = std::clamp(v, -best_limit, best_limit);
        ChooseCellScale(q, cell, clipped);
      }
    }
  }
  // Values beyond a clip threshold saturate at the grid's end when encoded.
  for (uint64_t r = 0; r < rows; ++r) EncodeRow(q, r, &w[r * cols]);
  return q;
}

}  // namespace lowbit
