#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json_util.h"

namespace lowbit {

void ModelConfig::Validate(const std::string& source) const {
  auto need = [&](bool ok, const char* what) {
    if (!ok) Fail("{}: invalid model config: {}", source, what);
  };
  need(vocab_size > 0, "vocab_size must be positive");
  need(dim > 0, "hidden_size must be positive");
  need(n_layers > 0, "num_hidden_layers must be positive");
  need(n_heads > 0 && n_kv_heads > 0, "attention head counts must be positive");
  if (n_heads % n_kv_heads != 0)
    Fail("{}: invalid model config: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source,
         n_heads, n_kv_heads);
  need(head_dim > 0 && head_dim % 2 == 0, "head_dim must be positive and even");
  need(ffn_dim > 0, "intermediate_size must be positive");
  // Far above any real model, and low enough that no product of two of them overflows 64 bits.
  auto at_most = [&](uint64_t value, uint64_t limit, const char* field) {
    if (value > limit) Fail("{}: invalid model config: {} is {}, more than the {} lowbit supports", source, field, value, limit);
  };
  at_most(vocab_size, 1u << 24, "vocab_size");
  at_most(dim, 1u << 18, "hidden_size");
  at_most(ffn_dim, 1u << 20, "intermediate_size");
  at_most(n_layers, 1u << 12, "num_hidden_layers");
  at_most(n_heads, 1u << 12, "num_attention_heads");
  at_most(head_dim, 1u << 12, "head_dim");
  need(norm_eps > 0, "rms_norm_eps must be positive");
  need(rope_theta > 0, "rope_theta must be positive");
  need(rope_dims() % 2 == 0 && rope_dims() <= head_dim, "the rotary dimension count must be even and at most head_dim");
  if (rope_scaling.type == RopeScalingType::kLongRope &&
      (rope_scaling.short_factor.size() != rope_dims() / 2 || rope_scaling.long_factor.size() != rope_dims() / 2))
    Fail("{}: invalid model config: longrope short_factor and long_factor need {} entries each (rotary dimensions / "
         "2), not {} and {}", source, rope_dims() / 2, rope_scaling.short_factor.size(), rope_scaling.long_factor.size());
  need(sliding_layers.empty() || sliding_layers.size() == n_layers, "layer_types needs one entry per layer");
  need(nope_layers.empty() || nope_layers.size() == n_layers, "no_rope_layers needs one entry per layer");
  need(pre_norms || sandwich_norms, "a model without pre-norms needs norms on the attention and MLP outputs");
  const auto positive = [](float v) { return v > 0 && std::isfinite(v); };
  need(local_rope_theta == 0 || positive(local_rope_theta), "the local RoPE base must be positive");
  need(rope_scaling.type == RopeScalingType::kNone || rope_scaling.type == RopeScalingType::kLongRope ||
           positive(rope_scaling.factor),
       "the RoPE scaling factor must be positive");
  need(positive(rope_scaling.attention_factor) && std::ranges::all_of(rope_scaling.short_factor, positive) &&
           std::ranges::all_of(rope_scaling.long_factor, positive),
       "longrope factors must be positive");
  need(embed_scale > 0 && std::isfinite(embed_scale), "the embedding scale must be positive");
  need(attn_softcap >= 0 && final_softcap >= 0 && query_scale >= 0, "soft-caps and query scale must not be negative");
  need(positive(residual_scale) && positive(logit_scale) && positive(logit_multiplier),
       "the residual and logit scales must be positive");
  need(!parallel_block || (pre_norms && !sandwich_norms), "a parallel block has its input norm and no others");
  need(attention_chunk == 0 || sliding_window == 0, "chunked and sliding-window attention do not mix");
  need(!qk_norm_unweighted || !qk_norm, "q and k are normed with weights or without, not both");
  need(attn_temperature_floor == 0 || std::isfinite(attn_temperature_scale), "attn_scale must be finite");
  need(!expert_weight_on_input || n_experts > 0, "routing weights on the experts' inputs need experts");
  if (n_experts > 0) {
    at_most(n_experts, 1u << 12, "the number of experts");
    at_most(expert_ffn_dim, 1u << 20, "moe_intermediate_size");
    at_most(shared_expert_ffn_dim, 1u << 20, "shared_expert_intermediate_size");
    need(expert_ffn_dim > 0, "the experts' intermediate size must be positive");
    if (experts_per_token == 0 || experts_per_token > n_experts)
      Fail("{}: invalid model config: num_experts_per_tok is {}, but it must be between 1 and the {} experts", source,
           experts_per_token, n_experts);
    need(sparse_layers.empty() || sparse_layers.size() == n_layers, "the sparse-layer list needs one entry per layer");
    need(activation != FfnActivation::kGeluTanh, "experts run SwiGLU (hidden_act silu)");
    if (expert_groups > 0) {
      if (n_experts % expert_groups != 0)
        Fail("{}: invalid model config: n_group ({}) must divide the {} experts", source, expert_groups, n_experts);
      if (expert_groups_used == 0 || expert_groups_used > expert_groups)
        Fail("{}: invalid model config: topk_group is {}, but it must be between 1 and n_group ({})", source,
             expert_groups_used, expert_groups);
      if (uint64_t{expert_groups_used} * (n_experts / expert_groups) < experts_per_token)
        Fail("{}: invalid model config: topk_group ({}) groups of {} experts hold fewer than num_experts_per_tok ({})",
             source, expert_groups_used, n_experts / expert_groups, experts_per_token);
      need(group_score != GroupScore::kBestTwoSum || n_experts / expert_groups >= 2,
           "groups scored by their best two experts need at least two experts each");
    }
    need(routed_scale > 0 && std::isfinite(routed_scale), "routed_scaling_factor must be positive");
  }
  if (mla()) {
    at_most(kv_lora_rank, 1u << 12, "kv_lora_rank");
    at_most(q_lora_rank, 1u << 14, "q_lora_rank");
    at_most(qk_nope_dim, 1u << 12, "qk_nope_head_dim");
    at_most(v_head_dim, 1u << 12, "v_head_dim");
    need(qk_nope_dim > 0 && v_head_dim > 0, "qk_nope_head_dim and v_head_dim must be positive");
    need(n_kv_heads == 1 && head_dim == kv_lora_rank + rope_dims(),
         "latent attention caches one latent of kv_lora_rank + qk_rope_head_dim per token");
    need(!qk_norm && !qkv_bias && sliding_window == 0 && attn_softcap == 0,
         "latent attention has no q/k norms, q/k/v biases, sliding windows or soft-capping");
  }
  need(bos_id < static_cast<int32_t>(vocab_size) && eos_id < static_cast<int32_t>(vocab_size),
       "bos/eos token ids must be inside the vocabulary");
}

double YarnMscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double NtkAlphaRopeBase(double theta, double alpha, double head_dim) {
  return theta * std::pow(alpha, head_dim / (head_dim - 2));
}

float ModelConfig::attention_scale() const {
  return query_scale > 0 ? query_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

float ModelConfig::query_temperature(size_t layer, size_t position) const {
  if (attn_temperature_floor == 0 || (rope(layer) && !attn_temperature_every_layer)) return 1;
  const double floors =
      std::floor(static_cast<double>(position + (attn_temperature_every_layer ? 0 : 1)) / attn_temperature_floor);
  return static_cast<float>(1.0 + attn_temperature_scale * std::log1p(floors));
}

namespace {

constexpr const char* kSupported =
    "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
    "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, Phi3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, "
    "Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration, "
    "Llama4ForConditionalGeneration, Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration, "
    "Qwen3VLForConditionalGeneration and Qwen3VLMoeForConditionalGeneration (their language models, on text), "
    "Llama4ForCausalLM, Ministral3ForCausalLM, Mistral4ForCausalLM, MiniMaxM2ForCausalLM, OlmoeForCausalLM, "
    "DeepseekV2ForCausalLM, "
    "DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, GptOssForCausalLM, GraniteForCausalLM, GraniteMoeForCausalLM, "
    "GraniteMoeSharedForCausalLM, GraniteMoeHybridForCausalLM (attention layers only), SmolLM3ForCausalLM, "
    "Olmo2ForCausalLM, "
    "Olmo3ForCausalLM, Exaone4ForCausalLM, SeedOssForCausalLM, Ernie4_5_MoeForCausalLM, "
    "Ernie4_5ForCausalLM, GlmForCausalLM, Glm4ForCausalLM, Glm4MoeForCausalLM, CohereForCausalLM, Cohere2ForCausalLM, "
    "HunYuanDenseV1ForCausalLM, HunYuanMoEV1ForCausalLM";

bool IsQwen(const std::string& arch) {
  return arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM" || arch == "Qwen2MoeForCausalLM" ||
         arch == "Qwen3MoeForCausalLM";
}

// GLM-4.7-Flash (Glm4MoeLiteForCausalLM) is DeepSeek-V3's latent attention and routing; Mistral 4
// (Mistral4ForCausalLM: Mistral Small 4, Mistral Large 3) its latent attention with a router of its own.
bool IsDeepSeek(const std::string& arch) {
  return arch == "DeepseekV2ForCausalLM" || arch == "DeepseekV3ForCausalLM" || arch == "Glm4MoeLiteForCausalLM" ||
         arch == "Mistral4ForCausalLM";
}

// HunYuan: dense (Hunyuan-0.5B ... 7B) and MoE (Hunyuan-A13B).
bool IsHunyuan(const std::string& arch) {
  return arch == "HunYuanDenseV1ForCausalLM" || arch == "HunYuanMoEV1ForCausalLM";
}

// GLM-4 (GlmForCausalLM: glm-4-9b-chat-hf; Glm4ForCausalLM: the 0414 models, GLM-Z1).
bool IsGlm(const std::string& arch) { return arch == "GlmForCausalLM" || arch == "Glm4ForCausalLM"; }

// Cohere's Command R / R+ / Aya (CohereForCausalLM) and Command R7B / Command A (Cohere2ForCausalLM).
bool IsCohere(const std::string& arch) { return arch == "CohereForCausalLM" || arch == "Cohere2ForCausalLM"; }

// OLMo 2, and OLMo 3: OLMo 2 with sliding layers (every fourth full by default).
bool IsOlmo(const std::string& arch) { return arch == "Olmo2ForCausalLM" || arch == "Olmo3ForCausalLM"; }

// Granite 3.x, and its mixtures of experts (Granite 3.0 / 3.1 1B-A400M, 3B-A800M; with a shared expert).
// Granite 4.0's GraniteMoeHybridForCausalLM runs here when every layer is attention (Granite 4.0 Micro).
bool IsGranite(const std::string& arch) {
  return arch == "GraniteForCausalLM" || arch == "GraniteMoeForCausalLM" || arch == "GraniteMoeSharedForCausalLM" ||
         arch == "GraniteMoeHybridForCausalLM";
}

bool IsGemma(const std::string& arch) {
  return arch == "GemmaForCausalLM" || arch == "Gemma2ForCausalLM" || arch == "Gemma3ForCausalLM";
}

// longrope's and YaRN's original context (original_max_position_embeddings in the object, else beside
// max_position_embeddings at the top level, as Phi-3 keeps it) and their factor (the object's, else the
// ratio of the two contexts, as transformers derives it).
double ReadContextFactor(const JsonView& rs, const JsonView& config, RopeScaling& out) {
  const uint32_t max_position = config.Get<uint32_t>("max_position_embeddings", 2048);
  out.original_max_position = rs.Get<uint32_t>("original_max_position_embeddings",
                                                config.Get<uint32_t>("original_max_position_embeddings", max_position));
  if (out.original_max_position == 0) config["original_max_position_embeddings"].Fail("must be positive");
  const double factor = rs.Has("factor") ? rs.Get<double>("factor")
                                         : static_cast<double>(max_position) / out.original_max_position;
  if (!(factor > 0)) rs["factor"].Fail("must be positive");
  out.factor = static_cast<float>(factor);
  return factor;
}

// A RoPE parameter object: rope_scaling (transformers < 5), rope_parameters (>= 5) or one layer
// type's entry of it. Reads the base when it holds one, and the scaling.
void ReadRope(const JsonView& rs, const JsonView& config, float& theta, RopeScaling& out) {
  theta = rs.Get<float>("rope_theta", theta);
  const std::string type = rs.Has("rope_type") ? rs.Get<std::string>("rope_type") : rs.Get<std::string>("type", "default");
  out = RopeScaling{};
  if (type == "default") return;
  if (type == "llama3") {
    out.type = RopeScalingType::kLlama3;
    out.factor = rs.Get<float>("factor");
    out.low_freq_factor = rs.Get<float>("low_freq_factor", 1.0f);
    out.high_freq_factor = rs.Get<float>("high_freq_factor", 4.0f);
    out.original_max_position = rs.Get<uint32_t>("original_max_position_embeddings", 8192);
    if (out.factor <= 0) rs["factor"].Fail("must be positive");
  } else if (type == "linear") {
    out.type = RopeScalingType::kLinear;
    out.factor = rs.Get<float>("factor");
    if (out.factor <= 0) rs["factor"].Fail("must be positive");
  } else if (type == "longrope" || type == "su") {  // "su": Phi-3's first name for it
    out.type = RopeScalingType::kLongRope;
    out.short_factor = rs.Get<std::vector<float>>("short_factor");
    out.long_factor = rs.Get<std::vector<float>>("long_factor");
    const double factor = ReadContextFactor(rs, config, out);
    // The paper's attention factor unless the config sets one (transformers' _compute_longrope_parameters).
    out.attention_factor = rs.Has("attention_factor")
        ? rs.Get<float>("attention_factor")
        : factor <= 1 ? 1.0f
                      : static_cast<float>(std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(out.original_max_position))));
    for (const float f : out.short_factor)
      if (!(f > 0)) rs["short_factor"].Fail("every factor must be positive");
    for (const float f : out.long_factor)
      if (!(f > 0)) rs["long_factor"].Fail("every factor must be positive");
  } else if (type == "yarn") {  // transformers' _compute_yarn_parameters
    out.type = RopeScalingType::kYarn;
    const double factor = ReadContextFactor(rs, config, out);
    // A zero or null beta takes its default, as transformers' `or` does.
    out.beta_fast = rs.Get<float>("beta_fast", 0.0f);
    out.beta_slow = rs.Get<float>("beta_slow", 0.0f);
    if (out.beta_fast == 0) out.beta_fast = 32;
    if (out.beta_slow == 0) out.beta_slow = 1;
    out.truncate = rs.Get<bool>("truncate", true);
    const double mscale = rs.Get<double>("mscale", 0.0), all_dims = rs.Get<double>("mscale_all_dim", 0.0);
    out.attention_factor = static_cast<float>(
        rs.Has("attention_factor") ? rs.Get<double>("attention_factor")
        : mscale != 0 && all_dims != 0 ? YarnMscale(factor, mscale) / YarnMscale(factor, all_dims)
                                      : YarnMscale(factor, 1.0));
    if (!(out.attention_factor > 0)) rs["attention_factor"].Fail("must be positive");
  } else if (type == "dynamic" && rs.Has("alpha")) {
    // HunYuan's NTK-aware alpha: a fixed base theta * alpha^(d / (d - 2)) over the head's d dimensions (transformers
    // recomputes it by dynamic NTK past max_position_embeddings; llama.cpp's converter writes the fixed base)
    const double alpha = rs.Get<double>("alpha");
    if (!(alpha > 0)) rs["alpha"].Fail("must be positive");
    const uint32_t heads = config.Get<uint32_t>("num_attention_heads");
    const double d = config.Get<uint32_t>("head_dim", heads ? config.Get<uint32_t>("hidden_size") / heads : 0);
    if (d <= 2) config["head_dim"].Fail("must exceed 2 for the alpha RoPE base");
    theta = static_cast<float>(NtkAlphaRopeBase(theta, alpha, d));
  } else {
    rs.Fail(fmt::format("rope type '{}' is not supported (supported: default, llama3, linear, longrope, yarn, "
                        "HunYuan's dynamic with alpha)", type));
  }
}

// Which layers use sliding-window attention, when the config has no layer_types (transformers < 5).
std::vector<uint8_t> DefaultSlidingLayers(const ModelConfig& c, const JsonView& j) {
  std::vector<uint8_t> layers(c.n_layers, 1);
  const bool gemma3 = c.architecture == "Gemma3ForCausalLM";
  if (c.architecture == "Gemma2ForCausalLM") {
    for (uint32_t i = 0; i < c.n_layers; ++i) layers[i] = i % 2 == 0;  // local, global, local, ...
  } else if (c.architecture == "Gemma3ForCausalLM" || c.architecture == "Cohere2ForCausalLM" ||
             c.architecture == "Olmo3ForCausalLM") {
    const uint32_t pattern = j.Get<uint32_t>("sliding_window_pattern", gemma3 ? 6 : 4);  // local..., one global
    if (pattern == 0) j["sliding_window_pattern"].Fail("must be positive");
    for (uint32_t i = 0; i < c.n_layers; ++i) layers[i] = (i + 1) % pattern != 0;
  } else if (c.architecture == "GptOssForCausalLM") {
    for (uint32_t i = 0; i < c.n_layers; ++i) layers[i] = i % 2 == 0;  // sliding, full, sliding, ...
  } else if (IsQwen(c.architecture)) {
    const uint32_t first = j.Get<uint32_t>("max_window_layers", c.n_layers);
    for (uint32_t i = 0; i < c.n_layers; ++i) layers[i] = i >= first;
  }
  return layers;
}

void ReadSlidingWindow(ModelConfig& c, const JsonView& j) {
  // Qwen2/3 and SmolLM3 configs carry a sliding_window that applies only with use_sliding_window.
  if (!j.Has("sliding_window") || ((IsQwen(c.architecture) || c.architecture == "SmolLM3ForCausalLM") &&
                                    !j.Get<bool>("use_sliding_window", false)))
    return;
  c.sliding_window = j.Get<uint32_t>("sliding_window");
  if (c.sliding_window == 0) j["sliding_window"].Fail("must be positive (or null for none)");
  if (j.Has("layer_types")) {
    const std::vector<JsonView> types = j["layer_types"].Items();
    if (types.size() != c.n_layers)
      j["layer_types"].Fail(fmt::format("has {} entries, but num_hidden_layers is {}", types.size(), c.n_layers));
    for (const JsonView& t : types) {
      const std::string type = t.As<std::string>();
      if (type != "sliding_attention" && type != "full_attention")
        t.Fail(fmt::format("'{}' is not a layer type lowbit runs (sliding_attention, full_attention)", type));
      c.sliding_layers.push_back(type == "sliding_attention");
    }
  } else {
    c.sliding_layers = DefaultSlidingLayers(c, j);
  }
  if (std::ranges::none_of(c.sliding_layers, [](uint8_t s) { return s != 0; })) {
    c.sliding_window = 0;
    c.sliding_layers.clear();
  }
}

FfnActivation ReadActivation(const ModelConfig& c, const JsonView& j) {
  // Gemma names it hidden_activation (its hidden_act is a legacy field transformers ignores).
  const bool gemma = IsGemma(c.architecture);
  const char* key = gemma && j.Has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string act = j.Get<std::string>(key, gemma ? "gelu_pytorch_tanh" : "silu");
  if (act == "silu") return FfnActivation::kSilu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return FfnActivation::kGeluTanh;
  j[key].Fail(fmt::format("activation '{}' is not supported (silu, gelu_pytorch_tanh)", act));
}

void ReadRopeConfig(ModelConfig& c, const JsonView& j) {
  // transformers >= 5 writes rope_parameters {rope_theta, rope_type, ...}, or one such object per
  // layer type (Gemma 3: full_attention, sliding_attention); older files have rope_theta beside an
  // optional rope_scaling, and Gemma 3's rope_local_base_freq.
  c.rope_theta = j.Get<float>("rope_theta", 10000.0f);
  if (j.Has("rope_parameters")) {
    const JsonView rp = j["rope_parameters"].ExpectObject();
    if (rp.Has("full_attention") || rp.Has("sliding_attention")) {
      if (rp.Has("full_attention")) ReadRope(rp["full_attention"].ExpectObject(), j, c.rope_theta, c.rope_scaling);
      if (rp.Has("sliding_attention")) {
        RopeScaling local;
        c.local_rope_theta = c.rope_theta;
        ReadRope(rp["sliding_attention"].ExpectObject(), j, c.local_rope_theta, local);
        if (local.type != RopeScalingType::kNone)
          rp["sliding_attention"].Fail("RoPE scaling on sliding layers is not supported");
      }
    } else {
      ReadRope(rp, j, c.rope_theta, c.rope_scaling);
    }
  } else if (j.Has("rope_scaling")) {  // a rope_theta inside wins, as transformers merges them (setdefault)
    ReadRope(j["rope_scaling"].ExpectObject(), j, c.rope_theta, c.rope_scaling);
  }
  if (j.Has("rope_local_base_freq")) c.local_rope_theta = j.Get<float>("rope_local_base_freq");
  const JsonView rp = j.Has("rope_parameters") ? j["rope_parameters"] : j;
  // GLM rotates half of each head unless told otherwise (GlmConfig's default).
  // MiniMax-M2's released configs give the rotary width as rotary_dim, which transformers reads as the factor.
  const double legacy = c.architecture == "MiniMaxM2ForCausalLM" && j.Has("rotary_dim") && c.head_dim > 0
                            ? static_cast<double>(j.Get<uint32_t>("rotary_dim")) / c.head_dim
                            : 0.0;
  const double partial = rp.Has("partial_rotary_factor") ? rp.Get<double>("partial_rotary_factor")
                         : legacy > 0                    ? legacy
                                                         : j.Get<double>("partial_rotary_factor",
                                                                         IsGlm(c.architecture) ||
                                                                                 c.architecture == "Glm4MoeForCausalLM"
                                                                             ? 0.5
                                                                             : 1.0);
  if (!(partial > 0 && partial <= 1)) j.Fail("partial_rotary_factor must be in (0, 1]");
  c.rotary_dim = static_cast<uint32_t>(c.head_dim * partial);  // int(head_dim * factor), as transformers
  if (c.rotary_dim == c.head_dim) c.rotary_dim = 0;
}

// Mixtral: every layer's MLP is experts of width intermediate_size, their weights always renormalized.
// Qwen2/3-MoE: experts of moe_intermediate_size in the layers decoder_sparse_step and mlp_only_layers
// pick (dense MLPs of intermediate_size in the others), norm_topk_prob, Qwen2-MoE's shared expert.
void ReadExperts(ModelConfig& c, const JsonView& j) {
  const char* count = j.Has("num_local_experts") || c.architecture == "MixtralForCausalLM" ? "num_local_experts"
                                                                                          : "num_experts";
  c.n_experts = j.Get<uint32_t>(count);
  if (c.n_experts == 0) j[count].Fail("must be positive");
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok");
  if (c.architecture == "MixtralForCausalLM") {
    c.expert_ffn_dim = c.ffn_dim;
    c.norm_expert_weights = true;
    return;
  }
  c.expert_ffn_dim = j.Get<uint32_t>("moe_intermediate_size");
  c.norm_expert_weights = j.Get<bool>("norm_topk_prob", false);
  if (c.architecture == "Qwen2MoeForCausalLM") c.shared_expert_ffn_dim = j.Get<uint32_t>("shared_expert_intermediate_size", 0);
  const uint32_t step = j.Get<uint32_t>("decoder_sparse_step", 1);
  if (step == 0) j["decoder_sparse_step"].Fail("must be positive");
  c.sparse_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.sparse_layers[i] = (i + 1) % step == 0;
  if (j.Has("mlp_only_layers"))
    for (const JsonView& item : j["mlp_only_layers"].Items()) {
      const uint32_t layer = item.As<uint32_t>();
      if (layer >= c.n_layers) item.Fail(fmt::format("layer {} is past num_hidden_layers ({})", layer, c.n_layers));
      c.sparse_layers[layer] = 0;
    }
  if (std::ranges::all_of(c.sparse_layers, [](uint8_t s) { return s != 0; })) c.sparse_layers.clear();
}

// GPT-OSS: every layer's MLP is experts of width intermediate_size with biases, routed by a biased router's
// top-k logits through a softmax over those k (the softmax of all, renormalised over the chosen), running
// the clamped SwiGLU; attention sinks; q/k/v and o biases (attention_bias, true by default).
void ReadGptOss(ModelConfig& c, const JsonView& j) {
  c.n_experts = j.Get<uint32_t>("num_local_experts");
  if (c.n_experts == 0) j["num_local_experts"].Fail("must be positive");
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok");
  c.expert_ffn_dim = c.ffn_dim;
  c.norm_expert_weights = true;
  c.router_logit_bias = c.expert_bias = c.attention_sinks = true;
  c.activation = FfnActivation::kSwigluClamped;
  c.swiglu_alpha = j.Get<float>("swiglu_alpha", 1.702f);
  c.swiglu_limit = j.Get<float>("swiglu_limit", 7.0f);
  if (!(c.swiglu_alpha > 0)) j["swiglu_alpha"].Fail("must be positive");
  if (!(c.swiglu_limit > 0)) j["swiglu_limit"].Fail("must be positive");
  c.qkv_bias = c.o_bias = j.Get<bool>("attention_bias", true);
  // transformers fills in YaRN (factor 32 over 4096 positions) and a RoPE base of 150000 where the config has
  // none; every released config states them, and lowbit does not guess.
  if (!j.Has("rope_parameters") && !j.Has("rope_scaling"))
    j.Fail("GptOssForCausalLM needs its rope_parameters (or rope_scaling and rope_theta): transformers' defaults "
           "are not assumed");
}

// Granite (IBM's Granite 3.x dense models): a Llama with four multipliers, on the embeddings
// (embedding_multiplier), the attention scores (attention_multiplier, in place of 1 / sqrt(head_dim)), each
// block's attention and MLP outputs before the residual add (residual_multiplier), and the logits, divided by
// logits_scaling. transformers' defaults are 1 (an attention scale of 1 included).
void ReadGranite(ModelConfig& c, const JsonView& j) {
  const auto positive = [&](const char* key) {
    const float v = j.Get<float>(key, 1.0f);
    if (!(v > 0)) j[key].Fail("must be positive");
    return v;
  };
  c.embed_scale = positive("embedding_multiplier");
  c.query_scale = positive("attention_multiplier");
  c.residual_scale = positive("residual_multiplier");
  c.logit_scale = positive("logits_scaling");
  if (j.Get<bool>("mlp_bias", false)) j["mlp_bias"].Fail("biases on the MLP are not supported");
  if (c.architecture == "GraniteForCausalLM") return;
  const bool hybrid = c.architecture == "GraniteMoeHybridForCausalLM";
  if (hybrid) {  // Granite 4.0: attention layers only (Mamba-2's state-space layers are not run), RoPE or none
    if (!j.Has("layer_types"))
      j.Fail("GraniteMoeHybridForCausalLM needs its layer_types (transformers' default is every layer Mamba-2)");
    const std::vector<JsonView> types = j["layer_types"].Items();
    if (types.size() != c.n_layers)
      j["layer_types"].Fail(fmt::format("has {} entries, but num_hidden_layers is {}", types.size(), c.n_layers));
    for (const JsonView& type : types)
      if (const std::string t = type.As<std::string>(); t != "attention" && t != "full_attention")  // 4.x, 5.x
        type.Fail(fmt::format("'{}': Mamba-2 layers are not supported (lowbit runs Granite 4.0's attention-only "
                              "models, such as Granite 4.0 Micro)", t));
    if (j.Get<std::string>("position_embedding_type", "") != "rope") c.nope_layers.assign(c.n_layers, 1);
  }
  // Granite MoE: in every layer num_local_experts experts of intermediate_size (stored stacked), each token's best
  // num_experts_per_tok by router logit weighted by the softmax over those (renormalized softmax scores); the
  // shared variant (and Granite 4.0) adds an ungated shared expert of shared_intermediate_size, which is the whole
  // MLP of a Granite 4.0 model without experts.
  c.n_experts = j.Get<uint32_t>("num_local_experts", hybrid ? 8 : 0);
  if (hybrid || c.architecture == "GraniteMoeSharedForCausalLM") {
    const uint32_t shared = j.Get<uint32_t>("shared_intermediate_size", hybrid ? 1024 : 0);
    if (c.n_experts == 0) {
      c.ffn_dim = shared;
      return;
    }
    c.shared_expert_ffn_dim = shared;
    c.shared_expert_gated = false;
  }
  if (c.n_experts == 0) j["num_local_experts"].Fail("must be positive");
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok");
  c.expert_ffn_dim = c.ffn_dim;
  c.norm_expert_weights = true;
}

// Cohere (Command R, R+, Aya): LayerNorm without a bias (layer_norm_eps), attention and MLP in parallel on
// one input norm, RoPE on adjacent pairs, logits multiplied by logit_scale, tied embeddings, attention_bias
// on q/k/v and o_proj; use_qk_norm (Command R+): LayerNorms over each head of q and k, each head with its own
// weights. Cohere2 (Command R7B, Command A): sliding layers, every sliding_window_pattern-th (4) full, and
// RoPE on the sliding ones only. Both: head_dim = hidden / heads, as their attention computes it.
void ReadCohere(ModelConfig& c, const JsonView& j) {
  c.norm = NormKind::kLayer;
  c.parallel_block = true;
  c.rope_style = RopeStyle::kAdjacent;
  c.norm_eps = j.Get<float>("layer_norm_eps", 1e-5f);
  c.logit_multiplier = j.Get<float>("logit_scale", 0.0625f);
  if (!(c.logit_multiplier > 0)) j["logit_scale"].Fail("must be positive");
  c.tie_embeddings = j.Get<bool>("tie_word_embeddings", true);
  c.head_dim = c.dim / c.n_heads;
  if (c.architecture == "CohereForCausalLM") {
    c.qk_norm = c.qk_norm_per_head = j.Get<bool>("use_qk_norm", false);
    return;
  }
  if (c.sliding_window == 0)  // without a window no layer is "sliding", and none would take RoPE
    j.Fail("Cohere2ForCausalLM needs its sliding_window (its sliding layers are the ones that take RoPE)");
  c.nope_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = !c.sliding(i);
}

// EXAONE 4.0: OLMo 2's norms on the attention and MLP outputs alone, RMSNorm over each head of q and k; with a
// sliding window, its layer_types' sliding layers are the only ones that take RoPE (the 32B), without one every
// layer does (the 1.2B).
void ReadExaone4(ModelConfig& c, const JsonView& j) {
  c.pre_norms = false;
  c.sandwich_norms = c.qk_norm = true;
  if (!j.Has("sliding_window")) return;  // null: every layer takes RoPE
  if (!j.Has("layer_types"))  // what its sliding_window_pattern means is spelled out there by transformers
    j.Fail("Exaone4ForCausalLM with a sliding_window needs its layer_types");
  c.nope_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = !c.sliding(i);
}

// ERNIE 4.5 MoE: moe_num_experts experts of moe_intermediate_size in the layers from moe_layer_start_index to
// moe_layer_end_index (-1: the last) every moe_layer_interval-th, dense MLPs of intermediate_size in the others;
// moe_k chosen by softmax scores plus a bias (moe_statics), their softmax weights renormalized;
// moe_num_shared_experts ungated shared experts.
void ReadErnieMoe(ModelConfig& c, const JsonView& j) {
  c.n_experts = j.Get<uint32_t>("moe_num_experts");
  c.experts_per_token = j.Get<uint32_t>("moe_k");
  c.expert_ffn_dim = j.Get<uint32_t>("moe_intermediate_size");
  c.shared_expert_ffn_dim = j.Get<uint32_t>("moe_num_shared_experts", 0) * c.expert_ffn_dim;
  c.shared_expert_gated = false;
  c.router_bias = c.norm_expert_weights = true;
  const uint32_t first = j.Get<uint32_t>("moe_layer_start_index", 0), step = j.Get<uint32_t>("moe_layer_interval", 1);
  const int64_t end = j.Get<int64_t>("moe_layer_end_index", -1);
  if (step == 0) j["moe_layer_interval"].Fail("must be positive");
  if (end < -1) j["moe_layer_end_index"].Fail("must be a layer index or -1 (the last)");
  const int64_t last = end == -1 ? int64_t{c.n_layers} - 1 : end;
  c.sparse_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.sparse_layers[i] = (i + 1) % step == 0 && i >= first && i <= last;
  if (std::ranges::all_of(c.sparse_layers, [](uint8_t s) { return s != 0; })) c.sparse_layers.clear();
}

// SmolLM3 and Llama 4: no_rope_layers (1 = RoPE, 0 = none) leave some layers without positions, as their
// configs fill it when absent: every no_rope_layer_interval-th layer (4) without.
void ReadNoRopeLayers(ModelConfig& c, const JsonView& j) {
  c.nope_layers.assign(c.n_layers, 0);
  if (j.Has("no_rope_layers")) {
    const std::vector<JsonView> flags = j["no_rope_layers"].Items();
    if (flags.size() != c.n_layers)
      j["no_rope_layers"].Fail(fmt::format("has {} entries, but num_hidden_layers is {}", flags.size(), c.n_layers));
    for (size_t i = 0; i < flags.size(); ++i) {
      const int flag = flags[i].As<int>();
      if (flag != 0 && flag != 1) flags[i].Fail("must be 1 (RoPE) or 0 (none)");
      c.nope_layers[i] = flag == 0;
    }
  } else {
    const uint32_t interval = j.Get<uint32_t>("no_rope_layer_interval", 4);
    if (interval == 0) j["no_rope_layer_interval"].Fail("must be positive");
    for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = (i + 1) % interval == 0;
  }
  if (std::ranges::none_of(c.nope_layers, [](uint8_t n) { return n != 0; })) c.nope_layers.clear();
}

// DeepSeek's experts (n_routed_experts, 0 = every layer dense): V2's softmax routing, greedy or limited to groups
// by their best expert; V3's sigmoid routing (also GLM-4.5's) with the score-correction bias and groups scored by
// their best two; shared experts, ungated; the first first_k_dense_replace layers and those off moe_layer_freq dense.
void ReadDeepSeekExperts(ModelConfig& c, const JsonView& j, bool v3) {
  const bool mistral4 = c.architecture == "Mistral4ForCausalLM";  // (num_local_experts: Mistral4Config's other name)
  c.n_experts = j.Get<uint32_t>(mistral4 && j.Has("num_local_experts") ? "num_local_experts" : "n_routed_experts", 0);
  if (c.n_experts == 0) return;  // every layer dense
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok");
  c.expert_ffn_dim = j.Get<uint32_t>("moe_intermediate_size");
  c.shared_expert_ffn_dim = j.Get<uint32_t>("n_shared_experts", 0) * c.expert_ffn_dim;
  c.shared_expert_gated = false;
  c.routed_scale = j.Get<float>("routed_scaling_factor", 1.0f);
  const uint32_t dense = j.Get<uint32_t>("first_k_dense_replace", 0);
  const uint32_t step = j.Get<uint32_t>("moe_layer_freq", 1);
  if (step == 0) j["moe_layer_freq"].Fail("must be positive");
  c.sparse_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.sparse_layers[i] = i >= dense && i % step == 0;
  if (std::ranges::all_of(c.sparse_layers, [](uint8_t s) { return s != 0; })) c.sparse_layers.clear();
  if (mistral4) {  // Mistral4TopkRouter: softmax scores, groups by their best two, no score bias, no topk_method
    c.router_scoring = RouterScoring::kSoftmax;
    c.group_score = GroupScore::kBestTwoSum;
    c.norm_expert_weights = j.Get<bool>("norm_topk_prob", true);
    c.expert_groups = j.Get<uint32_t>("n_group", 1);
    c.expert_groups_used = j.Get<uint32_t>("topk_group", 1);
    if (c.expert_groups == 0) j["n_group"].Fail("must be positive");
    return;
  }
  const std::string method = j.Get<std::string>("topk_method", v3 ? "noaux_tc" : "greedy");
  // transformers scores V3's routers by sigmoid and V2's by softmax, whatever scoring_func says.
  if (const std::string scoring = j.Get<std::string>("scoring_func", v3 ? "sigmoid" : "softmax");
      scoring != (v3 ? "sigmoid" : "softmax"))
    j["scoring_func"].Fail(fmt::format("'{}' is not {}'s router scoring ({})", scoring, c.architecture,
                                       v3 ? "sigmoid" : "softmax"));
  if (v3) {
    if (method != "noaux_tc") j["topk_method"].Fail(fmt::format("'{}' is not DeepSeek-V3's routing (noaux_tc)", method));
    c.router_scoring = RouterScoring::kSigmoid;
    c.router_bias = true;
    c.group_score = GroupScore::kBestTwoSum;
    c.norm_expert_weights = j.Get<bool>("norm_topk_prob", true);
  } else if (method != "greedy" && method != "group_limited_greedy") {
    j["topk_method"].Fail(fmt::format("'{}' is not supported (greedy, group_limited_greedy)", method));
  }
  if (v3 || method == "group_limited_greedy") {
    c.expert_groups = j.Get<uint32_t>("n_group");
    c.expert_groups_used = j.Get<uint32_t>("topk_group");
    if (c.expert_groups == 0) j["n_group"].Fail("must be positive");
  }
}

// GLM-4.7-Flash (Glm4MoeLiteForCausalLM) as DeepSeek-V3 with transformers' Glm4MoeLiteConfig's differences: its
// dense layers are mlp_layer_types' (by default layer 0 alone), and a first_k_dense_replace beside them (transformers
// ignores it, llama.cpp's converter reads it) must agree; RoPE over part of qk_rope_head_dim (partial_rotary_factor,
// which transformers would apply) is refused.
void ReadGlm4MoeLite(ModelConfig& c, const JsonView& j) {
  if (c.n_experts == 0) j["n_routed_experts"].Fail("must be positive");
  std::vector<uint8_t> sparse(c.n_layers, 1);
  if (j.Has("mlp_layer_types")) {
    const std::vector<JsonView> types = j["mlp_layer_types"].Items();
    if (types.size() != c.n_layers)
      j["mlp_layer_types"].Fail(fmt::format("has {} entries, but num_hidden_layers is {}", types.size(), c.n_layers));
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string type = types[i].As<std::string>();
      if (type != "dense" && type != "sparse") types[i].Fail(fmt::format("'{}' is not dense or sparse", type));
      sparse[i] = type == "sparse";
    }
  } else if (c.n_layers > 0) {
    sparse[0] = 0;
  }
  if (j.Has("first_k_dense_replace")) {
    const uint32_t first = j.Get<uint32_t>("first_k_dense_replace");
    const auto leading = static_cast<uint32_t>(std::ranges::find(sparse, 1) - sparse.begin());
    if (first != leading)
      j["first_k_dense_replace"].Fail(fmt::format(
          "is {}, but mlp_layer_types{} makes the first {} layers dense (transformers follows mlp_layer_types, "
          "llama.cpp first_k_dense_replace)", first, j.Has("mlp_layer_types") ? "" : " (absent: layer 0)", leading));
  }
  c.sparse_layers = std::ranges::all_of(sparse, [](uint8_t s) { return s != 0; }) ? std::vector<uint8_t>{} : sparse;
  const JsonView rope = j.Has("rope_parameters") ? j["rope_parameters"] : j;
  if (rope.Get<double>("partial_rotary_factor", 1.0) != 1.0)
    rope["partial_rotary_factor"].Fail("must be 1: lowbit rotates the whole qk_rope_head_dim, as llama.cpp does");
}

