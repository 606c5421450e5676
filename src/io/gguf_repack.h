// GGUF block-quantized matrices repacked into lowbit's QuantizedTensor layout at load, so the
// kernels run them from their codes instead of from an fp32 copy (llama.cpp likewise repacks
// Q4_0 into interleaved layouts for its CPU kernels). Each block type maps to one of our schemes
// (gguf_blocks.cc lists them): Q4_0 -> int4:g32, Q8_0 -> int8:g32, Q4_K -> int4:g32 asym, Q6_K ->
// int6:g16, ... The codes are copied bit for bit. The 32-element types keep their fp16 scales and
// Q4_1 / Q5_1 their fp16 mins (the file's bits per weight); K-quants keep their two-level scales
// (an fp16 super-block value over i8 sub-scales, and u8 mins under an fp16 super-block min), each
// 6-bit sub-scale or min in a byte: at most 0.5 bit per weight over the file (Q2_K).
//
// Dequantized, a repacked tensor gives exactly DequantizeGgufTensor's values for symmetric types;
// for types with mins, (code - (-m / s)) * s may differ from s * code + m in the last bit.
#pragma once

#include <cstdint>
#include <optional>

#include "io/gguf.h"
#include "core/file_util.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// The [rows x cols] matrix held by `tensor` (ne = [cols, rows]) in our layout, or nullopt when
// its type has none (plain float types: callers dequantize those). Throws Error naming the
// tensor when its byte count is wrong or a block is invalid (an MXFP4 scale of 0xFF). `consumed`
// receives the tensor's bytes a few MiB at a time once repacked (the loader releases the pages).
std::optional<QuantizedTensor> RepackGgufMatrix(const GgufTensorInfo& tensor, uint64_t rows, uint64_t cols,
                                                ConsumedBytes consumed = nullptr);

}  // namespace lowbit
