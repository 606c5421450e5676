// y = x W^T + b for a Linear layer, whatever its storage: dense fp32 rows go straight to the dot
// kernel; quantized weights go through the fused kernels for a few tokens (decode: int4 / int8
// weights by integer dots against int8 activations where the CPU has VNNI, qmatmul_int8.h; every
// other format by the fp32 kernels of qmatmul.h); bf16 weights by BF16 dot products at every
// batch size where the CPU has them (qmatmul_bf16.h)
// or are decoded a tile of rows at a time into a small buffer for many (prefill) -- never the
// whole matrix. x is [n_tokens x cols], y is [n_tokens x rows], row-major. With
// input quantization, x is fake-quantized first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace lowbit {

// How activations meet quantized and bf16 weights. kExact keeps them fp32 (what evaluation and
// calibration use, so quality figures measure the weights alone). kFast lets int4 / int8 weights
// run integer dots on int8 block-quantized activations (VNNI) and bf16 weights BF16 dots on bf16
// activations, as llama.cpp does, where the CPU has those instructions (generation, benchmarks).
enum class Activations : uint8_t { kExact, kFast };

void MatMul(const Linear& w, const float* x, size_t n_tokens, float* y, ThreadPool& pool,
            Activations activations = Activations::kExact);

// x [n_tokens x cols] after quantize-dequantize under the layer's input quantization.
std::vector<float> FakeQuantizeInput(const InputQuant& iq, const float* x, size_t n_tokens, size_t cols);

}  // namespace lowbit
