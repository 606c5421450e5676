// ggml block encoders: fp32 rows into GGUF tensor data, the inverse of DequantizeGgufRow (block
// layouts: formats.md 2.8).
//
// Output is byte-identical to llama.cpp's ggml_quantize_chunk for the same input: without an
// importance matrix the quantize_row_*_ref routines (IQ4_NL / IQ4_XS: their scale search, which
// ggml_quantize_chunk always runs), with one the weighted quantize_*_impl routines. All arithmetic
// is fp32 in ggml's order of operations, so the encoders (gguf_quantize*.cc, gguf_kquant_grid.cc)
// must not be built with floating-point contraction into FMAs (-ffp-contract=fast with an FMA
// target) or -ffast-math, as ggml's own quantizers are not. The K-quants and IQ4_XS are also
// available phase by phase (scales, codes, packing) in gguf_kquant_grid.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace lowbit {

// True when QuantizeGgufRow can encode this ggml type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0.
bool CanQuantizeGguf(uint32_t ggml_type);

// Encodes n fp32 values (a whole number of the type's blocks) into ggml blocks at dst
// (n / block_elems * block_bytes bytes). `importance` is empty or holds one weight per input
// column of a row (an importance matrix: mean squared activation per column); then src holds
// n / importance.size() whole rows of that length, and the types with weighted quantizers use
// them as llama.cpp uses quant_weights. Q8_0, MXFP4, TQ1_0, TQ2_0 and the float types ignore it,
// as llama.cpp does. Throws Error for types it cannot encode and for sizes that do not fit.
void QuantizeGgufRow(uint32_t ggml_type, const float* src, int64_t n, std::span<const float> importance,
                     std::byte* dst);

}  // namespace lowbit
