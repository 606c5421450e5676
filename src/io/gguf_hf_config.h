// The Hugging Face config.json of a model read from a GGUF file: the transformers architecture that
// llama.cpp's converter made general.architecture from (LlamaForCausalLM, MixtralForCausalLM for llama
// with experts, Qwen2 / Qwen3 and their MoE forms, Gemma 1-3, Phi-3, DeepSeek-V2 / V3), every hyperparameter
// HfConfigFromJson reads back to the same ModelConfig (sizes, RoPE base and scaling, norm epsilon, tied
// embeddings, experts, sliding windows and layer types, soft-capping, the attention scale, BOS / EOS).
// With ToRotateHalf it makes a GGUF model writable by the Hugging Face-folder writers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/weights.h"

namespace lowbit {

// `arch` is general.architecture, `torch_dtype` the dtype the folder's dense tensors are written in.
// Error naming `source` and the key for an architecture or a setting this writer has no field for
// (llama with biases or partial rotary embeddings, a sliding window outside Gemma and Phi-3).
nlohmann::ordered_json HfConfigOfGguf(const ModelConfig& c, const std::string& arch, const std::string& torch_dtype,
                                      const std::string& source);

// A model loaded with RopeStyle::kAdjacent (llama.cpp's permuted Q/K rows) with its Q and K rows (weights,
// biases) put back in Hugging Face's rotate-half order and rope_style kHalf: the same model, exactly. Latent
// attention is left as it is (DeepSeek's checkpoints rotate adjacent pairs).
void ToRotateHalf(Model& m);

}  // namespace lowbit
