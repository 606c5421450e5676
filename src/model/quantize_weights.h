// Quantizes the decoder-layer linear weights of a loaded model in memory (embeddings and
// lm_head stay full precision, as deployments usually keep them), through a registered method.
#pragma once

#include <string_view>

#include "model/weights.h"
#include "quant/scheme.h"

namespace lowbit {

// Returns the number of weights quantized. `include_lm_head` quantizes the output projection too
// (as speed benchmarks and llama.cpp's quantized files do).
uint64_t QuantizeLinears(ModelWeights& weights, const QuantScheme& scheme, std::string_view method = "rtn",
                         bool include_lm_head = false);

}  // namespace lowbit
