#include "quant/rtn.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/codec.h"
#include "quant/scale_rules.h"

namespace lowbit {

void EncodeRow(QuantizedTensor& q, uint64_t r, const float* row) {
  const QuantScheme& s = q.scheme();
  const ElementFormat& e = *s.element;
  const uint64_t cols = q.cols();
  uint8_t* out = q.codes().data() + r * q.row_bytes();
  if (e.bits == 32) {
    std::memcpy(out, row, cols * 4);
    return;
  }
  if (e.bits == 16) {
    std::vector<uint16_t> halves(cols);
    if (e.minifloat == &kFp16) Fp32ToFp16Row(row, cols, halves.data());
    else Fp32ToBf16Row(row, cols, halves.data());
    std::memcpy(out, halves.data(), cols * 2);
    return;
  }
  const ScaleGrid g = q.grid();
  const uint64_t gr = r / g.cell_rows;
  std::vector<float> scales(g.grid_cols), zeros(g.grid_cols);
  for (uint64_t gc = 0; gc < g.grid_cols; ++gc) {
    const float stored = q.Scale(gr * g.grid_cols + gc) * q.tensor_scale();
    scales[gc] = stored != 0 ? stored : 1.0f;  // an all-zero cell: any scale encodes zeros
    zeros[gc] = q.Zero(gr * g.grid_cols + gc);
  }
  const GroupedRow grouped{cols, g.cell_cols, scales.data(), nullptr};
  std::vector<uint8_t> codes(cols);
  if (e.kind == ElementKind::kInt) {
    const std::vector<float> sym_zero(g.grid_cols, static_cast<float>(SymmetricZero(e)));
    const bool int_zero = s.zero_type == ZeroType::kInt || !s.asymmetric();
    IntEncodeParams p{(1 << e.bits) - 1, int_zero ? nullptr : zeros.data(),
                      !s.asymmetric() ? sym_zero.data() : (int_zero ? zeros.data() : nullptr)};
    EncodeIntRow(row, grouped, p, codes.data());
  } else if (e.kind == ElementKind::kFloat) {
    EncodeMiniFloatRow(*e.minifloat, row, grouped, codes.data());
  } else {
    for (uint64_t c = 0; c < cols; ++c) codes[c] = static_cast<uint8_t>(EncodeElement(e, row[c] / scales[c / g.cell_cols], 0));
  }
  PackCodes(codes.data(), cols, e.bits, out);
}

void ChooseCellScale(QuantizedTensor& q, uint64_t cell, std::span<const float> values) {
  CellStats stats;
  stats.AddSpan(values.data(), values.size());
  const CellParams p = ChooseCellParams(q.scheme(), stats, q.tensor_scale());
  q.SetScale(cell, p.stored_scale);
  q.SetZero(cell, p.zero);
}

void ChooseScales(QuantizedTensor& q, std::span<const float> w, std::string_view tensor_name, ThreadPool* pool,
                  float tensor_amax) {
  const uint64_t rows = q.rows(), cols = q.cols();
  auto fail_non_finite = [&] {
    for (size_t i = 0; i < w.size(); ++i)
      if (!std::isfinite(w[i]))
        Fail("tensor '{}': non-finite value {} at row {}, column {}", tensor_name, w[i], i / cols, i % cols);
  };
  const ScaleGrid g = q.grid();
  if (q.scheme().granularity.kind == GranularityKind::kNone) {
    fail_non_finite();
    return;
  }
  // Rows of cells are independent; each worker takes whole rows of cells.
  std::vector<CellStats> stats(g.cells());
  ParallelFor(pool, g.grid_rows, [&](size_t gr_begin, size_t gr_end) {
    for (uint64_t r = gr_begin * g.cell_rows; r < std::min<uint64_t>(rows, gr_end * g.cell_rows); ++r) {
      CellStats* row_stats = &stats[(r / g.cell_rows) * g.grid_cols];
      for (uint64_t gc = 0; gc < g.grid_cols; ++gc) {
        const uint64_t c0 = gc * g.cell_cols, c1 = std::min(c0 + g.cell_cols, cols);
        row_stats[gc].AddSpan(&w[r * cols + c0], c1 - c0);
      }
    }
  });
  float own_amax = 0;
  for (const CellStats& st : stats) {
    if (!std::isfinite(st.abs_sum)) fail_non_finite();
    own_amax = std::max(own_amax, st.amax);
  }
  q.set_tensor_scale(ChooseTensorScale(q.scheme(), std::max(own_amax, tensor_amax)));
  for (uint64_t cell = 0; cell < g.cells(); ++cell) {
    const CellParams p = ChooseCellParams(q.scheme(), stats[cell], q.tensor_scale());
    q.SetScale(cell, p.stored_scale);
    q.SetZero(cell, p.zero);
  }
}

QuantizedTensor QuantizeRtn(std::span<const float> w, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                            std::string_view tensor_name, ThreadPool* pool, float tensor_amax) {
  scheme.ValidateShape(rows, cols, tensor_name);
  if (w.size() != rows * cols)
    Fail("tensor '{}': {} values given for shape [{} x {}]", tensor_name, w.size(), rows, cols);
  QuantizedTensor q(scheme, rows, cols);
  ChooseScales(q, w, tensor_name, pool, tensor_amax);
  // Rows own whole bytes of the packed codes, so rows encode independently.
  ParallelFor(pool, rows, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) EncodeRow(q, r, &w[r * cols]);
  });
  return q;
}

}  // namespace lowbit