// DeepSeek-V2/V3: latent attention (config.h), layers from first_k_dense_replace on sparse, the routing
// of DeepseekV2TopkRouter / DeepseekV3TopkRouter, n_shared_experts ungated experts of the experts'
// width, and the softmax scale 1 / sqrt(qk_head_dim) times YaRN's mscale(factor, mscale_all_dim)^2.
void ReadDeepSeek(ModelConfig& c, const JsonView& j) {
  const bool v3 = c.architecture != "DeepseekV2ForCausalLM";
  c.q_lora_rank = j.Get<uint32_t>("q_lora_rank", 0);
  c.kv_lora_rank = j.Get<uint32_t>("kv_lora_rank");
  c.qk_nope_dim = j.Get<uint32_t>("qk_nope_head_dim");
  c.v_head_dim = j.Get<uint32_t>("v_head_dim");
  const uint32_t rope = j.Get<uint32_t>("qk_rope_head_dim");
  if (c.kv_lora_rank == 0) j["kv_lora_rank"].Fail("must be positive");
  if (rope == 0 || rope % 2 != 0) j["qk_rope_head_dim"].Fail("must be positive and even");
  if (j.Has("num_key_value_heads") && j.Get<uint32_t>("num_key_value_heads") != c.n_heads)
    j["num_key_value_heads"].Fail("must equal num_attention_heads in latent attention");
  // Rotate adjacent pairs: V2 views them as complex numbers, V3 as interleaved pairs (rope_interleave);
  // with rope_interleave false V3 rotates halves.
  c.rope_style = !v3 || j.Get<bool>("rope_interleave", true) ? RopeStyle::kAdjacent : RopeStyle::kHalf;
  c.head_dim = c.kv_lora_rank + rope;
  c.rotary_dim = rope;
  c.n_kv_heads = 1;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_dim + rope));
  const char* rope_key = j.Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (c.rope_scaling.type != RopeScalingType::kNone && j.Has(rope_key)) {
    const double all_dims = j[rope_key].Get<double>("mscale_all_dim", 0.0);
    if (all_dims != 0) scale *= std::pow(YarnMscale(c.rope_scaling.factor, all_dims), 2);
  }
  c.query_scale = static_cast<float>(scale);
  c.nextn_layers = j.Get<uint32_t>("num_nextn_predict_layers", 0);
  ReadDeepSeekExperts(c, j, v3);
  if (c.architecture == "Glm4MoeLiteForCausalLM") ReadGlm4MoeLite(c, j);
}

