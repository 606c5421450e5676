#include "plan/arch.h"

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_model.h"

namespace lowbit {

ModelArch ArchFromConfig(const ModelConfig& config, std::string name) {
  ModelArch a;
  a.name = std::move(name);
  a.n_layers = config.n_layers;
  a.hidden = config.dim;
  a.n_heads = config.n_heads;
  a.n_kv_heads = config.n_kv_heads;
  a.head_dim = config.head_dim;
  a.ffn = config.ffn_dim;
  a.vocab = config.vocab_size;
  a.tied = config.tie_embeddings;
  a.qkv_bias = config.qkv_bias;
  a.qk_norm = config.qk_norm;
  a.qk_norm_whole = config.qk_norm_full || config.qk_norm_per_head;
  a.layer_norms = (config.pre_norms ? (config.parallel_block ? 1 : 2) : 0) + (config.sandwich_norms ? 2 : 0);
  a.o_bias = config.o_bias;
  a.attention_sinks = config.attention_sinks;
  a.expert_bias = config.expert_bias;
  a.router_bias = config.router_bias;
  a.source = config.architecture;
  // Llama 4's chunked layers hold at most a chunk, as a window would (never both: ModelConfig::Validate).
  a.sliding_window = config.sliding_window > 0 ? config.sliding_window : config.attention_chunk;
  for (uint32_t i = 0; i < config.n_layers; ++i) a.window_layers += config.sliding(i) || config.chunked(i) ? 1 : 0;
  if (config.mla()) {  // the preset's convention: a q/k head's width, every head its own
    a.n_kv_heads = config.n_heads;
    a.head_dim = config.qk_head_dim();
    a.q_lora_rank = config.q_lora_rank;
    a.kv_lora_rank = config.kv_lora_rank;
    a.nope_head_dim = config.qk_nope_dim;
    a.rope_head_dim = config.rope_dims();
    a.v_head_dim = config.v_head_dim;
  }
  if (config.n_experts > 0) {
    a.n_experts = config.n_experts;
    a.experts_per_token = config.experts_per_token;
    a.expert_ffn = config.expert_ffn_dim;
    // Qwen2-MoE's shared expert is a multiple of the experts' width (Qwen1.5-MoE: 4 x 1408, Qwen2-57B:
    // 8 x 2560), Granite MoE's need not be: the count rounds up, the width is exact.
    a.shared_experts = (config.shared_expert_ffn_dim + config.expert_ffn_dim - 1) / config.expert_ffn_dim;
    a.shared_expert_ffn = config.shared_expert_ffn_dim;
    a.shared_expert_gate = config.shared_expert_ffn_dim > 0 && config.shared_expert_gated;
    // Dense layers (Qwen's mlp_only_layers): the plan needs their number, not where they are.
    for (uint32_t i = 0; i < config.n_layers; ++i) a.dense_layers += config.moe(i) ? 0 : 1;
  }
  return a;
}

namespace {

ModelArch FromHfConfig(const std::filesystem::path& config_json, std::string name) {
  return ArchFromConfig(ReadHfConfig(config_json), std::move(name));
}

}  // namespace

ModelArch ArchFromPath(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const fs::path config = path / "config.json";
    if (!fs::exists(config))
      Fail("{}: folder has no config.json (expected a Hugging Face model folder)", path.string());
    const std::string name = path.filename().empty() ? path.parent_path().filename().string()
                                                     : path.filename().string();
    return FromHfConfig(config, name);
  }
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".gguf") {
    const GgufFile file = GgufFile::Open(path);
    return ArchFromConfig(ReadGgufConfig(file), path.stem().string());
  }
  if (path.extension() == ".json") {
    const fs::path parent = fs::absolute(path).parent_path();
    return FromHfConfig(path, parent.filename().string());
  }
  Fail("{}: unknown model input (expected config.json, a folder holding one, or a .gguf file)", path.string());
}

}  // namespace lowbit
