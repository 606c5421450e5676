#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/column_order.h"
#include "quant/fake_quant.h"
#include "quant/linalg.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

// In place: A (n x n, symmetric positive definite) -> L with A = L L^T (lower; upper part zeroed).
// Left-looking, four columns at a time: each row below the block makes one pass over its finished
// columns for all four (the rows are far larger than cache; one pass per column made the factor
// memory-bound), and the rows are split over the pool.
bool CholeskyLower(std::vector<double>& a, size_t n, ThreadPool* pool) {
  constexpr size_t kCols = 4;
  for (size_t j0 = 0; j0 < n; j0 += kCols) {
    const size_t m = std::min(kCols, n - j0);
    for (size_t j = j0; j < j0 + m; ++j) {  // the block's own rows, column by column
      double* row_j = &a[j * n];
      const double d = row_j[j] - DotF64(row_j, row_j, j);
      if (!(d > 0)) return false;
      row_j[j] = std::sqrt(d);
      for (size_t i = j + 1; i < j0 + m; ++i) {
        double* row_i = &a[i * n];
        row_i[j] = (row_i[j] - DotF64(row_i, row_j, j)) / row_j[j];
      }
    }
    const size_t first = j0 + m;
    if (first >= n) break;
    ParallelFor(pool, n - first, [&](size_t begin, size_t end) {
      for (size_t i = first + begin; i < first + end; ++i) {
        double* row_i = &a[i * n];
        double s[kCols] = {0, 0, 0, 0};
        if (m == kCols) DotF64Rows4(row_i, &a[j0 * n], n, j0, s);
        else
          for (size_t c = 0; c < m; ++c) s[c] = DotF64(row_i, &a[(j0 + c) * n], j0);
        for (size_t c = 0; c < m; ++c) {  // then the block's columns before this one
          const double* row_j = &a[(j0 + c) * n];
          double v = row_i[j0 + c] - s[c];
          for (size_t p = 0; p < c; ++p) v -= row_i[j0 + p] * row_j[j0 + p];
          row_i[j0 + c] = v / row_j[j0 + c];
        }
      }
    });
  }
  for (size_t i = 0; i < n; ++i) std::fill(&a[i * n + i + 1], &a[(i + 1) * n], 0.0);
  return true;
}

// U (upper, row-major) with H^-1 = U^T U, given `l` = P H P, where P reverses the order: with
// P H P = L L^T, H^-1 = (L^-1 P)^T (L^-1 P), so U = P L^-1 P. One Cholesky and one triangular
// inverse, instead of inverting H and factoring the inverse again. Returns false if H is not
// positive definite. The inverse's columns are independent: they go to the pool.
bool InverseCholeskyUpper(std::vector<double>& l, size_t n, std::vector<float>& u_out, ThreadPool* pool) {
  if (!CholeskyLower(l, n, pool)) return false;
  // Columns of L^-1 by forward substitution (L x = e_j), stored transposed so the solve reads
  // contiguous memory: inv_t[j * n + i] = (L^-1)[i][j], nonzero for i >= j.
  // Four columns at a time, so each row of L is read once per four (x_c is zero above its diagonal,
  // so all four dots can start at the first column's).
  std::vector<double> inv_t(n * n, 0.0);
  const auto solve = [&](size_t begin, size_t end) {
    for (size_t j = begin * 4; j < std::min(n, end * 4); j += 4) {
      const size_t m = std::min<size_t>(4, n - j);
      double* x = &inv_t[j * n];  // x_c[i] = x[c * n + i] for i >= j + c
      for (size_t i = j; i < n; ++i) {
        double s[4] = {0, 0, 0, 0};
        if (m == 4) DotF64Rows4(&l[i * n + j], x + j, n, i - j, s);
        else
          for (size_t c = 0; c < m; ++c) s[c] = DotF64(&l[i * n + j], x + c * n + j, i - j);
        for (size_t c = 0; c < m && j + c <= i; ++c) x[c * n + i] = (j + c == i ? 1.0 : -s[c]) / l[i * n + i];
      }
    }
  };
  ParallelFor(pool, (n + 3) / 4, solve);
  u_out.assign(n * n, 0.0f);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a; b < n; ++b) u_out[a * n + b] = static_cast<float>(inv_t[(n - 1 - b) * n + (n - 1 - a)]);
  return true;
}

}  // namespace

