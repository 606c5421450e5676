#include "io/gguf_deepseek.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>

#include "core/error.h"
#include "core/json_util.h"

namespace lowbit {
namespace {

// llama_expert_gating_func_type
constexpr uint32_t kGatingSoftmax = 1, kGatingSigmoid = 2;

// GLM-4.7-Flash's vocabulary, by which llama.cpp's deepseek2 recognises its files.
constexpr uint32_t kGlm47FlashVocab = 154880;

// ggml's YaRN ramp ends (llama.cpp reads no key for them: hparams.yarn_beta_fast / slow).
constexpr float kLlamaCppBetaFast = 32, kLlamaCppBetaSlow = 1;

// The leading dense layers of a DeepSeek model (first_k_dense_replace), or -1 when the sparse layers are
// not "all after a dense prefix", the only layout llama.cpp's deepseek2 has.
int LeadingDenseLayers(const ModelConfig& c) {
  if (c.n_experts == 0) return static_cast<int>(c.n_layers);
  uint32_t dense = 0;
  while (dense < c.n_layers && !c.moe(dense)) ++dense;
  for (uint32_t i = dense; i < c.n_layers; ++i)
    if (!c.moe(i)) return -1;
  return static_cast<int>(dense);
}

// YaRN's mscale_all_dim as the softmax scale holds it: query_scale = mscale(factor, all_dims)^2 / sqrt(qk_head_dim).
double MscaleAllDims(const ModelConfig& c) {
  const double factor = c.rope_scaling.factor;
  const double m = std::sqrt(static_cast<double>(c.attention_scale()) * std::sqrt(static_cast<double>(c.qk_head_dim())));
  return factor > 1 ? (m - 1) / (0.1 * std::log(factor)) : 0.0;
}

// The routing fields DeepseekV2/V3Config and Glm4MoeConfig name alike, for a file's layout (dense layers first).
void WriteRoutingJson(nlohmann::ordered_json& j, const ModelConfig& c) {
  const int dense = LeadingDenseLayers(c);
  LOWBIT_CHECK(dense >= 0);  // a deepseek2 or glm4moe file's layout
  j["n_routed_experts"] = c.n_experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["n_shared_experts"] = c.shared_expert_ffn_dim / c.expert_ffn_dim;
  j["moe_intermediate_size"] = c.expert_ffn_dim;
  j["first_k_dense_replace"] = dense;
  j["routed_scaling_factor"] = ShortestDecimal(c.routed_scale);
  j["n_group"] = std::max(c.expert_groups, 1u);
  j["topk_group"] = std::max(c.expert_groups_used, 1u);
}

// DeepSeek-V3's routing (DeepseekV3ForCausalLM, Glm4MoeForCausalLM): sigmoid scores corrected by exp_probs_b.
void WriteSigmoidRoutingJson(nlohmann::ordered_json& j, const ModelConfig& c, const std::string& source,
                             const std::string& arch) {
  if (c.router_scoring != RouterScoring::kSigmoid || !c.router_bias)
    Fail("{}: key '{}.expert_gating_func' / tensor 'blk.{}.exp_probs_b.bias': {} chooses experts by sigmoid scores "
         "corrected by a bias, which this file does not have", source, arch, LeadingDenseLayers(c),
         j["architectures"][0].get<std::string>());
  j["norm_topk_prob"] = c.norm_expert_weights;
  j["num_nextn_predict_layers"] = 0;
}

}  // namespace

void CheckGlm4MoeExportable(const ModelConfig& c, const std::string& source) {
  if (c.n_experts == 0 || LeadingDenseLayers(c) < 0)
    Fail("{}: llama.cpp's glm4moe runs experts in every layer after a dense prefix (first_k_dense_replace)", source);
  if (!c.router_bias || c.router_scoring != RouterScoring::kSigmoid)
    Fail("{}: llama.cpp's glm4moe routes by sigmoid scores with exp_probs_b", source);
  if (c.shared_expert_ffn_dim % c.expert_ffn_dim != 0 || c.shared_expert_gated)
    Fail("{}: llama.cpp's glm4moe needs n_shared_experts ungated shared experts of moe_intermediate_size", source);
  if (c.expert_groups > 1 && c.expert_groups_used < c.expert_groups)
    Fail("{}: llama.cpp's glm4moe routes without expert groups; this model keeps {} of {} (topk_group, n_group)", source,
         c.expert_groups_used, c.expert_groups);
  if (c.rope_style != RopeStyle::kHalf || c.o_bias || c.qk_norm_full || c.sliding_window > 0)
    Fail("{}: llama.cpp's glm4moe rotates halves, has no o_proj bias, per-head q/k norms only and no sliding window",
         source);
}

void WriteGlm4MoeHfConfig(nlohmann::ordered_json& j, const ModelConfig& c, const std::string& source) {
  if (c.n_experts == 0 || LeadingDenseLayers(c) < 0)
    Fail("{}: key 'glm4moe.expert_count': Glm4MoeForCausalLM has experts in every layer after a dense prefix", source);
  WriteRoutingJson(j, c);
  WriteSigmoidRoutingJson(j, c, source, "glm4moe");
  j["attention_bias"] = c.qkv_bias;  // q/k/v's; o_proj has none
  j["use_qk_norm"] = c.qk_norm;
  j["partial_rotary_factor"] = ShortestDecimal(static_cast<float>(c.rope_dims()) / c.head_dim);
}

void CheckDeepSeek2Exportable(const ModelConfig& c, const std::string& source) {
  if (!c.mla()) Fail("{}: llama.cpp's deepseek2 runs latent attention; this model has none", source);
  if (c.rope_style != RopeStyle::kAdjacent)
    Fail("{}: llama.cpp's deepseek2 rotates adjacent pairs; this model rotates halves (rope_interleave: false)",
         source);
  const RopeScaling& s = c.rope_scaling;
  const bool yarn = s.type == RopeScalingType::kYarn && s.factor > 1;
  if (s.type != RopeScalingType::kNone && s.type != RopeScalingType::kYarn)
    Fail("{}: llama.cpp's deepseek2 takes YaRN RoPE scaling only", source);
  if (yarn) {
    if (std::abs(s.attention_factor - 1) > 1e-6f)
      Fail("{}: rope_scaling: YaRN attention factor {} (mscale differs from mscale_all_dim); llama.cpp's deepseek2 "
           "takes them equal and would scale attention differently", source, s.attention_factor);
    if (s.beta_fast != kLlamaCppBetaFast || s.beta_slow != kLlamaCppBetaSlow || !s.truncate)
      Fail("{}: rope_scaling: llama.cpp's YaRN ramp is beta_fast 32, beta_slow 1, truncated; this model's is {}, {}{}",
           source, s.beta_fast, s.beta_slow, s.truncate ? "" : ", not truncated");
    if (std::abs(MscaleAllDims(c)) < 1e-6)
      Fail("{}: rope_scaling: YaRN without mscale_all_dim is scaled differently by llama.cpp's deepseek2", source);
  } else if (std::abs(c.attention_scale() * std::sqrt(static_cast<float>(c.qk_head_dim())) - 1) > 1e-5f) {
    Fail("{}: the attention scale {} is not 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), all llama.cpp's deepseek2 "
         "applies without YaRN", source, c.attention_scale());
  }
  if (c.attn_temperature_floor > 0 && !c.attn_temperature_every_layer)
    Fail("{}: llama.cpp's deepseek2 scales every layer's query by its temperature, not some layers'", source);
  if (LeadingDenseLayers(c) < 0)
    Fail("{}: llama.cpp's deepseek2 has dense layers only before the first MoE layer (first_k_dense_replace); "
         "this model interleaves them (moe_layer_freq)", source);
  if (c.n_experts == 0) return;
  if (c.shared_expert_ffn_dim == 0 || c.shared_expert_ffn_dim % c.expert_ffn_dim != 0 || c.shared_expert_gated)
    Fail("{}: llama.cpp's deepseek2 needs n_shared_experts ungated shared experts of moe_intermediate_size", source);
  if (c.expert_groups > 1 && c.group_score == GroupScore::kBestExpert)
    std::fprintf(stderr,
                 "lowbit: warning: %s: llama.cpp scores expert groups by their best two experts (DeepSeek-V3's rule); "
                 "this model (group_limited_greedy) chose by the best one, so llama.cpp may route some tokens to "
                 "other groups\n", source.c_str());
}

void SetGatingFunc(GgufWriter& out, const ModelConfig& c, const std::string& arch) {
  out.Set(arch + ".expert_gating_func", c.router_scoring == RouterScoring::kSigmoid ? kGatingSigmoid : kGatingSoftmax);
}

RouterScoring ReadGatingFunc(const GgufFile& f, const std::string& arch, RouterScoring default_scoring) {
  const std::string key = arch + ".expert_gating_func";
  const uint32_t gating =
      f.GetU32Or(key, default_scoring == RouterScoring::kSigmoid ? kGatingSigmoid : kGatingSoftmax);
  if (gating != kGatingSoftmax && gating != kGatingSigmoid)
    Fail("{}: key '{}' = {} is not supported (1 softmax, 2 sigmoid)", f.path().string(), key, gating);
  return gating == kGatingSigmoid ? RouterScoring::kSigmoid : RouterScoring::kSoftmax;
}

void SetDeepSeekRoutingMetadata(GgufWriter& out, const ModelConfig& c, const std::string& arch) {
  const std::string a = arch + ".";
  out.Set(a + "leading_dense_block_count", static_cast<uint32_t>(LeadingDenseLayers(c)));
  out.Set(a + "expert_shared_count", c.n_experts ? c.shared_expert_ffn_dim / c.expert_ffn_dim : 0);
  if (c.n_experts == 0) return;
  out.Set(a + "expert_weights_scale", c.routed_scale);
  out.Set(a + "expert_weights_norm", c.norm_expert_weights);
  SetGatingFunc(out, c, arch);
}

void SetDeepSeek2Metadata(GgufWriter& out, const ModelConfig& c, const std::string& arch) {
  const std::string a = arch + ".";
  const uint32_t rope = c.rope_dims();
  out.Set(a + "vocab_size", c.vocab_size);
  // llama.cpp reads q_lora_rank unless the model has V2-Lite's 26 or 27 layers; 0 = a plain q projection.
  out.Set(a + "attention.q_lora_rank", c.q_lora_rank);
  out.Set(a + "attention.kv_lora_rank", c.kv_lora_rank);
  out.Set(a + "attention.key_length", c.kv_lora_rank + rope);  // the cached latent: multi-query attention
  out.Set(a + "attention.value_length", c.kv_lora_rank);
  out.Set(a + "attention.key_length_mla", c.qk_head_dim());
  out.Set(a + "attention.value_length_mla", c.v_head_dim);
  out.Set(a + "rope.dimension_count", rope);
  if (c.n_experts == 0) out.Set(a + "expert_feed_forward_length", c.ffn_dim);  // required; the MoE keys have it
  SetDeepSeekRoutingMetadata(out, c, arch);
  if (c.n_experts > 0 && c.expert_groups > 0) {
    out.Set(a + "expert_group_count", c.expert_groups);
    out.Set(a + "expert_group_used_count", c.expert_groups_used);
  }
  if (c.attn_temperature_floor > 0) {  // Mistral 4, as llama.cpp reads Mistral Large 3's files
    out.Set(a + "attention.temperature_scale", c.attn_temperature_scale);
    out.Set(a + "attention.temperature_length", c.attn_temperature_floor);
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kYarn && s.factor > 1) {
    out.Set(a + "rope.scaling.type", std::string("yarn"));
    out.Set(a + "rope.scaling.factor", s.factor);
    out.Set(a + "rope.scaling.original_context_length", s.original_max_position);
    out.Set(a + "rope.scaling.yarn_beta_fast", s.beta_fast);
    out.Set(a + "rope.scaling.yarn_beta_slow", s.beta_slow);
    // The converter writes 0.1 x mscale_all_dim and llama.cpp divides it back out (TAG_DEEPSEEK2_YARN_LOG_MUL_FIX).
    out.Set(a + "rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * MscaleAllDims(c)));
  }
}

std::vector<float> GgufLatentKeys(const ModelConfig& c, const Linear& kv_b) {
  const uint64_t nope = c.qk_nope_dim, lora = c.kv_lora_rank, per_head = nope + c.v_head_dim;
  std::vector<float> keys(c.n_heads * lora * nope), row(lora), scratch(lora);
  for (uint64_t h = 0; h < c.n_heads; ++h)
    for (uint64_t i = 0; i < nope; ++i) {
      InputOrderRow(kv_b, h * per_head + i, scratch, row);
      for (uint64_t j = 0; j < lora; ++j) keys[(h * lora + j) * nope + i] = row[j];
    }
  return keys;
}

std::vector<float> GgufLatentValues(const ModelConfig& c, const Linear& kv_b) {
  const uint64_t nope = c.qk_nope_dim, lora = c.kv_lora_rank, v = c.v_head_dim;
  std::vector<float> values(c.n_heads * v * lora), scratch(lora);
  for (uint64_t h = 0; h < c.n_heads; ++h)
    for (uint64_t r = 0; r < v; ++r)
      InputOrderRow(kv_b, h * (nope + v) + nope + r, scratch, std::span(&values[(h * v + r) * lora], lora));
  return values;
}

DenseMatrix LatentKvFromGguf(const ModelConfig& c, const std::vector<float>& keys, const std::vector<float>& values) {
  const uint64_t nope = c.qk_nope_dim, lora = c.kv_lora_rank, v = c.v_head_dim;
  LOWBIT_CHECK(keys.size() == c.n_heads * lora * nope && values.size() == c.n_heads * v * lora);
  DenseMatrix kv_b{c.n_heads * (nope + v), lora, std::vector<float>(c.n_heads * (nope + v) * lora)};
  for (uint64_t h = 0; h < c.n_heads; ++h) {
    float* head = &kv_b.values[h * (nope + v) * lora];
    for (uint64_t i = 0; i < nope; ++i)
      for (uint64_t j = 0; j < lora; ++j) head[i * lora + j] = keys[(h * lora + j) * nope + i];
    std::copy_n(&values[h * v * lora], v * lora, head + nope * lora);
  }
  return kv_b;
}

void WriteDeepSeekHfConfig(nlohmann::ordered_json& j, const ModelConfig& c, const std::string& source) {
  using Json = nlohmann::ordered_json;
  const std::string p = "deepseek2.";
  const bool v3 = c.router_scoring == RouterScoring::kSigmoid;
  if (v3) {
    j["architectures"] = {"DeepseekV3ForCausalLM"};
    j["model_type"] = "deepseek_v3";
  }
  j["num_key_value_heads"] = c.n_heads;
  j["head_dim"] = c.rope_dims();  // transformers' DeepSeek configs: the rotary width
  j["q_lora_rank"] = c.q_lora_rank ? Json(c.q_lora_rank) : Json();
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_dim;
  j["qk_rope_head_dim"] = c.rope_dims();
  j["v_head_dim"] = c.v_head_dim;
  if (v3) j["rope_interleave"] = true;  // llama.cpp's deepseek2 rotates adjacent pairs, as V2 always does

  // Mistral 4: a query temperature, or softmax scores renormalized, which DeepseekV2ForCausalLM never does
  const bool mistral4 = c.architecture == "gguf:mistral4" || c.attn_temperature_floor > 0;
  if (mistral4) {
    j["architectures"] = {"Mistral4ForCausalLM"};
    j["model_type"] = "mistral4";
    j["rope_interleave"] = true;
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kYarn && s.factor > 1) {
    const double mscale = MscaleAllDims(c);
    if (std::abs(s.attention_factor - 1) > 1e-6f || std::abs(mscale) < 1e-6)
      Fail("{}: key '{}rope.scaling.yarn_log_multiplier' is absent (or '{}rope.scaling.attn_factor' is not 1): "
           "transformers' DeepSeek takes YaRN's magnitude from mscale and mscale_all_dim, which such a file does "
           "not give", source, p, p);
    // The file holds 0.1 x mscale_all_dim as a float; six digits give back the config's value (0.707, 1.0).
    const double decimal = std::stod(fmt::format("{:.6g}", mscale));
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", ShortestDecimal(s.factor)},
                         {"original_max_position_embeddings", s.original_max_position},
                         {"beta_fast", s.beta_fast},
                         {"beta_slow", s.beta_slow},
                         {"mscale", decimal},
                         {"mscale_all_dim", decimal}};
  } else if (s.type != RopeScalingType::kNone) {
    Fail("{}: key '{}rope.scaling.type': transformers' DeepSeek takes YaRN scaling only", source, p);
  }

  if (c.n_experts == 0) {
    j["n_routed_experts"] = nullptr;  // every layer dense (the config's default would be 64 experts)
    return;
  }
  WriteRoutingJson(j, c);
  if (mistral4) {  // Mistral4TopkRouter: softmax scores, groups by their best two (llama.cpp's rule)
    j["norm_topk_prob"] = c.norm_expert_weights;
    return;
  }
  j["moe_layer_freq"] = 1;
  j["scoring_func"] = v3 ? "sigmoid" : "softmax";
  if (v3) {
    WriteSigmoidRoutingJson(j, c, source, "deepseek2");
    j["topk_method"] = "noaux_tc";
  } else {
    if (c.norm_expert_weights)
      Fail("{}: key '{}expert_weights_norm' is true: DeepseekV2ForCausalLM (softmax gating) never renormalises "
           "the chosen experts' weights", source, p);
    j["topk_method"] = c.expert_groups > 1 ? "group_limited_greedy" : "greedy";
    if (c.expert_groups > 1)
      std::fprintf(stderr,
                   "lowbit: warning: %s: llama.cpp scores expert groups by their best two experts; "
                   "DeepseekV2ForCausalLM (group_limited_greedy) by the best one, so it may route some tokens to "
                   "other groups than llama.cpp did\n", source.c_str());
  }
}

void ReadDeepSeekRoutingKeys(const GgufFile& f, const std::string& arch, RouterScoring default_scoring,
                             ModelConfig& c) {
  const std::string p = arch + ".", source = f.path().string();
  c.n_experts = f.GetU32Or(p + "expert_count", 0);
  const uint32_t dense = f.GetU32Or(p + "leading_dense_block_count", c.n_experts ? 0 : c.n_layers);
  if (c.n_experts == 0) {
    if (dense < c.n_layers) Fail("{}: key '{}expert_count' must be positive with MoE layers", source, p);
    return;
  }
  c.experts_per_token = f.GetU32(p + "expert_used_count");
  c.expert_ffn_dim = f.GetU32(p + "expert_feed_forward_length");
  c.shared_expert_ffn_dim = f.GetU32(p + "expert_shared_count") * c.expert_ffn_dim;
  c.shared_expert_gated = false;
  c.routed_scale = f.GetF32Or(p + "expert_weights_scale", 0.0f);
  if (c.routed_scale == 0) c.routed_scale = 1;  // llama.cpp: absent or 0 = no scaling
  c.norm_expert_weights = f.GetBoolOr(p + "expert_weights_norm", false);
  c.router_scoring = ReadGatingFunc(f, arch, default_scoring);
  if (dense > c.n_layers) Fail("{}: key '{}leading_dense_block_count' ({}) exceeds the {} layers", source, p, dense,
                               c.n_layers);
  c.sparse_layers.assign(c.n_layers, 1);
  for (uint32_t i = 0; i < dense; ++i) c.sparse_layers[i] = 0;
  if (dense == 0) c.sparse_layers.clear();
  c.router_bias = dense < c.n_layers && f.FindTensor(fmt::format("blk.{}.exp_probs_b.bias", dense)) != nullptr;
}

void ReadDeepSeek2Keys(const GgufFile& f, ModelConfig& c, const std::string& arch) {
  const std::string p = arch + ".", source = f.path().string();
  const uint32_t rope = c.rope_dims();
  c.rope_style = RopeStyle::kAdjacent;  // llama.cpp runs deepseek2 with LLAMA_ROPE_TYPE_NORM
  c.q_lora_rank = f.GetU32Or(p + "attention.q_lora_rank", 0);
  c.kv_lora_rank = f.GetU32(p + "attention.kv_lora_rank");
  if (c.n_kv_heads != 1) Fail("{}: key '{}attention.head_count_kv' must be 1 in deepseek2 (the latent)", source, p);
  if (rope >= c.head_dim) Fail("{}: key '{}rope.dimension_count' ({}) leaves no room for a latent", source, p, rope);
  uint32_t k_mla = c.head_dim, v_mla = f.GetU32Or(p + "attention.value_length", c.head_dim);
  if (f.Find(p + "attention.key_length_mla")) {  // the split attn_k_b / attn_v_b
    k_mla = f.GetU32(p + "attention.key_length_mla");
    v_mla = f.GetU32(p + "attention.value_length_mla");
    if (c.head_dim != c.kv_lora_rank + rope || f.GetU32Or(p + "attention.value_length", 0) != c.kv_lora_rank)
      Fail("{}: keys '{}attention.key_length' / 'value_length' ({}, {}) must be kv_lora_rank + rope ({}) and "
           "kv_lora_rank ({})", source, p, c.head_dim, f.GetU32Or(p + "attention.value_length", 0),
           c.kv_lora_rank + rope, c.kv_lora_rank);
  }
  if (k_mla <= rope) Fail("{}: the query/key head width {} must exceed the rotary dimensions {}", source, k_mla, rope);
  c.qk_nope_dim = k_mla - rope;
  c.v_head_dim = v_mla;
  c.head_dim = c.kv_lora_rank + rope;

  // YaRN as llama.cpp applies it to deepseek2 (llama-context.cpp, models/deepseek2.cpp): with a log multiplier
  // (0.1 x mscale_all_dim) the RoPE magnitude is 1 and scores are scaled by mscale(factor, mscale_all_dim)^2;
  // without one, both by mscale(factor, 1).
  double score_mscale = 1;
  if (c.rope_scaling.type == RopeScalingType::kYarn) {
    RopeScaling& s = c.rope_scaling;
    s.original_max_position = f.GetU32Or(p + "rope.scaling.original_context_length", c.max_position);
    s.beta_fast = kLlamaCppBetaFast;
    s.beta_slow = kLlamaCppBetaSlow;
    s.truncate = true;
    const double log_mul = f.GetF32Or(p + "rope.scaling.yarn_log_multiplier", 0.0f) / 0.1;
    const double magnitude = log_mul != 0 ? 1.0 : YarnMscale(s.factor, 1.0);
    s.attention_factor = static_cast<float>(magnitude * f.GetF32Or(p + "rope.scaling.attn_factor", 1.0f));
    score_mscale = s.attention_factor * YarnMscale(s.factor, log_mul);
  }
  c.query_scale = static_cast<float>(score_mscale * score_mscale / std::sqrt(static_cast<double>(k_mla)));

  // Without expert_gating_func llama.cpp gates by softmax (DeepSeek-V2 / V2.5 files), but by sigmoid in files shaped
  // as GLM-4.7-Flash (47 blocks, or 48 with its prediction block, and 154880 tokens), which its converter first
  // wrote without the key.
  const uint32_t blocks = c.n_layers + c.nextn_layers;
  const bool glm47_flash = (blocks == 47 || blocks == 48) && c.vocab_size == kGlm47FlashVocab;
  ReadDeepSeekRoutingKeys(f, arch, glm47_flash ? RouterScoring::kSigmoid : RouterScoring::kSoftmax, c);
  if (const uint32_t groups = f.GetU32Or(p + "expert_group_count", 0); c.n_experts > 0 && groups > 1) {
    c.expert_groups = groups;
    c.expert_groups_used = f.GetU32(p + "expert_group_used_count");
    c.group_score = GroupScore::kBestTwoSum;  // llama.cpp's rule, whatever model the file came from
  }
  // Mistral Large 3's files: every layer's query scaled after RoPE by 1 + scale * log(1 + floor(position / length))
  if (const float scale = f.GetF32Or(p + "attention.temperature_scale", 0.0f); scale != 0) {
    c.attn_temperature_scale = scale;
    c.attn_temperature_floor = f.GetU32Or(p + "attention.temperature_length", 0);
    c.attn_temperature_every_layer = true;
    if (c.attn_temperature_floor == 0)
      Fail("{}: key '{}attention.temperature_length' must be positive beside '{}attention.temperature_scale'", source,
           p, p);
  }
}

}  // namespace lowbit
