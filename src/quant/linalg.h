// Dense linear-algebra kernels for the quantizers' solvers (GPTQ's Cholesky factor and inverse, its
// lazy block updates): Highway, dispatched at run time, each beside its scalar reference.
#pragma once

#include <cstddef>

namespace lowbit {

// sum a[i] * b[i] over i < n, in double.
double DotF64(const double* a, const double* b, size_t n);
double DotF64Ref(const double* a, const double* b, size_t n);

// out[c] = sum a[i] * b[c * b_stride + i] over i < n, for c < 4: four dot products in one pass over a.
void DotF64Rows4(const double* a, const double* b, size_t b_stride, size_t n, double* out);
void DotF64Rows4Ref(const double* a, const double* b, size_t b_stride, size_t n, double* out);

// out[r * 4 + c] = sum a[r * a_stride + i] * b[c * b_stride + i] over i < n, for r, c < 4.
void DotF64Rows4x4(const double* a, size_t a_stride, const double* b, size_t b_stride, size_t n, double* out);
void DotF64Rows4x4Ref(const double* a, size_t a_stride, const double* b, size_t b_stride, size_t n, double* out);

// The rank-k update of a block of rows: for r < n_rows and j in [begin, end),
//   rows[r * row_stride + j] -= sum over i < k of coef[r * coef_stride + i] * u[i * u_stride + j],
// the products subtracted in order of i (each row's arithmetic is independent of n_rows).
void SubtractProducts(float* rows, size_t n_rows, size_t row_stride, const float* coef, size_t coef_stride,
                      const float* u, size_t u_stride, size_t k, size_t begin, size_t end);
void SubtractProductsRef(float* rows, size_t n_rows, size_t row_stride, const float* coef, size_t coef_stride,
                         const float* u, size_t u_stride, size_t k, size_t begin, size_t end);

}  // namespace lowbit
