// Integer-dot decode kernel for int4 and int8 weights. The activations of the few tokens being
// decoded are quantized to int8 in blocks (one fp32 scale per block of 128 inputs for int4
// weights, 64 for int8, as llama.cpp quantizes activations to Q8 for its quantized dots) and
// multiplied with the unsigned weight codes by AVX-512 VNNI (vpdpbusd: 64 byte products per
// instruction), so a weight byte costs a fraction of an instruction instead of a convert and an
// fp32 FMA per code. Per block: int32 dot -> fp32, times weight scale x activation scale; the
// zero-point / offset of each group is applied once through the group's sum of activations.
//
// Available when the CPU has AVX-512 VNNI and the weight is affine int4 (group a multiple of 128,
// or one group per row) or int8 (multiple of 64); otherwise MatMul uses the fp32 fused kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/quantized_tensor.h"

namespace lowbit {

struct Int8Activations {
  size_t n_tokens = 0, cols = 0, block = 0;
  std::vector<int8_t> values;      // [n_tokens x cols]; int4 blocks hold even inputs, then odd ones
  std::vector<float> scales;       // [n_tokens x cols / block]
  std::vector<float> group_sums;   // [n_tokens x groups]: sum over the group of scale * value
};

bool HasInt8DotKernel(const QuantizedTensor& w);  // the CPU and the weight both qualify
bool Int8DotKernelFits(const QuantizedTensor& w);  // the weight qualifies (whatever the CPU)

Int8Activations QuantizeActivationsInt8(const QuantizedTensor& w, const float* x, size_t n_tokens);

void Int8DotRows(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride);
// Scalar reference: the same integer arithmetic, plain C++.
void Int8DotRowsRef(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                    size_t y_stride);

}  // namespace lowbit
