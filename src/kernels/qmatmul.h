// Fused matmul against a QuantizedTensor: y = x W^T with W's codes decoded in registers, one
// vector of codes at a time, never expanded to an fp32 matrix. Every format of at most 8 bits
// decodes as w = table[code] * s_g + b_g (s_g: group scale times tensor scale, b_g = -zero * s_g),
// so one row's dot product is
//   sum_g  s_g * (sum_{i in g} table[c_i] x_i)  +  b_g * (sum_{i in g} x_i).
// The group sums of x and a lane-order copy of x (so that the bit planes of packed codes line
// up with contiguous activations) are prepared once per call and shared by every row.
#pragma once

#include <cstddef>
#include <vector>

#include "quant/quantized_tensor.h"

namespace lowbit {

// x rearranged for one weight tensor's kernel, built by PrepareQuantInput.
struct QuantInput {
  size_t n_tokens = 0, cols = 0;
  size_t lanes = 0;               // the kernel's vector width; 0 = no fused kernel for this tensor
  std::vector<float> values;      // [n_tokens x cols] in the kernel's lane order
  std::vector<float> group_sums;  // [n_tokens x grid_cols]
};

// Whether a fused kernel exists for w on the current target (else callers decode rows).
bool HasFusedKernel(const QuantizedTensor& w);

QuantInput PrepareQuantInput(const QuantizedTensor& w, const float* x, size_t n_tokens);

// y[t * y_stride + r] = dot(row r of W, x_t) for r in [row_begin, row_end), every token of `in`.
void QuantDotRows(const QuantizedTensor& w, const QuantInput& in, size_t row_begin, size_t row_end, float* y,
                  size_t y_stride);

// The scalar reference: decodes each weight with the format's table and accumulates in double.
void QuantDotRowsRef(const QuantizedTensor& w, const float* x, size_t n_tokens, size_t row_begin, size_t row_end,
                     float* y, size_t y_stride);

}  // namespace lowbit