// Ministral 3 (Ministral3ForCausalLM, the language model of Ministral 3 3B / 8B / 14B) and Mistral 4
// (Mistral4ForCausalLM): a query scaled in every layer after RoPE by 1 + beta * log(1 + floor(position /
// original_max_position_embeddings)), both in its RoPE object (llama_4_scaling_beta), as transformers'
// Ministral3Attention and Mistral4Attention do; transformers cannot run them without both.
void ReadLlama4Scaling(ModelConfig& c, const JsonView& j) {
  const char* key = j.Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const JsonView rope = j[key].ExpectObject();
  for (const char* needed : {"llama_4_scaling_beta", "original_max_position_embeddings"})
    if (!rope.Has(needed))
      j[key].Fail(fmt::format("missing '{}': {}'s attention scales its query by it", needed, c.architecture));
  const float beta = rope.Get<float>("llama_4_scaling_beta");
  const uint32_t floor = rope.Get<uint32_t>("original_max_position_embeddings");
  if (floor == 0) rope["original_max_position_embeddings"].Fail("must be positive");
  if (beta == 0) return;
  c.attn_temperature_floor = floor;
  c.attn_temperature_scale = beta;
  c.attn_temperature_every_layer = true;
}

// MiniMax-M2 / M2.1 (MiniMaxM2ForCausalLM): GQA with RMS norms over the whole q and k projections (q_norm, k_norm:
// use_qk_norm, qk_norm_type per_layer), RoPE on each head's leading rotary_dim (rotate-half), and in every layer
// num_local_experts Mixtral-style experts of intermediate_size (block_sparse_moe), chosen by sigmoid score plus
// block_sparse_moe.e_score_correction_bias, weighted by their sigmoid renormalized, as transformers' MiniMaxM2
// runs it; its lightning-attention layers (attn_type_list 0, MiniMax-M1 / Text-01) and shared experts are refused.
void ReadMiniMaxM2(ModelConfig& c, const JsonView& j) {
  if (!j.Get<bool>("use_qk_norm", true))
    j["use_qk_norm"].Fail("false is not run (transformers' MiniMaxM2 always norms q and k)");
  if (const std::string type = j.Get<std::string>("qk_norm_type", "per_layer"); type != "per_layer")
    j["qk_norm_type"].Fail(fmt::format("'{}' is not run (per_layer: one norm over all heads)", type));
  if (j.Has("attn_type_list"))
    for (const JsonView& t : j["attn_type_list"].Items())
      if (t.As<int64_t>() != 1) t.Fail("lightning attention (0) is not run; every layer must be full attention (1)");
  if (j.Get<uint32_t>("shared_intermediate_size", 0) != 0)
    j["shared_intermediate_size"].Fail("must be 0: transformers' MiniMaxM2 has no shared expert");
  if (const std::string scoring = j.Get<std::string>("scoring_func", "sigmoid"); scoring != "sigmoid")
    j["scoring_func"].Fail(fmt::format("'{}' is not MiniMax-M2's router scoring (sigmoid)", scoring));
  c.qk_norm = c.qk_norm_full = true;
  c.n_experts = j.Get<uint32_t>("num_local_experts");
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok");
  c.expert_ffn_dim = c.ffn_dim;
  c.router_scoring = RouterScoring::kSigmoid;
  c.router_bias = c.norm_expert_weights = true;
  if (c.n_experts == 0) j["num_local_experts"].Fail("must be positive");
}

