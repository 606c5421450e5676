#include "io/hf_names.h"

namespace lowbit {

namespace {

// Mixtral's names for the experts (block_sparse_moe.experts.N.w1 / w3 / w2) and the router: MiniMax-M2's too.
bool IsMixtral(const ModelConfig& c) {
  return c.architecture == "MixtralForCausalLM" || c.architecture == "MiniMaxM2ForCausalLM";
}
bool IsGptOss(const ModelConfig& c) { return c.architecture == "GptOssForCausalLM"; }
bool IsGlm4(const ModelConfig& c) { return c.architecture == "Glm4ForCausalLM"; }
bool IsLlama4(const ModelConfig& c) { return c.architecture == "Llama4ForCausalLM"; }
bool IsHunyuan(const ModelConfig& c) {
  return c.architecture == "HunYuanDenseV1ForCausalLM" || c.architecture == "HunYuanMoEV1ForCausalLM";
}

}  // namespace

bool IsGraniteMoe(const ModelConfig& c) {
  return c.architecture == "GraniteMoeForCausalLM" || c.architecture == "GraniteMoeSharedForCausalLM" ||
         c.architecture == "GraniteMoeHybridForCausalLM";
}

uint64_t HfBlockVector::numel() const {
  uint64_t n = 1;
  for (const uint64_t d : shape) n *= d;
  return n;
}

std::vector<HfBlockVector> HfBlockVectors(const ModelConfig& c, size_t layer) {
  std::vector<HfBlockVector> v;
  if (c.pre_norms) v.push_back({"input_layernorm.weight", &LayerWeights::attn_norm, {c.dim}});
  if (!c.pre_norms) {  // OLMo 2: the output norms alone
    v.push_back({"post_attention_layernorm.weight", &LayerWeights::attn_out_norm, {c.dim}});
    v.push_back({"post_feedforward_layernorm.weight", &LayerWeights::ffn_out_norm, {c.dim}});
  } else if (IsGlm4(c)) {  // GLM-4's names for Gemma 2's four norms
    v.push_back({"post_self_attn_layernorm.weight", &LayerWeights::attn_out_norm, {c.dim}});
    v.push_back({"post_attention_layernorm.weight", &LayerWeights::ffn_norm, {c.dim}});
    v.push_back({"post_mlp_layernorm.weight", &LayerWeights::ffn_out_norm, {c.dim}});
  } else if (c.sandwich_norms) {
    v.push_back({"post_attention_layernorm.weight", &LayerWeights::attn_out_norm, {c.dim}});
    v.push_back({"pre_feedforward_layernorm.weight", &LayerWeights::ffn_norm, {c.dim}});
    v.push_back({"post_feedforward_layernorm.weight", &LayerWeights::ffn_out_norm, {c.dim}});
  } else if (!c.parallel_block) {  // Cohere's parallel block has the input norm alone
    v.push_back({"post_attention_layernorm.weight", &LayerWeights::ffn_norm, {c.dim}});
  }
  if (c.qk_norm_per_head) {  // Cohere: [heads, head_dim]
    v.push_back({"self_attn.q_norm.weight", &LayerWeights::q_norm, {c.n_heads, c.head_dim}});
    v.push_back({"self_attn.k_norm.weight", &LayerWeights::k_norm, {c.n_kv_heads, c.head_dim}});
  } else if (c.qk_norm) {
    v.push_back({IsHunyuan(c) ? "self_attn.query_layernorm.weight" : "self_attn.q_norm.weight", &LayerWeights::q_norm,
                 {c.q_norm_dim()}});
    v.push_back({IsHunyuan(c) ? "self_attn.key_layernorm.weight" : "self_attn.k_norm.weight", &LayerWeights::k_norm,
                 {c.k_norm_dim()}});
  }
  if (c.mla()) {
    if (c.q_lora_rank > 0) v.push_back({"self_attn.q_a_layernorm.weight", &LayerWeights::q_a_norm, {c.q_lora_rank}});
    v.push_back({"self_attn.kv_a_layernorm.weight", &LayerWeights::kv_a_norm, {c.kv_lora_rank}});
  }
  if (c.attention_sinks) v.push_back({"self_attn.sinks", &LayerWeights::attn_sinks, {c.n_heads}, false});
  if (c.moe(layer)) {
    v.push_back({IsMixtral(c)       ? "block_sparse_moe.gate.weight"
                 : IsGptOss(c)     ? "mlp.router.weight"
                 : IsLlama4(c)     ? "feed_forward.router.weight"
                 : IsGraniteMoe(c) ? "block_sparse_moe.router.layer.weight"
                 : IsHunyuan(c)    ? "mlp.gate.wg.weight"
                                   : "mlp.gate.weight",
                 &LayerWeights::router, {c.n_experts, c.dim}, false});
    if (c.router_logit_bias)
      v.push_back({"mlp.router.bias", &LayerWeights::router_logit_bias, {c.n_experts}, false});
    if (c.shared_expert_ffn_dim > 0 && c.shared_expert_gated)
      v.push_back({"mlp.shared_expert_gate.weight", &LayerWeights::shared_gate, {1, c.dim}, false});
    if (c.router_bias && c.architecture == "Ernie4_5_MoeForCausalLM")  // [1, experts]
      v.push_back({"mlp.moe_statics.e_score_correction_bias", &LayerWeights::router_bias, {1, c.n_experts}, false});
    else if (c.router_bias && IsMixtral(c))
      v.push_back({"block_sparse_moe.e_score_correction_bias", &LayerWeights::router_bias, {c.n_experts}, false});
    else if (c.router_bias)
      v.push_back({"mlp.gate.e_score_correction_bias", &LayerWeights::router_bias, {c.n_experts}, false});
  }
  return v;
}

std::string HfLinearName(const ModelConfig& c, const std::string& name) {
  constexpr std::string_view kExperts = "mlp.experts.", kShared = "mlp.shared_experts.", kMlp = "mlp.";
  if (IsLlama4(c) && name.starts_with(kShared)) return "feed_forward.shared_expert." + name.substr(kShared.size());
  if (IsHunyuan(c) && name.starts_with(kShared)) return "mlp.shared_mlp." + name.substr(kShared.size());
  // Granite MoE's shared expert, and Granite 4.0's MLP where it has no experts
  if (IsGraniteMoe(c) && (name == "mlp.shared_experts.down_proj" || name == "mlp.down_proj"))
    return "shared_mlp.output_linear";
  if (IsLlama4(c) && name.starts_with(kMlp)) return "feed_forward." + name.substr(kMlp.size());
  if (!IsMixtral(c) || !name.starts_with(kExperts)) return name;
  const size_t dot = name.find('.', kExperts.size());
  const std::string_view proj = std::string_view(name).substr(dot + 1);
  const char* w = proj == "gate_proj" ? "w1" : proj == "up_proj" ? "w3" : "w2";
  return "block_sparse_moe.experts." + name.substr(kExperts.size(), dot + 1 - kExperts.size()) + w;
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

std::vector<float> VectorToCheckpoint(const ModelConfig& c, const HfBlockVector& v, const LayerWeights& layer) {
  return v.norm ? NormToCheckpoint(c, layer.*v.member) : layer.*v.member;
}

std::vector<float> VectorFromCheckpoint(const ModelConfig& c, const HfBlockVector& v, std::vector<float> stored) {
  return v.norm ? NormFromCheckpoint(c, std::move(stored)) : stored;
}

bool HasFusedQkv(const ModelConfig& c) { return c.architecture == "Phi3ForCausalLM"; }

bool HasFusedGateUp(const ModelConfig& c) {
  return c.architecture == "Phi3ForCausalLM" || c.architecture == "GlmForCausalLM" || IsGlm4(c);
}

// Qwen3-MoE's: Qwen3-VL-MoE's language model (a Qwen3-MoE checkpoint stores one linear per expert); Mistral 4 as the
// Hub and transformers store it.
bool HasStackedExperts(const ModelConfig& c) {
  return IsGptOss(c) || IsLlama4(c) || IsGraniteMoe(c) || c.architecture == "Qwen3MoeForCausalLM" ||
         c.architecture == "Mistral4ForCausalLM";
}

std::string HfExpertsPrefix(const ModelConfig& c) {
  return IsLlama4(c) ? "feed_forward.experts." : IsGraniteMoe(c) ? "block_sparse_moe." : "mlp.experts.";
}

bool HasFusedSharedGateUp(const ModelConfig& c) { return IsGraniteMoe(c); }

}  // namespace lowbit
