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

constexpr size_t kPanel = 64;   // columns finished per pass over the rows below them
constexpr size_t kChunk = 256;  // inner-dimension chunk: 64 rows of it (128 KB) stay in L2 while rows stream past

// c[r * ldc + q] -= sum over p < k of a[r * lda + p] * b[q * ldb + p], for r < rows and q < cols. The
// inner dimension goes in chunks, so b's rows of one chunk stay in cache while every row of a passes
// (each row of a is read from memory once per call, not once per four columns of b); rows of a are
// split over the pool. Each element sums its chunks in the same order whatever the pool.
void SubtractRowDots(double* c, size_t ldc, const double* a, size_t lda, size_t rows, const double* b, size_t ldb,
                     size_t cols, size_t k, ThreadPool* pool) {
  for (size_t k0 = 0; k0 < k; k0 += kChunk) {
    const size_t len = std::min(kChunk, k - k0);
    // Rows of a by fours (a tile of four rows against four of b in registers), split over the pool.
    ParallelFor(pool, (rows + 3) / 4, [&](size_t begin, size_t end) {
      for (size_t r0 = begin * 4; r0 < std::min(rows, end * 4); r0 += 4) {
        const size_t tile = std::min<size_t>(4, rows - r0);
        size_t q = 0;
        for (; tile == 4 && q + 4 <= cols; q += 4) {
          double s[16];
          DotF64Rows4x4(a + r0 * lda + k0, lda, b + q * ldb + k0, ldb, len, s);
          for (size_t r = 0; r < 4; ++r)
            for (size_t t = 0; t < 4; ++t) c[(r0 + r) * ldc + q + t] -= s[r * 4 + t];
        }
        for (size_t r = r0; r < r0 + tile; ++r) {
          const double* ar = a + r * lda + k0;
          double* cr = c + r * ldc;
          size_t qr = q;
          for (; qr + 4 <= cols; qr += 4) {
            double s[4];
            DotF64Rows4(ar, b + qr * ldb + k0, ldb, len, s);
            for (size_t t = 0; t < 4; ++t) cr[qr + t] -= s[t];
          }
          for (; qr < cols; ++qr) cr[qr] -= DotF64(ar, b + qr * ldb + k0, len);
        }
      }
    });
  }
}

// In place: A (n x n, symmetric positive definite) -> L with A = L L^T (lower; upper part zeroed).
// Left-looking by panels of kPanel columns: the finished columns' products leave every row below in
// one chunked pass (compute-bound, where a pass per four columns made the factor memory-bound), then
// the panel's own columns are finished, its diagonal block first and the rows below it in parallel.
bool CholeskyLower(std::vector<double>& a, size_t n, ThreadPool* pool) {
  for (size_t j0 = 0; j0 < n; j0 += kPanel) {
    const size_t m = std::min(kPanel, n - j0);
    double* panel = &a[j0 * n];
    // (Inside the diagonal block this also writes above the diagonal: zeroed at the end.)
    SubtractRowDots(panel + j0, n, panel, n, n - j0, panel, n, m, j0, pool);
    for (size_t c = 0; c < m; ++c) {
      double* row_c = &a[(j0 + c) * n];
      const double d = row_c[j0 + c] - DotF64(row_c + j0, row_c + j0, c);
      if (!(d > 0)) return false;
      row_c[j0 + c] = std::sqrt(d);
      for (size_t r = c + 1; r < m; ++r) {
        double* row_r = &a[(j0 + r) * n];
        row_r[j0 + c] = (row_r[j0 + c] - DotF64(row_r + j0, row_c + j0, c)) / row_c[j0 + c];
      }
    }
    const size_t below = j0 + m;
    ParallelFor(pool, n - below, [&](size_t begin, size_t end) {
      for (size_t i = below + begin; i < below + end; ++i) {
        double* row_i = &a[i * n];
        for (size_t c = 0; c < m; ++c) {
          const double* row_c = &a[(j0 + c) * n];
          row_i[j0 + c] = (row_i[j0 + c] - DotF64(row_i + j0, row_c + j0, c)) / row_c[j0 + c];
        }
      }
    });
  }
  for (size_t i = 0; i < n; ++i) std::fill(&a[i * n + i + 1], &a[(i + 1) * n], 0.0);
  return true;
}

// Columns [j, j + m) of L^-1 by forward substitution (L x = e_col), stored transposed so the solve
// reads contiguous memory: x[c * n + i] = (L^-1)[i][j + c], nonzero for i >= j + c (x starts zeroed).
// Rows go in blocks of kPanel: the block's sums over the rows before it are one chunked pass (every
// column's x is zero before the group's first row, so all start there), then the block is solved row
// by row.
void SolveInverseColumns(const std::vector<double>& l, size_t n, size_t j, size_t m, double* x) {
  std::vector<double> sums(kPanel * m);
  for (size_t i0 = j; i0 < n; i0 += kPanel) {
    const size_t rows = std::min(kPanel, n - i0);
    std::fill(sums.begin(), sums.end(), 0.0);
    SubtractRowDots(sums.data(), m, &l[i0 * n + j], n, rows, x + j, n, m, i0 - j, nullptr);  // -sum over [j, i0)
    for (size_t i = i0; i < i0 + rows; ++i) {
      const double* row_i = &l[i * n];
      for (size_t c = 0; c < m && j + c <= i; ++c) {
        double* xc = x + c * n;
        const double s = DotF64(row_i + i0, xc + i0, i - i0) - sums[(i - i0) * m + c];
        xc[i] = (j + c == i ? 1.0 - s : -s) / row_i[i];
      }
    }
  }
}

// U (upper, row-major) with H^-1 = U^T U, given `l` = P H P, where P reverses the order: with
// P H P = L L^T, H^-1 = (L^-1 P)^T (L^-1 P), so U = P L^-1 P. One Cholesky and one triangular
// inverse, instead of inverting H and factoring the inverse again. Returns false if H is not
// positive definite. The inverse's column groups are independent: they go to the pool in pairs of
// a long and a short one (group g costs about (n - g)^2), so the pool's contiguous chunks get equal work,
// and each is written into U as soon as it is solved (no second n x n matrix of doubles: at a 7B
// model's 18944 MLP columns that is 2.9 GB). `l` is consumed.
bool InverseCholeskyUpper(std::vector<double>& l, size_t n, std::vector<float>& u_out, ThreadPool* pool) {
  if (!CholeskyLower(l, n, pool)) return false;
  u_out.assign(n * n, 0.0f);
  const size_t groups = (n + kPanel - 1) / kPanel;
  ParallelFor(pool, (groups + 1) / 2, [&](size_t begin, size_t end) {
    std::vector<double> x(kPanel * n);
    for (size_t p = begin; p < end; ++p) {
      const size_t pair[2] = {p, groups - 1 - p};
      for (size_t t = 0; t < (pair[1] == p ? 1u : 2u); ++t) {
        const size_t j = pair[t] * kPanel, m = std::min(kPanel, n - j);
        std::fill(x.begin(), x.begin() + static_cast<ptrdiff_t>(m * n), 0.0);
        SolveInverseColumns(l, n, j, m, x.data());
        for (size_t c = 0; c < m; ++c)  // U[a][b] = (L^-1)[n-1-a][n-1-b]
          for (size_t i = j + c; i < n; ++i) u_out[(n - 1 - i) * n + (n - 1 - (j + c))] = static_cast<float>(x[c * n + i]);
      }
    }
  });
  l = {};
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