// OLMoE (OlmoeForCausalLM: OLMoE-1B-7B): Llama's pre-norms with RMS norms over the whole q and k projections, and in
// every layer num_experts experts of intermediate_size chosen by softmax, renormalized with norm_topk_prob (false by
// default), as transformers' Olmoe runs it; clip_qkv (clamping q, k and v) is refused.
void ReadOlmoe(ModelConfig& c, const JsonView& j) {
  if (j.Has("clip_qkv") && !j["clip_qkv"].value().is_null()) j["clip_qkv"].Fail("clamping q, k and v is not run");
  c.qk_norm = c.qk_norm_full = true;
  c.n_experts = j.Get<uint32_t>("num_experts", 64);
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok", 8);
  c.expert_ffn_dim = c.ffn_dim;
  c.norm_expert_weights = j.Get<bool>("norm_topk_prob", false);
  if (c.n_experts == 0) j["num_experts"].Fail("must be positive");
}

// Llama 4 (Llama4ForCausalLM, the language model of Scout and Maverick): RoPE on adjacent pairs, every fourth layer
// without (no_rope_layers) and attending to the whole context with its query's temperature tuned
// (attn_temperature_tuning: floor_scale, attn_scale), the others attending within chunks of attention_chunk_size
// with their q and k heads RMS-normed after RoPE (use_qk_norm); dense layers of intermediate_size_mlp, and in
// moe_layers (by default every interleave_moe_layer_step-th) num_local_experts experts of intermediate_size, each
// token's best num_experts_per_tok by router logit weighted by their sigmoid on the expert's input, beside an
// ungated shared expert of the same width.
void ReadLlama4(ModelConfig& c, const JsonView& j) {
  c.rope_style = RopeStyle::kAdjacent;
  ReadNoRopeLayers(c, j);
  c.qk_norm_unweighted = j.Get<bool>("use_qk_norm", true);
  // transformers 4.51's configs (Scout's and Maverick's as released) give it as the integer 4: true.
  const bool tuning = !j.Has("attn_temperature_tuning") ||
                      (j["attn_temperature_tuning"].value().is_number_integer()
                           ? j.Get<int64_t>("attn_temperature_tuning") != 0
                           : j.Get<bool>("attn_temperature_tuning"));
  if (tuning) {
    c.attn_temperature_floor = j.Get<uint32_t>("floor_scale", 8192);
    c.attn_temperature_scale = j.Get<float>("attn_scale", 0.1f);
    if (c.attn_temperature_floor == 0) j["floor_scale"].Fail("must be positive");
  }
  c.attention_chunk = j.Get<uint32_t>("attention_chunk_size", 0);
  if (j.Has("layer_types")) {  // chunked exactly where RoPE is, as transformers derives them, or none at all
    const std::vector<std::string> types = j.Get<std::vector<std::string>>("layer_types");
    if (types.size() != c.n_layers)
      j["layer_types"].Fail(fmt::format("has {} entries, but num_hidden_layers is {}", types.size(), c.n_layers));
    if (std::ranges::all_of(types, [](const std::string& t) { return t == "full_attention"; })) c.attention_chunk = 0;
    for (uint32_t i = 0; i < c.n_layers && c.attention_chunk > 0; ++i)
      if (types[i] != (c.rope(i) ? "chunked_attention" : "full_attention"))
        j["layer_types"].Fail(fmt::format("layer {} is '{}': Llama 4's chunked layers are its RoPE layers "
                                          "(no_rope_layers), and the others full_attention", i, types[i]));
  }
  c.ffn_dim = j.Get<uint32_t>("intermediate_size_mlp");
  c.n_experts = j.Get<uint32_t>("num_local_experts");
  c.experts_per_token = j.Get<uint32_t>("num_experts_per_tok", 1);
  c.expert_ffn_dim = c.shared_expert_ffn_dim = j.Get<uint32_t>("intermediate_size");
  c.shared_expert_gated = false;
  c.router_scoring = RouterScoring::kSigmoid;  // of the chosen logits: the same choice, the same weights
  c.expert_weight_on_input = true;
  c.sparse_layers.assign(c.n_layers, 0);
  if (j.Has("moe_layers")) {
    for (const JsonView& layer : j["moe_layers"].Items()) {
      const uint32_t i = layer.As<uint32_t>();
      if (i >= c.n_layers) layer.Fail(fmt::format("is not a layer (num_hidden_layers is {})", c.n_layers));
      c.sparse_layers[i] = 1;
    }
  } else {
    const uint32_t step = j.Get<uint32_t>("interleave_moe_layer_step", 1);
    if (step == 0) j["interleave_moe_layer_step"].Fail("must be positive");
    for (uint32_t i = 0; i < c.n_layers; ++i) c.sparse_layers[i] = (i + 1) % step == 0;
  }
  if (std::ranges::all_of(c.sparse_layers, [](uint8_t s) { return s != 0; })) c.sparse_layers.clear();
  if (std::ranges::none_of(c.sparse_layers, [](uint8_t s) { return s != 0; }) && !c.sparse_layers.empty()) {
    c.sparse_layers.clear();
    c.n_experts = c.experts_per_token = c.expert_ffn_dim = c.shared_expert_ffn_dim = 0;
    c.expert_weight_on_input = false;
  }
}