void RunGptq(std::span<const float> w0, uint64_t rows, uint64_t cols, const std::vector<double>& h,
             const GptqOptions& options, GptqGrid& grid, std::string_view name, ThreadPool* pool) {
  if (w0.size() != rows * cols) Fail("tensor '{}': {} values for shape [{} x {}]", name, w0.size(), rows, cols);
  if (h.size() != cols * cols) Fail("tensor '{}': Hessian has {} entries, expected {}^2", name, h.size(), cols);
  std::vector<float> w(w0.begin(), w0.end());

  // Dead inputs (never active in calibration) carry no information: zero them (their H_ii is
  // taken as 1 below).
  std::vector<double> diag(cols);
  for (uint64_t i = 0; i < cols; ++i) {
    diag[i] = h[i * cols + i];
    if (diag[i] == 0) {
      diag[i] = 1;
      for (uint64_t r = 0; r < rows; ++r) w[r * cols + i] = 0;
    }
  }
  grid.Begin(w);
  const uint64_t group_cols = options.act_order ? 0 : grid.group_cols();  // act-order: static groups

  std::vector<uint32_t> perm(cols);
  if (options.act_order) perm = DescendingOrder(diag);
  else std::iota(perm.begin(), perm.end(), 0u);

  // The damped Hessian in working (permuted) column order, reversed for InverseCholeskyUpper.
  double mean_diag = 0;
  for (const double v : diag) mean_diag += v;
  mean_diag /= static_cast<double>(cols);
  std::vector<double> reversed(cols * cols);
  for (uint64_t i = 0; i < cols; ++i) {
    const uint64_t pi = perm[cols - 1 - i];
    for (uint64_t j = 0; j < cols; ++j) reversed[i * cols + j] = h[pi * cols + perm[cols - 1 - j]];
    reversed[i * cols + i] = diag[pi] + options.damp * mean_diag;
  }
  std::vector<float> u;
  if (!InverseCholeskyUpper(reversed, cols, u, pool))
    Fail("tensor '{}': the damped Hessian is not positive definite (raise the damping)", name);

  std::vector<float> wp(rows * cols);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t i = 0; i < cols; ++i) wp[r * cols + i] = w[r * cols + perm[i]];

  // Rows are independent given U: each chunk of rows (whole row blocks of the grid) runs every column.
  const size_t block = std::max<size_t>(1, options.block_size);
  const auto run_rows = [&](uint64_t r_begin, uint64_t r_end) {
    std::vector<float> err((r_end - r_begin) * block);
    for (uint64_t i1 = 0; i1 < cols; i1 += block) {
      const uint64_t i2 = std::min<uint64_t>(i1 + block, cols), nb = i2 - i1;
      for (uint64_t i = i1; i < i2; ++i) {
        const uint64_t c = perm[i];
        if (group_cols && c % group_cols == 0) {  // no act-order: working column index == original
          const uint64_t c1 = std::min<uint64_t>(c + group_cols, cols);
          for (uint64_t r = r_begin; r < r_end; ++r)
            grid.ChooseGroup(r, c, std::span<const float>(&wp[r * cols + c], c1 - c));
        }
        const float d = u[i * cols + i];
        const float* ui = &u[i * cols];
        for (uint64_t r = r_begin; r < r_end; ++r) {
          float* row = &wp[r * cols];
          const float e = (row[i] - grid.Round(r, c, row[i])) / d;
          err[(r - r_begin) * block + (i - i1)] = e;
          for (uint64_t j = i + 1; j < i2; ++j) row[j] -= e * ui[j];
        }
      }
      // Lazy batch update of the columns after this block: W[:, i2:] -= E U[i1:i2, i2:].
      SubtractProducts(&wp[r_begin * cols], r_end - r_begin, cols, err.data(), block, &u[i1 * cols], cols, nb, i2, cols);
    }
    grid.FinishRows(r_begin, r_end);
  };
  const uint64_t row_block = grid.row_block(), row_blocks = (rows + row_block - 1) / row_block;
  ParallelFor(pool, row_blocks, [&](size_t begin, size_t end) {
    run_rows(begin * row_block, std::min<uint64_t>(rows, end * row_block));
  });
}

namespace {

// lowbit's own schemes as a GPTQ grid: a QuantizedTensor's cells.
class SchemeGrid final : public GptqGrid {
 public:
  SchemeGrid(QuantizedTensor& q, std::string_view name, float tensor_amax)
      : q_(q), name_(name), tensor_amax_(tensor_amax), grid_(q.grid()), values_(q.numel()) {
    groups_ = q.scheme().granularity.kind == GranularityKind::kGroup ? grid_.cell_cols : 0;
  }
  void Begin(std::span<const float> w) override {
    ChooseScales(q_, w, name_, nullptr, tensor_amax_);  // all cells up front; grouped ones are redone as their columns are reached
  }
  uint64_t group_cols() const override { return groups_; }
  uint64_t row_block() const override { return grid_.cell_rows; }
  void ChooseGroup(uint64_t r, uint64_t c, std::span<const float> values) override {
    ChooseCellScale(q_, Cell(r, c), values);
  }
  float Round(uint64_t r, uint64_t c, float x) override {
    const float v = CellFakeQuant(q_, Cell(r, c))(x);
    values_[r * q_.cols() + c] = v;
    return v;
  }
  void FinishRows(uint64_t r_begin, uint64_t r_end) override {
    for (uint64_t r = r_begin; r < r_end; ++r) EncodeRow(q_, r, &values_[r * q_.cols()]);
  }

 private:
  uint64_t Cell(uint64_t r, uint64_t c) const { return (r / grid_.cell_rows) * grid_.grid_cols + c / grid_.cell_cols; }
  QuantizedTensor& q_;
  std::string_view name_;
  float tensor_amax_;
  ScaleGrid grid_;
  uint64_t groups_ = 0;
  std::vector<float> values_;  // the grid values, original column order
};

}  // namespace

QuantizedTensor QuantizeGptq(std::span<const float> w0, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                             const std::vector<double>& h, const GptqOptions& options, std::string_view name,
                             ThreadPool* pool, float tensor_amax) {
  scheme.ValidateShape(rows, cols, name);
  if (scheme.granularity.kind == GranularityKind::kNone) return QuantizeRtn(w0, rows, cols, scheme, name);
  QuantizedTensor q(scheme, rows, cols);
  SchemeGrid grid(q, name, tensor_amax);
  RunGptq(w0, rows, cols, h, options, grid, name, pool);
  return q;
}

}  // namespace lowbit
