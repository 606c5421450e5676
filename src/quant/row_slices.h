// Row ranges of a quantized tensor as tensors of their own, and tensors stacked row-wise: the shards
// of a fused projection (Phi-3's qkv_proj and gate_up_proj) taken apart at load and put together at
// export, codes and scales copied bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "quant/quantized_tensor.h"

namespace lowbit {

// Rows [first, first + n) of `q`. Each boundary must fall on a scale-cell boundary (any row for
// channel and group scales; a multiple of the block height for 2-D blocks, or the tensor's end);
// a tensor-wide scale is copied to the slice. Error naming `what` otherwise, and for GGUF's
// super-block storages.
QuantizedTensor SliceRows(const QuantizedTensor& q, uint64_t first, uint64_t n, std::string_view what);

// `parts` (one scheme, one width) one under the other. Every part but the last must end on a
// scale-cell boundary; tensor-wide scales, zero points and tensor scales must be equal in every part
// (one matrix has one). Error naming `what` and the part otherwise.
QuantizedTensor StackRows(std::span<const QuantizedTensor* const> parts, std::string_view what);

}  // namespace lowbit