// A count given once or per layer (the Hub's HunYuan-A13B lists), which lowbit runs only when every layer's is equal.
uint32_t UniformPerLayer(const JsonView& j, const char* key, uint32_t fallback, uint32_t n_layers) {
  if (!j.Has(key)) return fallback;
  if (!j[key].value().is_array()) return j.Get<uint32_t>(key);
  const std::vector<JsonView> items = j[key].Items();
  if (items.size() != n_layers)
    j[key].Fail(fmt::format("has {} entries, but num_hidden_layers is {}", items.size(), n_layers));
  const uint32_t first = items.empty() ? fallback : items[0].As<uint32_t>();
  for (const JsonView& item : items)
    if (item.As<uint32_t>() != first) item.Fail(fmt::format("differs from layer 0's {}: lowbit runs one value", first));
  return first;
}

// HunYuan-A13B (HunYuanMoEV1ForCausalLM), as transformers' HunYuanMoEV1Moe runs it: in every layer num_experts
// experts of intermediate_size, each token's best moe_topk by softmax score, renormalized, beside an ungated
// shared_mlp of the same width. The Hub's per-layer moe_intermediate_size and num_shared_expert must agree.
void ReadHunyuanExperts(ModelConfig& c, const JsonView& j) {
  c.n_experts = UniformPerLayer(j, "num_experts", 1, c.n_layers);
  c.experts_per_token = UniformPerLayer(j, "moe_topk", 1, c.n_layers);
  if (c.n_experts == 0) j["num_experts"].Fail("must be positive");
  if (c.experts_per_token == 0 || c.experts_per_token > c.n_experts)
    j["moe_topk"].Fail(fmt::format("must be between 1 and num_experts ({})", c.n_experts));
  c.expert_ffn_dim = c.shared_expert_ffn_dim = c.ffn_dim;
  if (UniformPerLayer(j, "moe_intermediate_size", c.ffn_dim, c.n_layers) != c.ffn_dim)
    j["moe_intermediate_size"].Fail(fmt::format("must be intermediate_size ({}): transformers' HunYuanMoEV1 builds "
                                                "its experts that wide", c.ffn_dim));
  if (UniformPerLayer(j, "num_shared_expert", 1, c.n_layers) != 1)
    j["num_shared_expert"].Fail("must be 1: transformers' HunYuanMoEV1 has one shared MLP");
  c.shared_expert_gated = false;
  c.norm_expert_weights = true;
}

