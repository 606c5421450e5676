// Where a decoder block's vectors live in a Hugging Face checkpoint, and how their values differ
// from what the forward pass multiplies by. The reader (hf_model) and the writers (lowbit folders,
// engine formats) share this table, so a name or an offset cannot drift between them.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace lowbit {

// A block's tensor that is not a quantizable linear: a norm weight, or a MoE router held in full
// precision.
struct HfBlockVector {
  std::string name;                            // after "model.layers.N.", e.g. "input_layernorm.weight"
  std::vector<float> LayerWeights::*member;    // where the forward pass reads it
  std::vector<uint64_t> shape;
  bool norm = true;                            // an RMSNorm weight (see NormFromCheckpoint)

  uint64_t numel() const;
};

// The norms (and routers) of block `layer` of config `c`, in checkpoint order. In Llama-style models
// post_attention_layernorm is the MLP's input norm; in Gemma 2/3 it normalizes the attention output,
// and the MLP's input norm is pre_feedforward_layernorm. Mixtral's router is
// block_sparse_moe.gate, Qwen-MoE's mlp.gate (and mlp.shared_expert_gate).
std::vector<HfBlockVector> HfBlockVectors(const ModelConfig& c, size_t layer);

// A block vector's values as the checkpoint stores them, and as the model holds them.
std::vector<float> VectorToCheckpoint(const ModelConfig& c, const HfBlockVector& v, const LayerWeights& layer);
std::vector<float> VectorFromCheckpoint(const ModelConfig& c, const HfBlockVector& v, std::vector<float> stored);

// The checkpoint name of a block linear (model/weights.h BlockLinears' names): the same, except for
// Mixtral's experts, stored as block_sparse_moe.experts.E.w1 (gate), w3 (up) and w2 (down), and Llama 4's MLPs,
// stored under feed_forward. (its shared expert as feed_forward.shared_expert.), and Granite MoE's shared expert's
// down (shared_mlp.output_linear).
std::string HfLinearName(const ModelConfig& c, const std::string& name);

// An RMSNorm weight as stored in the checkpoint -> as the model multiplies (Gemma stores w for 1 + w),
// and back.
std::vector<float> NormFromCheckpoint(const ModelConfig& c, std::vector<float> stored);
std::vector<float> NormToCheckpoint(const ModelConfig& c, std::vector<float> applied);

// Phi-3 stores q/k/v as one self_attn.qkv_proj; Phi-3 and GLM-4 store gate/up as one mlp.gate_up_proj
// (gate first).
bool HasFusedQkv(const ModelConfig& c);
bool HasFusedGateUp(const ModelConfig& c);

// GPT-OSS, Llama 4, Granite MoE, Qwen3-VL-MoE and Mistral 4 store each layer's experts as stacked tensors
// (io/stacked_experts.h), not one linear per expert, under HfExpertsPrefix ("mlp.experts.", Llama 4's
// "feed_forward.experts.", Granite MoE's "block_sparse_moe.").
bool HasStackedExperts(const ModelConfig& c);
std::string HfExpertsPrefix(const ModelConfig& c);

// Granite MoE (GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM, and Granite 4.0's GraniteMoeHybridForCausalLM);
// its shared expert's (Granite 4.0 without experts: its MLP's) gate and up are one shared_mlp.input_linear (gate
// first), its down shared_mlp.output_linear.
bool IsGraniteMoe(const ModelConfig& c);
bool HasFusedSharedGateUp(const ModelConfig& c);

}  // namespace lowbit
