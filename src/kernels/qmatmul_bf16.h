// BF16 weights x BF16 activations with the AVX-512 BF16 dot-product instruction (vdpbf16ps: 32
// products per instruction, fp32 accumulation), as bf16 models run in PyTorch and llama.cpp:
// the activations are rounded to bf16 once per call. FP8 E4M3 (vLLM's FP8 W8A16) and FP6 E3M2 /
// E2M3 weights take the same path: their codes widen to bf16 exactly in registers, and a row's
// scale multiplies its dot (channel, tensor), a group's its 32-column partial dots (MX, blocks). Tiles of 4 rows x 4 tokens, so each loaded vector feeds four
// dot instructions. MatMul uses it to decode (up to 8 tokens): memory-bound,
// half the bytes of fp32. Prefill goes to the fp32 GEMM (gemm_f32.h), since vdpbf16ps issues at a
// fifth of vfmadd's rate on the machines measured. Where the CPU lacks AVX512_BF16, MatMul falls
// back to the fp32 fused kernel (exact fp32 activations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/quantized_tensor.h"

namespace lowbit {

// bf16 storage with cols % 32 == 0, or E4M3 / FP6 E3M2 / FP6 E2M3, symmetric, with channel or tensor
// scales or scales per group of a multiple of 32 columns (MX, FP8 blocks), and cols % 64 == 0; CPU
// support (AVX512_BF16; FP6 also AVX512_VBMI).
bool HasBf16DotKernel(const QuantizedTensor& w);

// x [n_tokens x cols] rounded to bf16 (round to nearest even), in column order.
AlignedVector<uint16_t> ToBf16Activations(const float* x, size_t n_tokens, size_t cols);

// The activations as Bf16DotRows reads them: rounded to bf16 once per call, shared by every thread.
struct Bf16Input {
  AlignedVector<uint16_t> values;  // [n_tokens x cols]
  size_t n_tokens = 0;
};
Bf16Input PrepareBf16Input(const QuantizedTensor& w, const float* x, size_t n_tokens);

// y[t * y_stride + r] = dot(row r, x_t) for r in [row_begin, row_end).
void Bf16DotRows(const QuantizedTensor& w, const Bf16Input& in, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride);
// Scalar reference: the weights as their codec decodes them (scales applied), times the bf16
// activations, summed in double.
void Bf16DotRowsRef(const QuantizedTensor& w, const uint16_t* x, size_t n_tokens, size_t row_begin, size_t row_end,
                    float* y, size_t y_stride);

}  // namespace lowbit