// HunYuan dense (HunYuanDenseV1ForCausalLM: Hunyuan-0.5B / 1.8B / 4B / 7B): Llama with each head of q and k RMS-normed
// after RoPE (query_layernorm, key_layernorm), which transformers always builds; the MLP never biased. Released
// configs say use_qk_norm: true and use_cla: false (cross-layer KV sharing, which transformers does not run).
void ReadHunyuan(ModelConfig& c, const JsonView& j) {
  if (!j.Get<bool>("use_qk_norm", true))
    j["use_qk_norm"].Fail("false is not run (transformers' HunYuan always norms q and k)");
  if (j.Get<bool>("use_cla", false)) j["use_cla"].Fail("cross-layer attention is not supported (nor by transformers)");
  c.qk_norm = c.qk_norm_after_rope = true;
  if (c.architecture == "HunYuanMoEV1ForCausalLM") ReadHunyuanExperts(c, j);
}

// GLM-4.5 / 4.6 / 4.7 (Glm4MoeForCausalLM): grouped-query attention with RoPE on the leading half of each head
// (rotate-half), q/k/v biases by attention_bias, use_qk_norm; DeepSeek-V3's routing (sigmoid scores with the
// score-correction bias, groups by their best two, renormalized, routed_scaling_factor), an ungated shared expert,
// first_k_dense_replace dense layers, and num_nextn_predict_layers multi-token-prediction blocks past the last (not
// run, as transformers does not run them).
void ReadGlm4Moe(ModelConfig& c, const JsonView& j) {
  c.qk_norm = j.Get<bool>("use_qk_norm", false);
  c.nextn_layers = j.Get<uint32_t>("num_nextn_predict_layers", j.Get<uint32_t>("num_mtp_layers", 0));
  ReadDeepSeekExperts(c, j, /*v3=*/true);
  if (c.n_experts == 0) j["n_routed_experts"].Fail("must be positive");
}

}  // namespace

