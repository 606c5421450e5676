// fp32 dot-product kernels (Highway, dispatched at run time) and their scalar reference.
#pragma once

#include <cstddef>

namespace lowbit {

// y[t * y_stride + r] = dot(w + r * cols, x + t * cols) for r in [row_begin, row_end), t < n_tokens.
void DotRows(const float* w, size_t cols, size_t row_begin, size_t row_end, const float* x, size_t n_tokens,
             float* y, size_t y_stride);
void DotRowsRef(const float* w, size_t cols, size_t row_begin, size_t row_end, const float* x, size_t n_tokens,
                float* y, size_t y_stride);

float Dot(const float* a, const float* b, size_t n);

}  // namespace lowbit
