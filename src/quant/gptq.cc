#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "quant/fake_quant.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

// Dot product with four partial sums (lets the compiler keep several FMAs in flight).
double DotD(const double* a, const double* b, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// In place: A (n x n, symmetric positive definite) -> L with A = L L^T (lower; upper part zeroed).
bool CholeskyLower(std::vector<double>& a, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    double* row_j = &a[j * n];
    const double d = row_j[j] - DotD(row_j, row_j, j);
    if (!(d > 0)) return false;
    row_j[j] = std::sqrt(d);
    for (size_t i = j + 1; i < n; ++i) {
      double* row_i = &a[i * n];
      row_i[j] = (row_i[j] - DotD(row_i, row_j, j)) / row_j[j];
    }
  }
  for (size_t i = 0; i < n; ++i) std::fill(&a[i * n + i + 1], &a[(i + 1) * n], 0.0);
  return true;
}

// U (upper, row-major) with H^-1 = U^T U, from H. Returns false if H is not positive definite.
bool InverseCholeskyUpper(std::vector<double> h, size_t n, std::vector<float>& u_out) {
  if (!CholeskyLower(h, n)) return false;
  // Rows of L^-T: solve L x = e_j column by column; store M = L^-1 transposed (upper).
  std::vector<double> inv_t(n * n, 0.0);  // inv_t[j * n + i] = (L^-1)[i][j], nonzero for i >= j
  std::vector<double> x(n);
  for (size_t j = 0; j < n; ++j) {
    std::fill(x.begin(), x.end(), 0.0);
    x[j] = 1.0 / h[j * n + j];
    for (size_t i = j + 1; i < n; ++i) x[i] = -DotD(&h[i * n + j], &x[j], i - j) / h[i * n + i];
    std::copy(x.begin() + j, x.end(), &inv_t[j * n + j]);
  }
  // H^-1 = L^-T L^-1: entry (i, j) = sum_k (L^-1)[k][i] (L^-1)[k][j] = dot of rows i, j of inv_t.
  std::vector<double> hinv(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i; j < n; ++j) {
      const size_t k0 = j;  // (L^-1)[k][i] is zero for k < i, and for k < j in the other factor
      hinv[i * n + j] = hinv[j * n + i] = DotD(&inv_t[i * n + k0], &inv_t[j * n + k0], n - k0);
    }
  if (!CholeskyLower(hinv, n)) return false;
  u_out.resize(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) u_out[i * n + j] = static_cast<float>(hinv[j * n + i]);  // U = L^T
  return true;
}

}  // namespace

QuantizedTensor QuantizeGptq(std::span<const float> w0, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                             std::vector<double> h, const GptqOptions& options, std::string_view name) {
  scheme.ValidateShape(rows, cols, name);
  if (w0.size() != rows * cols) Fail("tensor '{}': {} values for shape [{} x {}]", name, w0.size(), rows, cols);
  if (h.size() != cols * cols) Fail("tensor '{}': Hessian has {} entries, expected {}^2", name, h.size(), cols);
  if (scheme.granularity.kind == GranularityKind::kNone) return QuantizeRtn(w0, rows, cols, scheme, name);
  std::vector<float> w(w0.begin(), w0.end());

  // Dead inputs (never active in calibration) carry no information: zero them.
  for (uint64_t i = 0; i < cols; ++i)
    if (h[i * cols + i] == 0) {
      h[i * cols + i] = 1;
      for (uint64_t r = 0; r < rows; ++r) w[r * cols + i] = 0;
    }

  QuantizedTensor q(scheme, rows, cols);
  const ScaleGrid grid = q.grid();
  const bool groups_as_reached = scheme.granularity.kind == GranularityKind::kGroup && !options.act_order;
  ChooseScales(q, w, name);  // all cells up front; grouped ones are redone as their columns are reached

  std::vector<uint64_t> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  if (options.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](uint64_t a, uint64_t b) { return h[a * cols + a] > h[b * cols + b]; });

  // Permuted Hessian and weights (column i of the working copy is original column perm[i]).
  std::vector<double> hp(cols * cols);
  for (uint64_t i = 0; i < cols; ++i)
    for (uint64_t j = 0; j < cols; ++j) hp[i * cols + j] = h[perm[i] * cols + perm[j]];
  double mean_diag = 0;
  for (uint64_t i = 0; i < cols; ++i) mean_diag += hp[i * cols + i];
  mean_diag /= static_cast<double>(cols);
  for (uint64_t i = 0; i < cols; ++i) hp[i * cols + i] += options.damp * mean_diag;
  std::vector<float> u;
  if (!InverseCholeskyUpper(std::move(hp), cols, u))
    Fail("tensor '{}': the damped Hessian is not positive definite (raise the damping)", name);

  std::vector<float> wp(rows * cols);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t i = 0; i < cols; ++i) wp[r * cols + i] = w[r * cols + perm[i]];

  std::vector<float> quantized(rows * cols);  // dequantized values, original column order
  const size_t block = std::max<size_t>(1, options.block_size);
  std::vector<float> err(rows * block);
  std::vector<float> group_values;
  for (uint64_t i1 = 0; i1 < cols; i1 += block) {
    const uint64_t i2 = std::min<uint64_t>(i1 + block, cols), nb = i2 - i1;
    for (uint64_t i = i1; i < i2; ++i) {
      const uint64_t c = perm[i];
      const uint64_t gc = c / grid.cell_cols;
      if (groups_as_reached && c % grid.cell_cols == 0) {
        const uint64_t c1 = std::min<uint64_t>(c + grid.cell_cols, cols);
        for (uint64_t r = 0; r < rows; ++r) {  // no act-order: working column index == original
          group_values.assign(&wp[r * cols + c], &wp[r * cols + c1]);
          ChooseCellScale(q, (r / grid.cell_rows) * grid.grid_cols + gc, group_values);
        }
      }
      const float d = u[i * cols + i];
      for (uint64_t r = 0; r < rows; ++r) {
        const CellFakeQuant fq(q, (r / grid.cell_rows) * grid.grid_cols + gc);
        float* row = &wp[r * cols];
        const float qv = fq(row[i]);
        quantized[r * cols + c] = qv;
        const float e = (row[i] - qv) / d;
        err[r * block + (i - i1)] = e;
        const float* ui = &u[i * cols];
        for (uint64_t j = i + 1; j < i2; ++j) row[j] -= e * ui[j];
      }
    }
    // Lazy batch update of the columns after this block.
    for (uint64_t r = 0; r < rows; ++r) {
      float* row = &wp[r * cols];
      for (uint64_t k = 0; k < nb; ++k) {
        const float e = err[r * block + k];
        const float* uk = &u[(i1 + k) * cols];
        for (uint64_t j = i2; j < cols; ++j) row[j] -= e * uk[j];
      }
    }
  }
  for (uint64_t r = 0; r < rows; ++r) EncodeRow(q, r, &quantized[r * cols]);
  return q;
}

}  // namespace lowbit
