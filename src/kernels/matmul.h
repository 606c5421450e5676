// y = x W^T + b for a Linear layer, whatever its storage; x is [n_tokens x cols], y is
// [n_tokens x rows], row-major. No full-precision copy of a quantized matrix is ever made.
//   dense fp32                 SIMD dot tiles (4 rows x 4 tokens).
//   quantized / bf16, exact    up to 8 tokens: fused kernels, codes decoded in registers
//                              (qmatmul.h); more: tiles of rows (up to 256 KiB) decoded to fp32,
//                              then dot tiles over every token.
//   quantized / bf16, fast     where the CPU has the instructions: bf16 weights -> BF16 dots
//                              (qmatmul_bf16.h); int2..int8, the GGUF block types and the byte-level
//                              tables -> VNNI integer dots on int8 activations at any batch, prefill
//                              included (qmatmul_int8.h); without VNNI, AVX2 integer dots (level
//                              tables of 16 entries and integers) at any batch; other formats past 8 tokens -> 64-row
//                              tiles decoded to bf16, then BF16 dots; otherwise as exact.
// With input quantization (W8A8 simulation), x is fake-quantized first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace lowbit {

// How activations meet quantized and bf16 weights. kExact keeps them fp32 (what evaluation and
// calibration use, so quality figures measure the weights alone). kFast lets int4 / int8 weights
// run integer dots on int8 block-quantized activations (VNNI, or AVX2) and bf16 weights BF16 dots on bf16
// activations, as llama.cpp does, where the CPU has those instructions (generation, benchmarks).
enum class Activations : uint8_t { kExact, kFast };

void MatMul(const Linear& w, const float* x, size_t n_tokens, float* y, ThreadPool& pool,
            Activations activations = Activations::kExact);

// One of several linears that read the same input (q / k / v, gate / up): y = x w^T + b.
struct LinearOutput {
  const Linear& w;
  float* y;
};
// MatMul of each; at decode (up to 8 tokens) their rows share one parallel pass, and int8 activations
// quantized for one serve the others of the same layout: on the bundled model a pool wake-up and an
// activation pass per linear cost about a tenth of an int8 decode step at two threads.
void MatMulShared(std::span<const LinearOutput> outputs, const float* x, size_t n_tokens, ThreadPool& pool,
                  Activations activations = Activations::kExact);

// x [n_tokens x cols] after quantize-dequantize under the layer's input quantization.
std::vector<float> FakeQuantizeInput(const InputQuant& iq, const float* x, size_t n_tokens, size_t cols);

}  // namespace lowbit
