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

// The same for the seven linears of one decoder block (`index` names them in messages), for
// callers that read a model block by block.
uint64_t QuantizeBlockLinears(LayerWeights& block, size_t index, const QuantScheme& scheme,
                              std::string_view method = "rtn");

}  // namespace lowbit
