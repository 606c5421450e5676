#include "io/hf_names.h"

namespace lowbit {

std::vector<HfBlockVector> HfBlockVectors(const ModelConfig& c) {
  std::vector<HfBlockVector> v = {{"input_layernorm.weight", &LayerWeights::attn_norm, c.dim}};
  if (c.sandwich_norms) {
    v.push_back({"post_attention_layernorm.weight", &LayerWeights::attn_out_norm, c.dim});
    v.push_back({"pre_feedforward_layernorm.weight", &LayerWeights::ffn_norm, c.dim});
    v.push_back({"post_feedforward_layernorm.weight", &LayerWeights::ffn_out_norm, c.dim});
  } else {
    v.push_back({"post_attention_layernorm.weight", &LayerWeights::ffn_norm, c.dim});
  }
  if (c.qk_norm) {
    v.push_back({"self_attn.q_norm.weight", &LayerWeights::q_norm, c.head_dim});
    v.push_back({"self_attn.k_norm.weight", &LayerWeights::k_norm, c.head_dim});
  }
  return v;
}

std::vector<float> NormFromCheckpoint(const ModelConfig& c, std::vector<float> stored) {
  if (c.norm_plus_one)
    for (float& w : stored) w += 1.0f;
  return stored;
}

std::vector<float> NormToCheckpoint(const ModelConfig& c, std::vector<float> applied) {
  if (c.norm_plus_one)
    for (float& w : applied) w -= 1.0f;
  return applied;
}

bool HasFusedProjections(const ModelConfig& c) { return c.architecture == "Phi3ForCausalLM"; }

}  // namespace lowbit
