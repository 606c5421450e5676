#include "plan/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "io/hf_names.h"
#include "io/safetensors.h"
#include "io/stacked_experts.h"
#include "plan/presets.h"

namespace lowbit {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  enum Fill { kRandom, kOnes, kZeros } fill = kRandom;
};

// Every tensor a Hugging Face checkpoint of config `c` holds, named and shaped as lowbit's loader reads
// them (the same tables), so a synthetic folder cannot drift from what loads.
std::vector<TensorSpec> TensorsOf(const ModelConfig& c) {
  std::vector<TensorSpec> t{{"model.embed_tokens.weight", {c.vocab_size, c.dim}}};
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    for (const HfBlockVector& v : HfBlockVectors(c, l)) t.push_back({p + v.name, v.shape, v.norm ? TensorSpec::kOnes : TensorSpec::kRandom});
    const bool stacked = c.architecture == "GptOssForCausalLM";  // its checkpoints stack experts; the others need not
    if (stacked && c.moe(l))
      for (const auto& [name, shape] : StackedExpertShapes(c, p, StackedLayout{}))
        t.push_back({name, shape, name.ends_with("_bias") ? TensorSpec::kZeros : TensorSpec::kRandom});
    for (const LinearShape& s : BlockLinearShapes(c, l)) {
      if (stacked && s.name.starts_with("mlp.experts.")) continue;
      const std::string name = p + HfLinearName(c, s.name);
      t.push_back({name + ".weight", {s.rows, s.cols}});
      if (s.bias) t.push_back({name + ".bias", {s.rows}, TensorSpec::kZeros});
    }
  }
  t.push_back({"model.norm.weight", {c.dim}, TensorSpec::kOnes});
  if (!c.tie_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, c.dim}});
  return t;
}

// DeepSeek's latent-attention fields: V3's routing (sigmoid, 8 groups of which 4 are kept, scaled by 2.5)
// for deepseek-v3, V2-Lite's (greedy softmax) otherwise; YaRN as both ship it.
void DeepSeekFields(const ModelArch& a, nlohmann::json& j) {
  const bool v3 = a.name.starts_with("deepseek-v3");
  j["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  j["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  j.erase("head_dim");
  j.erase("num_local_experts");
  j["intermediate_size"] = a.ffn;  // the dense layers' MLP
  j["q_lora_rank"] = a.q_lora_rank > 0 ? nlohmann::json(a.q_lora_rank) : nlohmann::json(nullptr);
  j["kv_lora_rank"] = a.kv_lora_rank;
  j["qk_nope_head_dim"] = a.nope_head_dim;
  j["qk_rope_head_dim"] = a.rope_head_dim;
  j["v_head_dim"] = a.v_head_dim;
  j["n_routed_experts"] = a.n_experts;
  j["num_experts_per_tok"] = a.experts_per_token;
  j["n_shared_experts"] = a.shared_experts;
  j["moe_intermediate_size"] = a.expert_ffn;
  j["first_k_dense_replace"] = std::min(a.dense_layers, a.n_layers);
  j["topk_method"] = v3 ? "noaux_tc" : "greedy";
  j["routed_scaling_factor"] = v3 ? 2.5 : 1.0;
  j["norm_topk_prob"] = v3;
  if (v3) {
    j["n_group"] = 8;
    j["topk_group"] = 4;
  }
  j["rope_theta"] = 1e4;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096},
                       {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", v3 ? 1.0 : 0.707},
                       {"mscale_all_dim", v3 ? 1.0 : 0.707}};
  j["max_position_embeddings"] = 163840;
}

// GPT-OSS as openai/gpt-oss ships it in config.json: every other layer (the even ones) sliding, YaRN over
// 4096 positions with the ramp untruncated, the clamped SwiGLU's limit.
void GptOssFields(const ModelArch& a, nlohmann::json& j) {
  j["architectures"] = {"GptOssForCausalLM"};
  j["model_type"] = "gpt_oss";
  j["intermediate_size"] = a.expert_ffn;
  j.erase("num_experts");
  j.erase("moe_intermediate_size");
  j.erase("norm_topk_prob");
  j["num_local_experts"] = a.n_experts;
  j["attention_bias"] = true;
  j["sliding_window"] = a.sliding_window;
  nlohmann::json types = nlohmann::json::array();
  for (uint32_t i = 0; i < a.n_layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["rope_theta"] = 150000;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32}, {"beta_fast", 32}, {"beta_slow", 1},
                       {"original_max_position_embeddings", 4096}, {"truncate", false}};
  j["max_position_embeddings"] = 131072;
  j["swiglu_limit"] = 7.0;
}