namespace {

ModelConfig ReadHfConfigJson(const JsonView& j) {
  const std::string& source = j.source();
  ModelConfig c;
  c.architecture = j.Get<std::vector<std::string>>("architectures")[0];
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM" &&
      c.architecture != "Ministral3ForCausalLM" && c.architecture != "MixtralForCausalLM" &&
      c.architecture != "MiniMaxM2ForCausalLM" && c.architecture != "OlmoeForCausalLM" && !IsQwen(c.architecture) &&
      c.architecture != "Phi3ForCausalLM" &&
      !IsGemma(c.architecture) && !IsDeepSeek(c.architecture) && c.architecture != "GptOssForCausalLM" &&
      c.architecture != "Glm4MoeForCausalLM" &&
      !IsGranite(c.architecture) && c.architecture != "SmolLM3ForCausalLM" &&
      !IsOlmo(c.architecture) && c.architecture != "Ernie4_5ForCausalLM" && !IsGlm(c.architecture) &&
      c.architecture != "Exaone4ForCausalLM" && c.architecture != "SeedOssForCausalLM" &&
      c.architecture != "Ernie4_5_MoeForCausalLM" && c.architecture != "Llama4ForCausalLM" &&
      !IsCohere(c.architecture) && !IsHunyuan(c.architecture))
    Fail("{}: unsupported architecture '{}' (supported: {})", source, c.architecture, kSupported);
  const bool gemma = IsGemma(c.architecture), gemma2 = c.architecture == "Gemma2ForCausalLM",
             gemma3 = c.architecture == "Gemma3ForCausalLM";
  c.vocab_size = j.Get<uint32_t>("vocab_size");
  c.dim = j.Get<uint32_t>("hidden_size");
  c.n_layers = j.Get<uint32_t>("num_hidden_layers");
  c.n_heads = j.Get<uint32_t>("num_attention_heads");
  c.n_kv_heads = j.Get<uint32_t>("num_key_value_heads", c.n_heads);
  c.head_dim = j.Get<uint32_t>("head_dim", c.n_heads ? c.dim / c.n_heads : 0);
  c.ffn_dim = j.Get<uint32_t>("intermediate_size");
  c.max_position = j.Get<uint32_t>("max_position_embeddings", 2048);
  c.norm_eps = j.Get<float>("rms_norm_eps", 1e-6f);
  c.tie_embeddings = j.Get<bool>("tie_word_embeddings", gemma);
  // Qwen2-MoE has q/k/v biases unless its (transformers 5) config says qkv_bias: false.
  c.qkv_bias = c.architecture == "Qwen2ForCausalLM" ||
               (c.architecture == "Qwen2MoeForCausalLM" && j.Get<bool>("qkv_bias", true)) ||
               // GLM and Seed-OSS: q/k/v biased by default
               j.Get<bool>("attention_bias", IsGlm(c.architecture) || c.architecture == "SeedOssForCausalLM");
  // LlamaAttention's, GraniteAttention's, Olmo2Attention's and CohereAttention's attention_bias covers o_proj
  // too (GPT-OSS's: ReadGptOss).
  c.o_bias = (c.architecture == "LlamaForCausalLM" || IsGranite(c.architecture) ||
              c.architecture == "OlmoeForCausalLM" ||
              c.architecture == "Llama4ForCausalLM" ||
              IsOlmo(c.architecture) || IsCohere(c.architecture) || IsHunyuan(c.architecture)) &&
             j.Get<bool>("attention_bias", false);
  c.qk_norm = c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM" || gemma3;
  c.bos_id = j.Get<int32_t>("bos_token_id", gemma ? 2 : 1);
  // Llama 3 lists several end tokens; generation stops at the first.
  if (j.Has("eos_token_id") && j["eos_token_id"].value().is_array()) {
    const auto eos = j["eos_token_id"].Items();
    if (eos.empty()) j["eos_token_id"].Fail("is an empty list");
    c.eos_id = eos[0].As<int32_t>();
  } else {
    c.eos_id = j.Get<int32_t>("eos_token_id", gemma ? 1 : 2);
  }
  c.activation = ReadActivation(c, j);
  ReadRopeConfig(c, j);
  ReadSlidingWindow(c, j);
  if (c.architecture == "MixtralForCausalLM" || c.architecture == "Qwen2MoeForCausalLM" ||
      c.architecture == "Qwen3MoeForCausalLM")
    ReadExperts(c, j);
  if (IsDeepSeek(c.architecture)) ReadDeepSeek(c, j);
  if (c.architecture == "Glm4MoeForCausalLM") ReadGlm4Moe(c, j);
  if (c.architecture == "GptOssForCausalLM") ReadGptOss(c, j);
  if (IsGranite(c.architecture)) ReadGranite(c, j);
  if (c.architecture == "SmolLM3ForCausalLM") ReadNoRopeLayers(c, j);
  if (c.architecture == "Llama4ForCausalLM") ReadLlama4(c, j);
  if (c.architecture == "Ministral3ForCausalLM" || c.architecture == "Mistral4ForCausalLM") ReadLlama4Scaling(c, j);
  if (c.architecture == "MiniMaxM2ForCausalLM") ReadMiniMaxM2(c, j);
  if (c.architecture == "OlmoeForCausalLM") ReadOlmoe(c, j);
  if (IsCohere(c.architecture)) ReadCohere(c, j);
  if (IsHunyuan(c.architecture)) ReadHunyuan(c, j);
  if (c.architecture == "SeedOssForCausalLM") {  // Seed-OSS: o_proj's bias is its own field
    c.o_bias = j.Get<bool>("attention_out_bias", false);
    if (j.Get<bool>("mlp_bias", false)) j["mlp_bias"].Fail("biases on the MLP are not supported");
  }
  if (c.architecture == "Ernie4_5_MoeForCausalLM") ReadErnieMoe(c, j);
  if (c.architecture == "Ernie4_5ForCausalLM" || c.architecture == "Ernie4_5_MoeForCausalLM") {
    // RoPE on adjacent pairs; use_bias covers the MLP too
    c.rope_style = RopeStyle::kAdjacent;
    if (j.Get<bool>("use_bias", false)) j["use_bias"].Fail("biases on the linears are not supported");
  }
  if (IsGlm(c.architecture)) {  // RoPE on adjacent pairs of each head's leading dimensions
    c.rope_style = RopeStyle::kAdjacent;
    c.sandwich_norms = c.architecture == "Glm4ForCausalLM";  // post_self_attn_layernorm, post_mlp_layernorm
  }
  // transformers would assume a window of 4096 where these configs have none (null: no window)
  if ((c.architecture == "Olmo3ForCausalLM" || c.architecture == "Exaone4ForCausalLM") &&
      !j.value().contains("sliding_window"))
    j.Fail(fmt::format("{} needs its sliding_window (null for none): transformers' default is not assumed",
                       c.architecture));
  if (c.architecture == "Exaone4ForCausalLM") ReadExaone4(c, j);
  if (IsOlmo(c.architecture)) {  // norms on the attention and MLP outputs only, q/k norms whole
    c.pre_norms = false;
    c.sandwich_norms = c.qk_norm = c.qk_norm_full = true;
  }
  if (gemma) {
    c.norm_plus_one = true;
    c.embed_scale = std::sqrt(static_cast<float>(c.dim));
    c.sandwich_norms = gemma2 || gemma3;
  }
  if (j.Get<bool>("use_bidirectional_attention", false))  // Gemma 3 embedding models: not a causal decoder
    j["use_bidirectional_attention"].Fail("bidirectional attention is not supported (lowbit runs causal decoders)");
  if (gemma2 || gemma3) {
    c.attn_softcap = j.Get<float>("attn_logit_softcapping", 0.0f);
    c.final_softcap = j.Get<float>("final_logit_softcapping", 0.0f);
    if (c.attn_softcap < 0) j["attn_logit_softcapping"].Fail("must be positive (or null for none)");
    if (c.final_softcap < 0) j["final_logit_softcapping"].Fail("must be positive (or null for none)");
    const float scalar = j.Get<float>("query_pre_attn_scalar", static_cast<float>(c.head_dim));
    if (!(scalar > 0)) j["query_pre_attn_scalar"].Fail("must be positive");
    c.query_scale = 1.0f / std::sqrt(scalar);
  }
  c.Validate(source);
  return c;
}

}  // namespace

