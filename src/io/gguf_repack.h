// GGUF block-quantized matrices repacked into lowbit's QuantizedTensor layout at load, so the
// fused kernels run them straight from their codes instead of from an fp32 copy (llama.cpp
// likewise repacks Q4_0 into interleaved layouts for its CPU kernels). Every supported block type
// is one of our schemes with group 32:
//
//   Q4_0 -> int4:g32 sym, fp16 scale       (code = q, whose offset 8 is our symmetric zero)
//   Q5_0 -> int5:g32 sym, fp16 scale       (offset 16)
//   Q8_0, Q8_1 -> int8:g32 sym, fp16 scale (code = q + 128; Q8_1's block sum is not needed)
//   Q4_1 -> int4:g32 asym, fp16 scale, fp32 zero = -m / d
//   Q5_1 -> int5:g32 asym, fp16 scale, fp32 zero = -m / d
//   MXFP4 -> fp4_e2m1:g32, E8M0 scale      (ggml's doubled table times 2^(e-128) = E2M1 x 2^(e-127))
//   IQ4_NL -> iq4_nl:g32, fp16 scale
//
// Codes and scales are bit-exact copies, so dequantizing the repacked tensor gives exactly
// DequantizeGgufTensor's values, except Q4_1 / Q5_1, where (q + m/d) * d may differ from
// q * d + m in the last bit of m.
#pragma once

#include <cstdint>
#include <optional>

#include "io/gguf.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// Whether RepackGgufMatrix handles this ggml type.
bool GgufTypeRepacks(uint32_t ggml_type);

// The [rows x cols] matrix held by `tensor` (ne = [cols, rows]) in our layout, or nullopt when
// its type has none (plain float types; callers dequantize those) or a block cannot be expressed
// (Q4_1 / Q5_1 with d = 0 and m != 0). Throws Error naming the tensor when its byte count is
// wrong or an MXFP4 block has the reserved scale 0xFF.
std::optional<QuantizedTensor> RepackGgufMatrix(const GgufTensorInfo& tensor, uint64_t rows, uint64_t cols);

}  // namespace lowbit