// config.json of a preset: a Llama, Qwen2 or Qwen3, a Mixtral or Qwen3-MoE mixture of experts, a
// DeepSeek-V2/V3 or a GPT-OSS.
nlohmann::json ConfigJson(const ModelArch& a, DType dtype, uint64_t seed) {
  const bool moe = a.moe();
  const std::string family = a.qk_norm ? "qwen3" : a.qkv_bias ? "qwen2" : moe ? "mixtral" : "llama";
  nlohmann::json j = {
      {"architectures", {family == "qwen3" ? (moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM")
                         : family == "qwen2" ? "Qwen2ForCausalLM"
                         : family == "mixtral" ? "MixtralForCausalLM"
                                               : "LlamaForCausalLM"}},
      {"model_type", moe && family == "qwen3" ? "qwen3_moe" : family},
      {"hidden_size", a.hidden},
      {"intermediate_size", family == "mixtral" ? a.expert_ffn : a.ffn},
      {"num_hidden_layers", a.n_layers},
      {"num_attention_heads", a.n_heads},
      {"num_key_value_heads", a.n_kv_heads},
      {"head_dim", a.head_dim},
      {"vocab_size", a.vocab},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", a.name.starts_with("qwen") || moe ? 1e6 : a.name.starts_with("llama-3") ? 5e5 : 1e4},
      {"tie_word_embeddings", a.tied},
      {"hidden_act", "silu"},
      {"torch_dtype", dtype == DType::kF32 ? "float32" : dtype == DType::kBF16 ? "bfloat16" : "float16"},
      {"lowbit_synthetic", {{"preset", a.name}, {"seed", seed}}}};
  if (family == "mixtral") {
    j["num_local_experts"] = a.n_experts;
    j["num_experts_per_tok"] = a.experts_per_token;
  } else if (moe) {
    j["num_experts"] = a.n_experts;
    j["num_experts_per_tok"] = a.experts_per_token;
    j["moe_intermediate_size"] = a.expert_ffn;
    j["norm_topk_prob"] = true;
  }
  if (a.mla()) DeepSeekFields(a, j);
  if (a.attention_sinks) GptOssFields(a, j);
  return j;
}

// Uniform in [-a, a] with standard deviation 0.02 (a typical initialisation), from a counter-based
// hash so every element is independent of thread scheduling.
void Fill(const TensorSpec& spec, uint64_t seed, uint64_t index, DType dtype, std::byte* out, uint64_t n,
          ThreadPool& pool) {
  const float amplitude = 0.02f * std::sqrt(3.0f);
  const size_t width = DTypeSize(dtype);
  pool.ParallelFor(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      float v = spec.fill == TensorSpec::kOnes ? 1.0f : 0.0f;
      if (spec.fill == TensorSpec::kRandom) {
        const uint64_t h = SplitMix64(seed ^ SplitMix64(index * 0x100000001B3ull + i));
        v = (static_cast<float>(h >> 40) * 0x1p-24f * 2.0f - 1.0f) * amplitude;
      }
      if (dtype == DType::kF32) {
        std::memcpy(out + i * width, &v, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? Fp32ToBf16(v) : Fp32ToFp16(v);
        std::memcpy(out + i * width, &h, 2);
      }
    }
  });
}

}  // namespace

SynthResult WriteSynthModel(const SynthOptions& o, const std::filesystem::path& out) {
  SynthResult result;
  result.arch = FindPreset(o.preset);
  ModelArch& a = result.arch;
  if (!a.mla() && !a.attention_sinks && (a.shared_experts > 0 || a.dense_layers > 0 || (a.moe() && a.qkv_bias)))
    Fail("synth: preset '{}' is not a Llama-family model, a Mixtral / Qwen3-MoE mixture of experts, a DeepSeek or a "
         "GPT-OSS", a.name);
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16 && o.dtype != DType::kF16)
    Fail("synth: dtype {} is not one of F32, BF16, F16", DTypeName(o.dtype));
  if (o.layers > 0) a.n_layers = o.layers;

  const nlohmann::json config = ConfigJson(a, o.dtype, o.seed);
  const std::vector<TensorSpec> specs = TensorsOf(HfConfigFromJson(config, "synth: preset " + a.name));
  std::vector<std::vector<std::byte>> data(specs.size());
  std::vector<TensorToWrite> tensors;
  ThreadPool pool(o.threads);
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t n = 1;
    for (const uint64_t d : specs[i].shape) n *= d;
    data[i].resize(n * DTypeSize(o.dtype));
    Fill(specs[i], o.seed, i, o.dtype, data[i].data(), n, pool);
    tensors.push_back({specs[i].name, o.dtype, specs[i].shape, data[i]});
    result.parameters += n;
    result.bytes += data[i].size();
  }
  std::filesystem::create_directories(out);
  WriteSafetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
  WriteFileAtomic(out / "config.json", config.dump(2) + "\n");
  return result;
}

std::vector<std::pair<std::string, std::vector<uint64_t>>> SynthTensorShapes(const ModelArch& arch) {
  const nlohmann::json config = ConfigJson(arch, DType::kBF16, 0);
  std::vector<std::pair<std::string, std::vector<uint64_t>>> shapes;
  for (TensorSpec& t : TensorsOf(HfConfigFromJson(config, "synth: preset " + arch.name)))
    shapes.emplace_back(std::move(t.name), std::move(t.shape));
  return shapes;
}

nlohmann::json SynthJson(const SynthResult& result, const std::filesystem::path& out) {
  return {{"preset", result.arch.name}, {"layers", result.arch.n_layers}, {"parameters", result.parameters},
          {"bytes", result.bytes}, {"out", out.string()}};
}

}  // namespace lowbit
