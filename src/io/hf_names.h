// Where a decoder block's vectors live in a Hugging Face checkpoint, and how their values differ
// from what the forward pass multiplies by. The reader (hf_model) and the writers (lowbit folders,
// engine formats) share this table, so a name or an offset cannot drift between them.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace lowbit {

struct HfBlockVector {
  std::string name;                            // after "model.layers.N.", e.g. "input_layernorm.weight"
  std::vector<float> LayerWeights::*member;    // where the forward pass reads it
  uint32_t size;
};

// The norms of a block of config `c`, in checkpoint order. In Llama-style models
// post_attention_layernorm is the MLP's input norm; in Gemma 2/3 it normalizes the attention output,
// and the MLP's input norm is pre_feedforward_layernorm.
std::vector<HfBlockVector> HfBlockVectors(const ModelConfig& c);

// An RMSNorm weight as stored in the checkpoint -> as the model multiplies (Gemma stores w for 1 + w),
// and back.
std::vector<float> NormFromCheckpoint(const ModelConfig& c, std::vector<float> stored);
std::vector<float> NormToCheckpoint(const ModelConfig& c, std::vector<float> applied);

// Phi-3 stores q/k/v as one self_attn.qkv_proj and gate/up as one mlp.gate_up_proj (gate first).
bool HasFusedProjections(const ModelConfig& c);

}  // namespace lowbit
