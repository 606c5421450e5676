// GPTQ onto ggml's block grids, so a calibrated model is a GGUF file llama.cpp runs: the K-quants
// and IQ4_XS (each super-block's scales chosen by llama.cpp's own search, weighted by the Hessian
// diagonal as by an importance matrix, when GPTQ reaches the block's first column; gguf_kquant_grid.h)
// and the 32-element types one of lowbit's schemes holds exactly (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4;
// gguf_pack.h). Other types have no GPTQ grid here: their rows are encoded directly, importance-
// weighted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "quant/gptq.h"

namespace lowbit {

struct GgufGptqResult {
  std::vector<std::byte> bytes;     // rows x the type's row bytes, in the rows' order of `w`
  std::vector<float> grid_values;   // the dequantized result, row-major [rows x cols]
  bool gptq = false;                // false: the type has no GPTQ grid (encoded directly)
};

// `w` row-major [rows x cols]; `hessian` [cols x cols], the sum of x x^T over calibration inputs,
// with `tokens` inputs summed (its diagonal / tokens is the importance matrix row). With no tokens (an
// expert no calibration token was routed to) the rows are encoded directly, as llama-quantize would.
GgufGptqResult QuantizeGgufGptq(uint32_t ggml_type, std::span<const float> w, uint64_t rows, uint64_t cols,
                                const std::vector<double>& hessian, uint64_t tokens, const GptqOptions& options,
                                std::string_view name, ThreadPool* pool);

}  // namespace lowbit
