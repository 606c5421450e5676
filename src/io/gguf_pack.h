// lowbit quantized tensors whose scheme is exactly a ggml block type's grid, written as that type's
// blocks bit for bit (the inverse of gguf_repack.h): Q4_0 = int4:g32:scale=f16, Q5_0 =
// int5:g32:scale=f16, Q8_0 = int8:g32:scale=f16, IQ4_NL = iq4_nl:g32:scale=f16, MXFP4 =
// fp4_e2m1:g32:scale=e8m0. So GPTQ- or AWQ-calibrated codes reach llama.cpp unchanged instead of
// being quantized a second time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "quant/quantized_tensor.h"

namespace lowbit {

// The ggml type that holds `q` exactly, or nullopt (other schemes, a tensor scale, rows that are
// not whole blocks).
std::optional<uint32_t> ExactGgufType(const QuantizedTensor& q);
// The scheme spelling of a ggml type's grid when it has one (the types above), else nullopt.
std::optional<std::string> GgufGridScheme(uint32_t ggml_type);

// Writes row r of `q` as blocks of ExactGgufType(q) at dst.
void PackGgufRow(const QuantizedTensor& q, uint64_t r, std::byte* dst);

}  // namespace lowbit
