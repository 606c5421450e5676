// Quantizes the decoder-layer linear weights of a loaded model in memory (embeddings and
// lm_head stay full precision, as deployments usually keep them), through a registered method.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "model/weights.h"
#include "quant/scheme.h"

namespace lowbit {

// Serving engines fuse q/k/v into one qkv_proj and each gate/up pair into one gate_up_proj (an
// expert's w13), with one NVFP4 global scale for the fused matrix (vLLM keeps the largest of the
// shards'). The fused matrix a linear belongs to, by name: "...self_attn.qkv_proj",
// "...mlp.experts.3.gate_up_proj", Mixtral's "...experts.3.w13"; any other linear is its own.
std::string FusedMatrixOf(std::string_view linear_name);
// For each dense linear of `linears` whose fused matrix has another dense member there: the max |w|
// over that matrix, which schemes with a tensor scale choose it from (WeightToQuantize::tensor_amax),
// so that the shards share it and an export holds exactly what lowbit measured.
std::unordered_map<const Linear*, float> FusedAbsMax(std::span<const BlockLinear> linears);

// Returns the number of weights quantized. `include_lm_head` quantizes the output projection too
// (as speed benchmarks and llama.cpp's quantized files do).
uint64_t QuantizeLinears(ModelWeights& weights, const QuantScheme& scheme, std::string_view method = "rtn",
                         bool include_lm_head = false);

// The same for the seven linears of one decoder block (`index` names them in messages), for
// callers that read a model block by block.
uint64_t QuantizeBlockLinears(LayerWeights& block, size_t index, const QuantScheme& scheme,
                              std::string_view method = "rtn");

}  // namespace lowbit