ModelConfig ReadHfConfig(const std::filesystem::path& config_json) {
  return HfConfigFromJson(ReadJsonFile(config_json), config_json.string());
}

// Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's mrope_section (t / h / w sections of each head's rotary pairs), which must
// cover the head's head_dim / 2 pairs exactly.
void ReadMropeSections(ModelConfig& c, const JsonView& text) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!text.Has(key) || !text[key].value().is_object() || !text[key].Has("mrope_section")) continue;
    const JsonView sections = text[key]["mrope_section"];
    c.mrope_sections = sections.As<std::vector<uint32_t>>();
    uint32_t pairs = 0;
    for (const uint32_t s : c.mrope_sections) pairs += s;
    if (c.mrope_sections.empty() || c.mrope_sections.size() > 4 || pairs * 2 != c.rope_dims())
      sections.Fail(fmt::format("must be 1 to 4 sections covering the head's {} rotary pairs", c.rope_dims() / 2));
    return;
  }
}

ModelConfig HfConfigFromJson(const nlohmann::json& parsed, const std::string& source) {
  const JsonView j = JsonView(parsed, source).ExpectObject();
  const auto archs = j.Get<std::vector<std::string>>("architectures", {});
  if (archs.empty()) Fail("{}: missing field 'architectures' (supported: {})", source, kSupported);
  if (const MultimodalText* m = FindMultimodalText(archs[0], TextModelType(parsed))) {
    // the language model; the vision tower is not run
    const bool nested = j.value().contains("text_config");  // Qwen2-VL's Hub configs are flat
    if (nested) {
      const JsonView text_config = j["text_config"].ExpectObject();
      if (const std::string type = text_config.Get<std::string>("model_type", m->text_model_type);
          type != m->text_model_type) {
        std::vector<std::string> types;
        for (const MultimodalText& e : kMultimodalTexts)
          if (archs[0] == e.wrapper) types.push_back(e.text_model_type);
        text_config["model_type"].Fail(fmt::format("'{}' is not a language model lowbit runs in {} ({})", type,
                                                   m->wrapper, fmt::join(types, ", ")));
      }
    }
    const nlohmann::json text = TextOnlyConfig(parsed);
    ModelConfig c =
        nested ? ReadHfConfigJson(JsonView(text, source, "text_config")) : ReadHfConfigJson(JsonView(text, source));
    // Qwen2-VL, Qwen2.5-VL, Qwen3-VL (dense and MoE): the sections and DeepStack's depth, for GGUF's qwen2vl / qwen3vl
    if (c.architecture == "Qwen2ForCausalLM" || c.architecture == "Qwen3ForCausalLM" ||
        c.architecture == "Qwen3MoeForCausalLM")
      ReadMropeSections(c, nested ? j["text_config"] : j);
    if (j.Has("vision_config") && j["vision_config"].value().is_object() &&
        j["vision_config"].Has("deepstack_visual_indexes"))
      c.deepstack_layers = static_cast<uint32_t>(j["vision_config"]["deepstack_visual_indexes"].Items().size());
    return c;
  }
  return ReadHfConfigJson(j);
}

}  // namespace lowbit
