#include "plan/presets.h"

#include <algorithm>
#include <cctype>
#include <tuple>

#include "core/error.h"

namespace lowbit {
namespace {

ModelArch Dense(const char* name, uint32_t layers, uint32_t hidden, uint32_t heads, uint32_t kv_heads,
                uint32_t ffn, uint32_t vocab, double published, const char* source) {
  ModelArch a;
  a.name = name;
  a.n_layers = layers;
  a.hidden = hidden;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = 128;  // every dense preset uses 128-wide heads
  a.ffn = ffn;
  a.vocab = vocab;
  a.published_total = a.published_active = published;
  a.source = source;
  return a;
}

std::vector<ModelArch> BuildPresets() {
  std::vector<ModelArch> p;
  // Hugging Face meta-llama/Llama-2-*-hf config.json; counts from the safetensors index.
  p.push_back(Dense("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 6738415616.0, "meta-llama/Llama-2-7b-hf"));
  p.push_back(Dense("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 13015864320.0, "meta-llama/Llama-2-13b-hf"));
  p.push_back(Dense("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 68976648192.0, "meta-llama/Llama-2-70b-hf"));
  // meta-llama/Meta-Llama-3-8B, -70B and Llama-3.1-405B config.json (405B exists from 3.1 on).
  p.push_back(Dense("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8030261248.0, "meta-llama/Meta-Llama-3-8B"));
  p.push_back(Dense("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 70553706496.0, "meta-llama/Meta-Llama-3-70B"));
  p.push_back(Dense("llama-3-405b", 126, 16384, 128, 8, 53248, 128256, 405853388800.0, "meta-llama/Llama-3.1-405B"));
  // Qwen/Qwen2.5-7B and -72B config.json: untied embeddings, biases on q/k/v.
  p.push_back(Dense("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 7615616512.0, "Qwen/Qwen2.5-7B"));
  p.back().qkv_bias = true;
  // Qwen/Qwen3-8B config.json: q/k norms, no biases, untied.
  p.push_back(Dense("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 8190735360.0, "Qwen/Qwen3-8B"));
  p.back().qk_norm = true;
  p.push_back(Dense("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 72706203648.0, "Qwen/Qwen2.5-72B"));
  p.back().qkv_bias = true;
  // mistralai/Mistral-7B-v0.1 config.json.
  ModelArch mistral = Dense("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 7241732096.0, "mistralai/Mistral-7B-v0.1");
  mistral.sliding_window = 4096;  // "sliding_window": 4096, every layer
  mistral.window_layers = 32;
  p.push_back(mistral);
  // mistralai/Mixtral-8x7B-v0.1 config.json: 8 experts of 14336, top-2, every layer MoE.
  // Mistral AI quotes 46.7B total and 12.9B active parameters.
  ModelArch mixtral = Dense("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 46702792704.0, "mistralai/Mixtral-8x7B-v0.1");
  mixtral.n_experts = 8;
  mixtral.experts_per_token = 2;
  mixtral.expert_ffn = 14336;
  mixtral.published_active = 12.9e9;
  p.push_back(mixtral);
  // Qwen/Qwen3-30B-A3B config.json: q/k norms, 128 experts of 768, top-8 renormalized, every layer MoE.
  // 30,532,122,624 parameters (the safetensors index's total), 3.3B active.
  ModelArch qwen3_moe = Dense("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 30532122624.0, "Qwen/Qwen3-30B-A3B");
  qwen3_moe.qk_norm = true;
  qwen3_moe.n_experts = 128;
  qwen3_moe.experts_per_token = 8;
  qwen3_moe.expert_ffn = 768;
  qwen3_moe.published_active = 3.3e9;
  p.push_back(qwen3_moe);
  // deepseek-ai/DeepSeek-V3 config.json and the technical report (arXiv 2412.19437): 61 layers,
  // the first 3 dense (18432), then 256 routed experts of 2048 (top-8) + 1 shared; MLA with
  // q_lora_rank 1536, kv_lora_rank 512, 128 heads of 128 (nope) + 64 (rope), v_head_dim 128.
  // 671B total / 37B active (the checkpoint's extra 14B multi-token-prediction module is not
  // used for ordinary decoding and is not counted).
  ModelArch ds = Dense("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 671e9, "deepseek-ai/DeepSeek-V3");
  ds.head_dim = 192;  // nope + rope, the q/k width per head
  ds.n_experts = 256;
  ds.experts_per_token = 8;
  ds.shared_experts = 1;
  ds.expert_ffn = 2048;
  ds.dense_layers = 3;
  ds.q_lora_rank = 1536;
  ds.kv_lora_rank = 512;
  ds.nope_head_dim = 128;
  ds.rope_head_dim = 64;
  ds.v_head_dim = 128;
  ds.router_bias = true;
  ds.published_active = 37e9;
  p.push_back(ds);
  // deepseek-ai/DeepSeek-V2-Lite config.json (arXiv 2405.04434): 27 layers, the first dense (10944), then 64
  // routed experts of 1408 (top-6) + 2 shared; MLA without the q bottleneck, kv_lora_rank 512, 16 heads of
  // 128 (nope) + 64 (rope), v_head_dim 128. Published as 15.7B total, 2.4B active.
  ModelArch lite = Dense("deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400, 15.7e9, "deepseek-ai/DeepSeek-V2-Lite");
  lite.head_dim = 192;
  lite.n_experts = 64;
  lite.experts_per_token = 6;
  lite.shared_experts = 2;
  lite.expert_ffn = 1408;
  lite.dense_layers = 1;
  lite.kv_lora_rank = 512;
  lite.nope_head_dim = 128;
  lite.rope_head_dim = 64;
  lite.v_head_dim = 128;
  lite.published_active = 2.4e9;
  p.push_back(lite);
  // openai/gpt-oss-20b and -120b config.json and model card: 24 / 36 layers of width 2880, 64 query heads and 8
  // KV heads of 64, every other layer (the even ones) a 128-token sliding window; 32 / 128 experts of 2880,
  // top-4, with biases, as do q/k/v/o; a sink per head; untied 201088-token embeddings. 20.91B / 116.83B
  // parameters, 3.61B / 5.13B active (the model card's count leaves the embedding table out).
  for (const auto& [name, source, layers, experts, total, active] :
       {std::tuple{"gpt-oss-20b", "openai/gpt-oss-20b", 24u, 32u, 20914757184.0, 3.61e9},
        std::tuple{"gpt-oss-120b", "openai/gpt-oss-120b", 36u, 128u, 116829156672.0, 5.13e9}}) {
    ModelArch g = Dense(name, layers, 2880, 64, 8, 2880, 201088, total, source);
    g.head_dim = 64;
    g.qkv_bias = g.o_bias = g.attention_sinks = g.expert_bias = true;
    g.sliding_window = 128;
    g.window_layers = layers / 2;
    g.n_experts = experts;
    g.experts_per_token = 4;
    g.expert_ffn = 2880;
    g.published_active = active;
    p.push_back(g);
  }
  return p;
}

// Lower case without dashes, so "Llama2-7B" finds "llama-2-7b".
std::string Canonical(std::string_view s) {
  std::string out;
  for (const unsigned char c : s)
    if (c != '-') out += static_cast<char>(std::tolower(c));
  return out;
}

}  // namespace

const std::vector<ModelArch>& ModelPresets() {
  static const std::vector<ModelArch> presets = BuildPresets();
  return presets;
}

std::string KnownPresetNames() {
  std::string list;
  for (const ModelArch& a : ModelPresets()) list += (list.empty() ? "" : ", ") + a.name;
  return list;
}

const ModelArch& FindPreset(std::string_view name) {
  const std::string want = Canonical(name);
  for (const ModelArch& a : ModelPresets())
    if (Canonical(a.name) == want) return a;
  Fail("unknown model preset '{}' (known: {})", name, KnownPresetNames());
}

}  // namespace lowbit
