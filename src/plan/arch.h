// The architecture numbers the planner needs: enough to list every weight matrix with its real
// shape and to size the KV cache. Covers dense Llama-family models (from a preset, a Hugging Face
// config.json or GGUF metadata), mixture-of-experts MLPs and DeepSeek's multi-head latent
// attention (MLA), which caches one compressed latent per token instead of K and V per head.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/config.h"

namespace lowbit {

struct ModelArch {
  std::string name;
  uint32_t n_layers = 0;
  uint32_t hidden = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t ffn = 0;       // dense MLP intermediate size
  uint32_t vocab = 0;
  bool tied = false;      // lm_head shares the embedding matrix
  bool qkv_bias = false;  // Qwen2: biases on q/k/v
  bool qk_norm = false;   // Qwen3: RMSNorm weights over each q and k head
  bool qk_norm_whole = false;  // OLMo 2, Command R+: q/k norm weights as wide as the projections
  uint32_t layer_norms = 2;    // hidden-wide norms per layer: input and post-attention; Gemma 2/3 and GLM-4 add
                               // two on the outputs, OLMo 2 has those alone, Cohere's parallel block one
  bool o_bias = false;           // GPT-OSS: a bias on o_proj
  bool attention_sinks = false;  // GPT-OSS: one learned sink logit per head
  bool expert_bias = false;      // GPT-OSS: biases on the router's logits and on every expert's projections
  bool router_bias = false;      // DeepSeek-V3: a score-correction bias per expert (e_score_correction_bias)
  // Sliding-window attention (Mistral, Gemma 2/3, Qwen's use_sliding_window): `window_layers` of the
  // layers attend to their last `sliding_window` positions and cache no more than that (Llama 4's chunked
  // layers: at most a chunk of them).
  uint32_t sliding_window = 0;
  uint32_t window_layers = 0;

  // Mixture of experts (n_experts == 0: dense). The first `dense_layers` layers keep a dense MLP of
  // `ffn`; every later layer routes each token to `experts_per_token` of `n_experts` experts and
  // always runs `shared_experts`, all of intermediate size `expert_ffn`.
  uint32_t n_experts = 0;
  uint32_t experts_per_token = 0;
  uint32_t shared_experts = 0;
  uint32_t shared_expert_ffn = 0;  // the shared experts' whole width when not shared_experts x expert_ffn (0)
  bool shared_expert_gate = false;  // Qwen2-MoE: a sigmoid gate vector on the shared expert
  uint32_t expert_ffn = 0;
  uint32_t dense_layers = 0;

  // Multi-head latent attention (kv_lora_rank == 0: ordinary multi-head / grouped-query
  // attention). Q goes through a rank-q_lora_rank bottleneck (0 = a plain projection).
  uint32_t q_lora_rank = 0;
  uint32_t kv_lora_rank = 0;
  uint32_t nope_head_dim = 0;  // per-head q/k dimensions without rotary embedding
  uint32_t rope_head_dim = 0;  // per-head q/k dimensions with rotary embedding (shared k for MLA)
  uint32_t v_head_dim = 0;

  // Published parameter counts (0 when unknown), kept to cross-check the shapes above.
  double published_total = 0;
  double published_active = 0;
  std::string source;  // where the numbers come from

  bool moe() const { return n_experts > 0; }
  bool mla() const { return kv_lora_rank > 0; }
};

// A ModelConfig as an architecture (GQA or latent attention; dense, or a mixture of experts).
ModelArch ArchFromConfig(const ModelConfig& config, std::string name);

// --model: a Hugging Face config.json, a folder holding one, or a .gguf file (metadata only; no
// tensor data is read). Errors name the path.
ModelArch ArchFromPath(const std::filesystem::path& path);

}  // namespace lowbit
