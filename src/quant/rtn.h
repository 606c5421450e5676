// Round-to-nearest quantization of a whole tensor under any scheme: choose each cell's scale
// (scale_rules.h), then encode every value with the SIMD encoders. The baseline every other
// method is measured against.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "quant/quantized_tensor.h"

namespace lowbit {

class ThreadPool;

// `w` is row-major [rows x cols]. Throws Error naming `tensor_name` on NaN/Inf input or a shape
// the scheme cannot take. With a pool, rows are split over its threads (same result).
// `tensor_amax` > 0: the tensor scale (NVFP4) is chosen from it instead of w's own max |w| (a
// fused matrix's, model/quantize_weights.h: FusedAbsMax).
QuantizedTensor QuantizeRtn(std::span<const float> w, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                            std::string_view tensor_name = "tensor", ThreadPool* pool = nullptr, float tensor_amax = 0);

// Chooses every cell's scale (and zero) of `q` from `w` with the scheme's rule, and the tensor
// scale where the scheme has one (from `tensor_amax` when > 0). Throws Error on NaN/Inf input,
// naming the tensor.
void ChooseScales(QuantizedTensor& q, std::span<const float> w, std::string_view tensor_name,
                  ThreadPool* pool = nullptr, float tensor_amax = 0);

// Chooses the scale of one cell from the values it covers (e.g. one group of one row).
void ChooseCellScale(QuantizedTensor& q, uint64_t cell, std::span<const float> values);

// Encodes row r of `w` into `q` using the scales/zeros already stored in `q` (used by RTN and
// by methods that choose scales themselves).
void EncodeRow(QuantizedTensor& q, uint64_t r, const float* row);

}  // namespace lowbit
