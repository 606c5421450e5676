// Llama-family model hyper-parameters, from Hugging Face config.json, GGUF metadata or a
// llama2.c header. One plain struct; Validate() checks the invariants the forward pass relies on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace lowbit {

enum class RopeStyle : uint8_t {
  kHalf,      // Hugging Face "rotate half": pairs (i, i + head_dim/2)
  kAdjacent,  // Meta / llama2.c / GGUF after llama.cpp's Q/K permutation: pairs (2i, 2i + 1)
};

struct RopeScaling {  // rope_scaling of type "llama3" (Llama 3.1+); factor 0 = none
  float factor = 0;
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  uint32_t original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "llama2.c", ...
  uint32_t vocab_size = 0;
  uint32_t dim = 0;          // hidden size
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t ffn_dim = 0;      // intermediate size
  uint32_t max_position = 2048;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kHalf;
  RopeScaling rope_scaling;
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;
  bool qkv_bias = false;     // Qwen2
  bool qk_norm = false;      // Qwen3: RMSNorm over each head of q and k, before RoPE
  int32_t bos_id = 1;
  int32_t eos_id = 2;

  uint32_t q_dim() const { return n_heads * head_dim; }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }
  // Throws Error naming `source` and the field when something is inconsistent.
  void Validate(const std::string& source) const;
};

// Reads a Hugging Face config.json (Llama / Mistral / Qwen2 / Qwen3). Unknown architectures are errors
// that list the supported ones.
ModelConfig ReadHfConfig(const std::filesystem::path& config_json);

}  // namespace lowbit
