#include "io/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <numeric>
#include <optional>
#include <variant>

#include "core/error.h"
#include "core/memory.h"
#include "core/thread_pool.h"
#include "io/gguf_calibrate.h"
#include "io/gguf_deepseek.h"
#include "io/gguf_mix.h"
#include "io/gguf_model.h"
#include "io/gguf_pack.h"
#include "io/gguf_quantize.h"
#include "io/gguf_writer.h"

namespace lowbit {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION

struct Architecture {
  std::string name;  // general.architecture and the key prefix
  bool permute_qk;   // Hugging Face rotate-half rows -> llama.cpp's adjacent pairs (formats.md 2.7)
};

Architecture ArchitectureOf(const ModelConfig& c) {
  // llama.cpp runs Qwen2/3 and Gemma 1/2/3 with NEOX (rotate-half) RoPE and no permutation; everything
  // lowbit reads as a Llama (Llama, Mistral, llama2.c, GGUF llama) is the `llama` architecture.
  const std::string& a = c.architecture;
  // Qwen2-VL / 2.5-VL and Qwen3-VL as llama.cpp's qwen2vl, qwen3vl and qwen3vlmoe (their RoPE sections and DeepStack
  // depth, so an mmproj file pairs with them).
  if (a == "Qwen2ForCausalLM" || a == "gguf:qwen2" || a == "gguf:qwen2vl")
    return {c.mrope_sections.empty() ? "qwen2" : "qwen2vl", false};
  if (a == "Qwen3ForCausalLM" || a == "gguf:qwen3" || a == "gguf:qwen3vl")
    return {c.mrope_sections.empty() ? "qwen3" : "qwen3vl", false};
  if (a == "GemmaForCausalLM" || a == "gguf:gemma") return {"gemma", false};
  if (a == "Gemma2ForCausalLM" || a == "gguf:gemma2") return {"gemma2", false};
  if (a == "Gemma3ForCausalLM" || a == "gguf:gemma3") return {"gemma3", false};
  if (a == "Phi3ForCausalLM" || a == "gguf:phi3") return {"phi3", false};
  if (a == "Qwen2MoeForCausalLM" || a == "gguf:qwen2moe") return {"qwen2moe", false};
  if (a == "Qwen3MoeForCausalLM" || a == "gguf:qwen3moe" || a == "gguf:qwen3vlmoe")
    return {c.mrope_sections.empty() ? "qwen3moe" : "qwen3vlmoe", false};
  if (a == "DeepseekV2ForCausalLM" || a == "DeepseekV3ForCausalLM" || a == "Glm4MoeLiteForCausalLM" ||
      a == "gguf:deepseek2")
    return {"deepseek2", false};
  // Mistral 4: llama.cpp's deepseek2 under its own name, as its converter writes it
  if (a == "Mistral4ForCausalLM" || a == "gguf:mistral4") return {"mistral4", false};
  if (a == "GptOssForCausalLM" || a == "gguf:gpt-oss") return {"gpt-oss", false};
  if (a == "Olmo2ForCausalLM" || a == "Olmo3ForCausalLM" || a == "gguf:olmo2") return {"olmo2", false};
  if (a == "OlmoeForCausalLM" || a == "gguf:olmoe") return {"olmoe", false};
  if (a == "Exaone4ForCausalLM" || a == "gguf:exaone4") return {"exaone4", false};
  if (a == "SeedOssForCausalLM" || a == "gguf:seed_oss") return {"seed_oss", false};
  // GLM-4 rotates adjacent pairs of each head's leading half in its own checkpoints: llama.cpp's NORM RoPE
  // over rope.dimension_count, nothing permuted.
  if (a == "Glm4ForCausalLM" || a == "gguf:glm4") return {"glm4", false};
  if (a == "GlmForCausalLM" || a == "gguf:chatglm") return {"chatglm", false};
  if (a == "Glm4MoeForCausalLM" || a == "gguf:glm4moe") return {"glm4moe", false};  // NEOX RoPE, as GLM-4.5 rotates
  // Cohere's checkpoints rotate adjacent pairs too (NORM RoPE in llama.cpp).
  if (a == "CohereForCausalLM" || a == "gguf:command-r") return {"command-r", false};
  if (a == "Cohere2ForCausalLM" || a == "gguf:cohere2") return {"cohere2", false};
  // ERNIE 4.5 rotates adjacent pairs in its own checkpoints too: nothing to permute.
  if (a == "Ernie4_5ForCausalLM" || a == "gguf:ernie4_5") return {"ernie4_5", c.rope_style == RopeStyle::kHalf};
  if (a == "Ernie4_5_MoeForCausalLM" || a == "gguf:ernie4_5-moe") return {"ernie4_5-moe", c.rope_style == RopeStyle::kHalf};
  // Granite and SmolLM3 run llama.cpp's adjacent pairs, as llama does.
  if (a == "GraniteForCausalLM" || a == "gguf:granite") return {"granite", c.rope_style == RopeStyle::kHalf};
  if (a == "GraniteMoeForCausalLM" || a == "GraniteMoeSharedForCausalLM" || a == "gguf:granitemoe")
    return {"granitemoe", c.rope_style == RopeStyle::kHalf};
  // Granite 4.0 without Mamba-2 layers: granite or granitemoe, as llama.cpp's converter writes it
  if (a == "GraniteMoeHybridForCausalLM")
    return {c.n_experts > 0 ? "granitemoe" : "granite", c.rope_style == RopeStyle::kHalf};
  if (a == "SmolLM3ForCausalLM" || a == "gguf:smollm3") return {"smollm3", c.rope_style == RopeStyle::kHalf};
  // HunYuan's checkpoints rotate halves (NEOX RoPE in llama.cpp), its q/k norms after RoPE.
  if (a == "HunYuanDenseV1ForCausalLM" || a == "gguf:hunyuan-dense") return {"hunyuan-dense", false};
  if (a == "HunYuanMoEV1ForCausalLM" || a == "gguf:hunyuan-moe") return {"hunyuan-moe", false};
  // Llama 4's checkpoints rotate adjacent pairs (NORM RoPE in llama.cpp): nothing to permute.
  if (a == "Llama4ForCausalLM" || a == "gguf:llama4") return {"llama4", c.rope_style == RopeStyle::kHalf};
  // Ministral 3: llama with YaRN and a query temperature, permuted as llama is.
  if (a == "Ministral3ForCausalLM" || a == "gguf:mistral3") return {"mistral3", c.rope_style == RopeStyle::kHalf};
  // MiniMax-M2 rotates halves of each head's rotary part (NEOX RoPE in llama.cpp): nothing to permute.
  if (a == "MiniMaxM2ForCausalLM" || a == "gguf:minimax-m2") return {"minimax-m2", false};
  if (a == "MixtralForCausalLM") return {"llama", true};
  if (a != "LlamaForCausalLM" && a != "MistralForCausalLM" && a != "gguf:llama" && a != "llama2.c")
    Fail("GGUF export of {} is not supported yet (supported: Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen2-MoE, "
         "Qwen3-MoE, Gemma 1/2/3, Phi-3, DeepSeek-V2/V3, GPT-OSS, Granite (dense, MoE, 4.0 without Mamba-2), "
         "SmolLM3, OLMo 2/3, EXAONE 4, Seed-OSS, ERNIE 4.5 (dense and MoE), GLM-4, GLM-4.5, GLM-4.7-Flash, Cohere, "
         "Cohere2, Llama 4, HunYuan dense and MoE, Ministral 3, Mistral 4, MiniMax-M2, OLMoE)",
         a);
  return {"llama", c.rope_style == RopeStyle::kHalf};
}

bool IsGemmaArch(const Architecture& arch) { return arch.name.starts_with("gemma"); }

// llama.cpp's deepseek2, and its mistral4 (the same loader and graph under Mistral 4's name).
bool IsDeepSeek2(const Architecture& arch) { return arch.name == "deepseek2" || arch.name == "mistral4"; }

// Architectures whose rope.dimension_count may be less than the head (partial rotary embeddings).
bool PartialRotary(const Architecture& arch) {
  return arch.name == "phi3" || arch.name == "glm4" || arch.name == "chatglm" || arch.name == "glm4moe" ||
         arch.name == "minimax-m2";
}

// What llama.cpp's gpt-oss computes (models/openai-moe.cpp): the clamped SwiGLU at alpha 1.702 and limit 7 (it reads
// no key for them), experts in every layer, biases everywhere GPT-OSS has them. Its YaRN ramp is always truncated;
// a model with the untruncated ramp (every released GPT-OSS) is warned, as llama.cpp's own conversion runs it so.
void CheckGptOssExportable(const ModelConfig& c, const std::string& source) {
  if (c.activation != FfnActivation::kSwigluClamped || c.swiglu_alpha != 1.702f || c.swiglu_limit != 7.0f)
    Fail("{}: llama.cpp's gpt-oss runs the clamped SwiGLU with swiglu_alpha 1.702 and swiglu_limit 7 only; this model "
         "has {} and {}", source, c.swiglu_alpha, c.swiglu_limit);
  if (!c.sparse_layers.empty() || !c.qkv_bias || !c.o_bias || !c.attention_sinks || !c.router_logit_bias ||
      !c.expert_bias)
    Fail("{}: llama.cpp's gpt-oss needs experts in every layer and GPT-OSS's biases and attention sinks", source);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kYarn &&
      std::abs(s.attention_factor - static_cast<float>(YarnMscale(s.factor, 1.0))) > 1e-6f * s.attention_factor)
    Fail("{}: rope_scaling: YaRN attention factor {}; llama.cpp's gpt-oss takes 0.1 ln(factor) + 1 ({})", source,
         s.attention_factor, YarnMscale(s.factor, 1.0));
  if (s.type != RopeScalingType::kNone && s.type != RopeScalingType::kYarn)
    Fail("{}: llama.cpp's gpt-oss takes YaRN RoPE scaling only", source);
  if (s.type == RopeScalingType::kYarn && !s.truncate)
    std::fprintf(stderr,
                 "lowbit: warning: %s: llama.cpp truncates YaRN's ramp to whole dimensions; this model's (truncate: "
                 "false) is not, so llama.cpp's RoPE frequencies differ slightly, as in its own conversion\n",
                 source.c_str());
}

// What llama.cpp's smollm3 and llama4 compute (models/smollm3.cpp, llama4.cpp): RoPE in every layer but each fourth,
// a constant, and no sliding window; and what the other architectures compute: RoPE in every layer.
void CheckNopeExportable(const ModelConfig& c, const Architecture& arch, const std::string& source) {
  // cohere2, and exaone4 with its window: RoPE on the sliding layers only
  const bool smollm3 = arch.name == "smollm3" || arch.name == "llama4",
             sliding_rope = arch.name == "cohere2" || (arch.name == "exaone4" && c.sliding_window > 0);
  for (uint32_t i = 0; i < c.n_layers; ++i)
    if (c.rope(i) != (sliding_rope ? c.sliding(i) : !(smollm3 && (i + 1) % kSmolLM3NopeStep == 0)))
      Fail("{}: layer {} {} RoPE, but llama.cpp's {} {}", source, i, c.rope(i) ? "takes" : "takes no", arch.name,
           smollm3        ? fmt::format("leaves every {}th layer without it and no other", kSmolLM3NopeStep)
           : sliding_rope ? std::string("rotates its sliding layers and no other")
                          : std::string("rotates every layer"));
  if (smollm3 && c.sliding_window > 0) Fail("{}: llama.cpp's {} has no sliding window", source, arch.name);
}

// Llama 4's interleave_moe_layer_step: one past its first sparse layer (CheckLlama4Exportable checks the rest).
uint32_t LlamaMoeStep(const ModelConfig& c) {
  for (uint32_t i = 0; i < c.n_layers; ++i)
    if (c.moe(i)) return i + 1;
  return 1;
}

// What llama.cpp's llama4 computes (models/llama4.cpp): experts (at least one) in every interleave_moe_layer_step-th
// layer, each token's best by logit weighted by its sigmoid on the expert's input, a shared expert as wide as the
// others, no attention biases; q and k heads RMS-normed after RoPE exactly when the model does not have 128 experts;
// the RoPE layers (all but each fourth, CheckNopeExportable) attending in chunks of 8192 positions and the others
// with their query's temperature tuned at floor 8192 and scale 0.1, all constants it reads no key for.
void CheckLlama4Exportable(const ModelConfig& c, const std::string& source) {
  if (c.n_experts == 0) Fail("{}: llama.cpp's llama4 needs experts (num_local_experts, moe_layers)", source);
  const uint32_t step = LlamaMoeStep(c);
  for (uint32_t i = 0; i < c.n_layers; ++i)
    if (c.moe(i) != ((i + 1) % step == 0))
      Fail("{}: layer {} is {}, but llama.cpp's llama4 has experts in every {}th layer and no other "
           "(interleave_moe_layer_step)", source, i, c.moe(i) ? "sparse" : "dense", step);
  if (c.router_scoring != RouterScoring::kSigmoid || !c.expert_weight_on_input || c.norm_expert_weights ||
      c.expert_groups > 0 || c.router_bias || c.routed_scale != 1 || c.shared_expert_gated ||
      c.shared_expert_ffn_dim != c.expert_ffn_dim)
    Fail("{}: llama.cpp's llama4 routes by Llama 4's sigmoid weights on the experts' inputs, with an ungated shared "
         "expert as wide as the others", source);
  if (c.qkv_bias || c.o_bias) Fail("{}: llama.cpp's llama4 has no attention biases (attention_bias)", source);
  if (c.qk_norm_unweighted != (c.n_experts != 128))
    Fail("{}: llama.cpp's llama4 norms q and k (use_qk_norm) exactly in models without 128 experts; this model has {} "
         "experts and {} them", source, c.n_experts, c.qk_norm_unweighted ? "norms" : "does not norm");
  constexpr uint32_t kLlamaCppChunk = 8192;
  if (c.attention_chunk != kLlamaCppChunk)
    Fail("{}: llama.cpp's llama4 attends in chunks of {} positions; this model's attention_chunk_size is {}", source,
         kLlamaCppChunk, c.attention_chunk);
  if (c.attn_temperature_floor != kLlamaCppChunk || c.attn_temperature_scale != 0.1f)
    Fail("{}: llama.cpp's llama4 tunes its NoPE layers' temperature at floor_scale {} and attn_scale 0.1; this model "
         "has {} and {} (attn_temperature_tuning off: 0)", source, kLlamaCppChunk, c.attn_temperature_floor,
         c.attn_temperature_scale);
}

// The yarn_log_multiplier L from which llama.cpp derives YaRN's attention factor (0.1 ln(factor) + 1) / (0.1 L
// ln(factor) + 1) in the architectures that read it (transformers' mscale 1 over mscale_all_dim L): 0, which it reads
// as no multiplier, where the factor is 0.1 ln(factor) + 1 already.
double YarnLogMultiplier(const RopeScaling& s) {
  const double base = YarnMscale(s.factor, 1.0);
  if (s.factor <= 1 || std::abs(s.attention_factor - base) <= 1e-6 * base) return 0;
  return (base / s.attention_factor - 1) / (0.1 * std::log(static_cast<double>(s.factor)));
}

// What llama.cpp's mistral3 computes (models/mistral3.cpp): llama with YaRN (its ramp truncated) or no scaling, and
// the query temperature, where there is one, in every layer after RoPE with YaRN's original context as its floor.
void CheckMistral3Exportable(const ModelConfig& c, const std::string& source) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::kNone && s.type != RopeScalingType::kYarn)
    Fail("{}: llama.cpp's mistral3 takes YaRN RoPE scaling only", source);
  if (s.type == RopeScalingType::kYarn && !s.truncate)
    Fail("{}: llama.cpp truncates YaRN's ramp to whole dimensions; this model's (truncate: false) is not", source);
  const uint32_t original = s.type == RopeScalingType::kYarn ? s.original_max_position : c.max_position;
  if (c.attn_temperature_floor > 0 && (!c.attn_temperature_every_layer || c.attn_temperature_floor != original))
    Fail("{}: llama.cpp's mistral3 scales every layer's query by position over YaRN's original context ({}); this "
         "model's floor is {}", source, original, c.attn_temperature_floor);
}

// What llama.cpp's command-r and cohere2 compute (models/command-r.cpp, cohere2.cpp): the output matrix is
// token_embd (an output.weight is not read), no attention biases, and q/k norms in command-r models of 64
// layers or more only (Command R+), never in cohere2.
void CheckCohereExportable(const ModelConfig& c, const Architecture& arch, const std::string& source) {
  if (!c.tie_embeddings)
    Fail("{}: llama.cpp's {} uses token_embd as the output matrix; this model has its own lm_head", source, arch.name);
  if (c.qkv_bias || c.o_bias) Fail("{}: llama.cpp's {} has no attention biases (attention_bias)", source, arch.name);
  const bool norms = arch.name == "command-r" && c.n_layers >= 64;
  if (c.qk_norm != norms)
    Fail("{}: llama.cpp's {} {} q/k norms in a model of {} layers; this model {} (use_qk_norm)", source, arch.name,
         norms ? "reads" : "reads no", c.n_layers, c.qk_norm ? "has them" : "has none");
}

// What llama.cpp's ernie4_5-moe computes (models/ernie4-5-moe.cpp, ernie4-5.cpp): experts in every layer from the
// dense lead on (its graph reads interleave_moe_layer_step, but its loader wants experts in each of those layers, so
// a step above 1 does not load; no end index), chosen by softmax scores (plus exp_probs_b), renormalized, an ungated
// shared expert.
void CheckErnieMoeExportable(const ModelConfig& c, const std::string& source) {
  const uint32_t lead = ErnieMoeLayout(c).lead;
  for (uint32_t i = 0; i < c.n_layers; ++i)
    if (c.moe(i) != (i >= lead))
      Fail("{}: layer {} is {}, but llama.cpp's ernie4_5-moe has experts in every layer from layer {} to the last "
           "(moe_layer_interval 1, moe_layer_end_index the last layer)", source, i, c.moe(i) ? "sparse" : "dense", lead);
  if (c.router_scoring != RouterScoring::kSoftmax || !c.norm_expert_weights || c.shared_expert_gated ||
      c.expert_groups > 0)
    Fail("{}: llama.cpp's ernie4_5-moe renormalizes softmax scores without groups, its shared expert ungated", source);
}

// What llama.cpp's minimax-m2 computes (models/minimax-m2.cpp): RMS norms over the whole q and k, experts in every
// layer chosen by their score plus exp_probs_b and renormalized, unscaled (it reads no expert_weights_scale), no
// shared expert; a separate output matrix (output.weight is required), no attention biases.
void CheckMiniMaxM2Exportable(const ModelConfig& c, const std::string& source) {
  if (!c.qk_norm_full || c.qk_norm_after_rope)
    Fail("{}: llama.cpp's minimax-m2 norms q and k over whole projections, before RoPE", source);
  if (c.n_experts == 0 || !c.sparse_layers.empty() || !c.router_bias || !c.norm_expert_weights || c.routed_scale != 1 ||
      c.shared_expert_ffn_dim > 0 || c.expert_groups > 1)
    Fail("{}: llama.cpp's minimax-m2 runs experts in every layer, chosen with exp_probs_b, renormalized and unscaled, "
         "without shared experts or groups", source);
  if (c.tie_embeddings) Fail("{}: llama.cpp's minimax-m2 reads a separate output.weight; this model ties it", source);
  if (c.qkv_bias || c.o_bias) Fail("{}: llama.cpp's minimax-m2 has no attention biases", source);
}

// What llama.cpp's mixtures of experts compute (models/llama.cpp, qwen2moe.cpp, qwen3moe.cpp, granite.cpp): every layer
// sparse, top-k weights renormalized in llama (Mixtral), qwen3moe and granitemoe and never in qwen2moe, a shared
// expert in qwen2moe (gated) and granitemoe (ungated) only.
void CheckMoeExportable(const ModelConfig& c, const Architecture& arch, const std::string& source) {
  if (arch.name == "ernie4_5-moe") return CheckErnieMoeExportable(c, source);
  if (arch.name == "minimax-m2") return CheckMiniMaxM2Exportable(c, source);
  if (c.n_experts == 0 || IsDeepSeek2(arch) || arch.name == "gpt-oss" || arch.name == "glm4moe" ||
      arch.name == "llama4")
    return;  // their own checks
  if (!c.sparse_layers.empty())
    Fail("{}: llama.cpp's {} runs experts in every layer; this model has dense layers (mlp_only_layers)", source,
         arch.name);
  const bool norm = arch.name != "qwen2moe" && arch.name != "olmoe";
  if (c.norm_expert_weights != norm)
    Fail("{}: llama.cpp's {} {} the chosen experts' weights, but this model's norm_topk_prob is {}", source,
         arch.name, norm ? "always renormalizes" : "never renormalizes", c.norm_expert_weights);
  // qwen2moe's shared expert (always there) is gated, granitemoe's (where its width is given) and hunyuan-moe's
  // (always there) are not
  const bool ungated_shared = arch.name == "granitemoe" || arch.name == "hunyuan-moe";
  if (c.shared_expert_ffn_dim > 0 ? !(arch.name == "qwen2moe" && c.shared_expert_gated) &&
                                        !(ungated_shared && !c.shared_expert_gated)
                                  : arch.name == "qwen2moe" || arch.name == "hunyuan-moe")
    Fail("{}: a shared expert is exported for qwen2moe (gated, always), granitemoe (ungated) and hunyuan-moe "
         "(ungated, always) only", source);
  if ((arch.name == "granitemoe" || arch.name == "hunyuan-moe") && c.expert_ffn_dim != c.ffn_dim)
    Fail("{}: llama.cpp's {} reads its experts' width from feed_forward_length ({}), not {}", source, arch.name,
         c.ffn_dim, c.expert_ffn_dim);
}

// What llama.cpp's Gemma architectures can express; anything else would run as another model there.
void CheckGemmaExportable(const ModelConfig& c, const Architecture& arch, const std::string& source) {
  if (!c.tie_embeddings)
    Fail("{}: llama.cpp's {} reads the output matrix from token_embd; this model's lm_head is separate (untied by "
         "rotation or a quantized lm_head), so it cannot be exported as {}", source, arch.name, arch.name);
  const float theirs = LlamaCppGemmaAttentionScale(arch.name, c);
  if (std::abs(c.attention_scale() - theirs) > 1e-6f * theirs)
    Fail("{}: the attention scale is {} (query_pre_attn_scalar), but llama.cpp's {} applies {} to a model of this "
         "shape", source, c.attention_scale(), arch.name, theirs);
  if (arch.name != "gemma3" && (c.local_rope_theta > 0 || c.rope_scaling.type != RopeScalingType::kNone))
    Fail("{}: {} in llama.cpp has no RoPE scaling or local RoPE base", source, arch.name);
  if (arch.name == "gemma3" && c.rope_scaling.type != RopeScalingType::kNone &&
      c.rope_scaling.type != RopeScalingType::kLinear)
    Fail("{}: gemma3 in llama.cpp takes linear RoPE scaling only", source);
  if (arch.name == "gemma3" && c.attn_softcap > 0)
    Fail("{}: gemma3 in llama.cpp has no attention soft-capping (attn_logit_softcapping {})", source, c.attn_softcap);
  if (arch.name == "gemma2" && c.sliding_window == 0)
    Fail("{}: gemma2 in llama.cpp always slides a window over alternate layers; this model has none", source);
  if (arch.name == "gemma" && (c.sliding_window > 0 || c.attn_softcap > 0 || c.final_softcap > 0 || c.sandwich_norms))
    Fail("{}: a gemma model with Gemma 2 features cannot be exported as gemma", source);
}

// What a GGUF tensor is made of. Matrices come from a Linear (dense or quantized), the embedding
// table from its own storage (fp32, or 16-bit or quantized codes read row by row); vectors from fp32 arrays.
struct TensorSource {
  // Rows of these linears one after another: one linear, or Phi-3's ffn_up (gate rows, then up rows),
  // or a MoE layer's ffn_*_exps (expert 0's rows, expert 1's, ...: ggml's [cols, rows, experts]).
  std::vector<const Linear*> linears = {};
  const std::vector<float>* values = nullptr;
  std::shared_ptr<const std::vector<float>> computed = nullptr;  // values made for the file (DeepSeek's attn_k_b)
  const Embedding* table = nullptr;
  uint32_t permute_heads = 0;  // > 0: rows are head-major HF Q/K rows to permute
};

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> ne;  // [cols, rows] or [n]
  int layer = -1;   // the decoder block it comes from, -1 outside the blocks
  // The linears whose rows it holds, one after another, as indices into BlockLinears of its block
  // (a calibrated export writes their bytes); empty for the rest.
  std::vector<size_t> linears;
  std::function<TensorSource(const LayerWeights*)> source;
};

std::vector<float> Llama3RopeDivisors(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const double orig = s.original_max_position;
  std::vector<float> divisors(c.head_dim / 2);
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double freq = std::pow(double{c.rope_theta}, -2.0 * static_cast<double>(i) / c.head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    double f = 1;
    if (wavelen > orig / s.low_freq_factor) {
      f = s.factor;
    } else if (wavelen >= orig / s.high_freq_factor) {
      const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = 1 / ((1 - smooth) / s.factor + smooth);
    }
    divisors[i] = static_cast<float>(f);
  }
  return divisors;
}

// The tensors in file order. The two big tables outside the blocks come first (as the converter
// writes lm_head and the embeddings first), so they can be freed before the blocks are read; a
// calibrated export needs the output matrix after the blocks, and writes it last.
std::vector<PlannedTensor> Plan(const Model& m, const Architecture& arch, const std::vector<float>* rope_divisors,
                                bool output_last) {
  const ModelConfig& c = m.config;
  const uint32_t q_heads = arch.permute_qk ? c.n_heads : 0, k_heads = arch.permute_qk ? c.n_kv_heads : 0;
  std::vector<PlannedTensor> plan;
  auto vector = [&](std::string name, uint64_t n, int layer, std::function<const std::vector<float>*(const LayerWeights*)> get,
                    uint32_t heads = 0) {
    plan.push_back({std::move(name), {n}, layer, {},
                    [get, heads](const LayerWeights* l) { return TensorSource{.values = get(l), .permute_heads = heads}; }});
  };
  auto matrix = [&](std::string name, uint64_t rows, uint64_t cols, int layer,
                    std::function<const Linear*(const LayerWeights*)> get, uint32_t heads = 0) {
    plan.push_back({std::move(name), {cols, rows}, layer, {},
                    [get, heads](const LayerWeights* l) { return TensorSource{.linears = {get(l)}, .permute_heads = heads}; }});
  };
  const ModelWeights& w = m.weights;
  auto output = [&] {
    if (!c.tie_embeddings)
      plan.push_back({"output.weight", {c.dim, c.vocab_size}, -1, {},
                      [&w](const LayerWeights*) { return TensorSource{.linears = {&w.lm_head}}; }});
  };
  if (!output_last) output();
  plan.push_back({"token_embd.weight", {c.dim, c.vocab_size}, -1, {},
                  [&w](const LayerWeights*) { return TensorSource{.table = &w.embed}; }});
  if (rope_divisors) vector("rope_freqs.weight", rope_divisors->size(), -1, [rope_divisors](const LayerWeights*) { return rope_divisors; });
  if (c.rope_scaling.type == RopeScalingType::kLongRope) {
    const RopeScaling* rs = &c.rope_scaling;
    vector("rope_factors_long.weight", rs->long_factor.size(), -1, [rs](const LayerWeights*) { return &rs->long_factor; });
    vector("rope_factors_short.weight", rs->short_factor.size(), -1, [rs](const LayerWeights*) { return &rs->short_factor; });
  }
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const int layer = static_cast<int>(i);
    const std::string p = fmt::format("blk.{}.", i);
    const std::vector<LinearShape> shapes = BlockLinearShapes(c, i);
    const auto holds = [&](std::initializer_list<std::string> names) {  // the last tensor's linears, by name
      for (const std::string& name : names)
        plan.back().linears.push_back(static_cast<size_t>(
            std::find_if(shapes.begin(), shapes.end(), [&](const LinearShape& s) { return s.name == name; }) -
            shapes.begin()));
    };
    if (c.pre_norms)
      vector(p + "attn_norm.weight", c.dim, layer, [](const LayerWeights* l) { return &l->attn_norm; });
    if (c.mla()) {  // gguf_deepseek.h
      const uint64_t q_rows = uint64_t{c.n_heads} * c.qk_head_dim();
      if (c.q_lora_rank > 0) {
        matrix(p + "attn_q_a.weight", c.q_lora_rank, c.dim, layer, [](const LayerWeights* l) { return &l->wq_a; });
        holds({"self_attn.q_a_proj"});
        vector(p + "attn_q_a_norm.weight", c.q_lora_rank, layer, [](const LayerWeights* l) { return &l->q_a_norm; });
        matrix(p + "attn_q_b.weight", q_rows, c.q_lora_rank, layer, [](const LayerWeights* l) { return &l->wq; });
        holds({"self_attn.q_b_proj"});
      } else {
        matrix(p + "attn_q.weight", q_rows, c.dim, layer, [](const LayerWeights* l) { return &l->wq; });
        holds({"self_attn.q_proj"});
      }
      matrix(p + "attn_kv_a_mqa.weight", c.head_dim, c.dim, layer, [](const LayerWeights* l) { return &l->wkv_a; });
      holds({"self_attn.kv_a_proj_with_mqa"});
      vector(p + "attn_kv_a_norm.weight", c.kv_lora_rank, layer, [](const LayerWeights* l) { return &l->kv_a_norm; });
      // kv_b_proj split per head, computed from it when the tensor is written.
      const auto split = [&](const char* name, std::vector<uint64_t> ne, auto values_of) {
        plan.push_back({p + name, std::move(ne), layer, {}, [config = &c, values_of](const LayerWeights* l) {
                          return TensorSource{
                              .computed = std::make_shared<const std::vector<float>>(values_of(*config, l->wkv_b))};
                        }});
      };
      split("attn_k_b.weight", {c.qk_nope_dim, c.kv_lora_rank, c.n_heads}, GgufLatentKeys);
      split("attn_v_b.weight", {c.kv_lora_rank, c.v_head_dim, c.n_heads}, GgufLatentValues);
    } else if (arch.name == "phi3") {  // one attn_qkv, as llama.cpp's converter writes Phi-3's qkv_proj
      plan.push_back({p + "attn_qkv.weight", {c.dim, uint64_t{c.q_dim()} + 2 * uint64_t{c.kv_dim()}}, layer, {},
                      [](const LayerWeights* l) { return TensorSource{.linears = {&l->wq, &l->wk, &l->wv}}; }});
      holds({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"});
    } else {
      matrix(p + "attn_q.weight", c.q_dim(), c.dim, layer, [](const LayerWeights* l) { return &l->wq; }, q_heads);
      holds({"self_attn.q_proj"});
      matrix(p + "attn_k.weight", c.kv_dim(), c.dim, layer, [](const LayerWeights* l) { return &l->wk; }, k_heads);
      holds({"self_attn.k_proj"});
      matrix(p + "attn_v.weight", c.kv_dim(), c.dim, layer, [](const LayerWeights* l) { return &l->wv; });
      holds({"self_attn.v_proj"});
    }
    if (c.qkv_bias) {
      vector(p + "attn_q.bias", c.q_dim(), layer, [](const LayerWeights* l) { return &l->wq.bias; }, q_heads);
      vector(p + "attn_k.bias", c.kv_dim(), layer, [](const LayerWeights* l) { return &l->wk.bias; }, k_heads);
      vector(p + "attn_v.bias", c.kv_dim(), layer, [](const LayerWeights* l) { return &l->wv.bias; });
    }
    if (c.qk_norm_per_head) {  // command-r: ne [head_dim, heads]
      plan.push_back({p + "attn_q_norm.weight", {c.head_dim, c.n_heads}, layer, {},
                      [](const LayerWeights* l) { return TensorSource{.values = &l->q_norm}; }});
      plan.push_back({p + "attn_k_norm.weight", {c.head_dim, c.n_kv_heads}, layer, {},
                      [](const LayerWeights* l) { return TensorSource{.values = &l->k_norm}; }});
    } else if (c.qk_norm) {
      vector(p + "attn_q_norm.weight", c.q_norm_dim(), layer, [](const LayerWeights* l) { return &l->q_norm; });
      vector(p + "attn_k_norm.weight", c.k_norm_dim(), layer, [](const LayerWeights* l) { return &l->k_norm; });
    }
    matrix(p + "attn_output.weight", c.dim, c.attn_out_dim(), layer, [](const LayerWeights* l) { return &l->wo; });
    holds({"self_attn.o_proj"});
    if (c.o_bias) vector(p + "attn_output.bias", c.dim, layer, [](const LayerWeights* l) { return &l->wo.bias; });
    if (c.attention_sinks)
      vector(p + "attn_sinks.weight", c.n_heads, layer, [](const LayerWeights* l) { return &l->attn_sinks; });
    if (c.sandwich_norms)
      vector(p + "post_attention_norm.weight", c.dim, layer, [](const LayerWeights* l) { return &l->attn_out_norm; });
    // A parallel block (Cohere) has no MLP input norm.
    if (c.pre_norms && !c.parallel_block)
      vector(p + GgufFfnNormName(arch.name), c.dim, layer,
             [](const LayerWeights* l) { return &l->ffn_norm; });
    if (c.moe(i)) {
      plan.push_back({p + "ffn_gate_inp.weight", {c.dim, c.n_experts}, layer, {},
                      [](const LayerWeights* l) { return TensorSource{.values = &l->router}; }});
      if (c.router_logit_bias)
        vector(p + "ffn_gate_inp.bias", c.n_experts, layer, [](const LayerWeights* l) { return &l->router_logit_bias; });
      if (c.router_bias)
        vector(p + "exp_probs_b.bias", c.n_experts, layer, [](const LayerWeights* l) { return &l->router_bias; });
      const auto experts = [&](const char* name, uint64_t rows, uint64_t cols, Linear Expert::*member,
                               const char* proj) {
        plan.push_back({p + name, {cols, rows, c.n_experts}, layer, {}, [member](const LayerWeights* l) {
                          TensorSource src;
                          for (const Expert& e : l->experts) src.linears.push_back(&(e.*member));
                          return src;
                        }});
        for (uint32_t e = 0; e < c.n_experts; ++e) holds({fmt::format("mlp.experts.{}.{}", e, proj)});
      };
      experts("ffn_gate_exps.weight", c.expert_ffn_dim, c.dim, &Expert::gate, "gate_proj");
      experts("ffn_up_exps.weight", c.expert_ffn_dim, c.dim, &Expert::up, "up_proj");
      experts("ffn_down_exps.weight", c.dim, c.expert_ffn_dim, &Expert::down, "down_proj");
      const auto expert_biases = [&](const char* name, uint64_t rows, Linear Expert::*member) {
        plan.push_back({p + name, {rows, c.n_experts}, layer, {}, [member](const LayerWeights* l) {
                          auto values = std::make_shared<std::vector<float>>();
                          for (const Expert& e : l->experts)
                            values->insert(values->end(), (e.*member).bias.begin(), (e.*member).bias.end());
                          return TensorSource{.computed = std::move(values)};
                        }});
      };
      if (c.expert_bias) {
        expert_biases("ffn_gate_exps.bias", c.expert_ffn_dim, &Expert::gate);
        expert_biases("ffn_up_exps.bias", c.expert_ffn_dim, &Expert::up);
        expert_biases("ffn_down_exps.bias", c.dim, &Expert::down);
      }
      if (c.shared_expert_ffn_dim > 0) {
        const uint32_t f = c.shared_expert_ffn_dim;
        const std::string shared = c.shared_expert_gated ? "mlp.shared_expert." : "mlp.shared_experts.";
        if (c.shared_expert_gated)
          vector(p + "ffn_gate_inp_shexp.weight", c.dim, layer, [](const LayerWeights* l) { return &l->shared_gate; });
        matrix(p + "ffn_gate_shexp.weight", f, c.dim, layer, [](const LayerWeights* l) { return &l->w_gate; });
        holds({shared + "gate_proj"});
        matrix(p + "ffn_up_shexp.weight", f, c.dim, layer, [](const LayerWeights* l) { return &l->w_up; });
        holds({shared + "up_proj"});
        matrix(p + "ffn_down_shexp.weight", c.dim, f, layer, [](const LayerWeights* l) { return &l->w_down; });
        holds({shared + "down_proj"});
      }
    } else if (GgufFusesGateUp(arch.name)) {  // split by llama.cpp's swiglu
      plan.push_back({p + "ffn_up.weight", {c.dim, uint64_t{2} * c.ffn_dim}, layer, {}, [](const LayerWeights* l) {
                        return TensorSource{.linears = {&l->w_gate, &l->w_up}};
                      }});
      holds({"mlp.gate_proj", "mlp.up_proj"});
    } else {
      matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim, layer, [](const LayerWeights* l) { return &l->w_gate; });
      holds({"mlp.gate_proj"});
      matrix(p + "ffn_up.weight", c.ffn_dim, c.dim, layer, [](const LayerWeights* l) { return &l->w_up; });
      holds({"mlp.up_proj"});
    }
    if (!c.moe(i)) {
      matrix(p + "ffn_down.weight", c.dim, c.ffn_dim, layer, [](const LayerWeights* l) { return &l->w_down; });
      holds({"mlp.down_proj"});
    }
    if (c.sandwich_norms)
      vector(p + "post_ffw_norm.weight", c.dim, layer, [](const LayerWeights* l) { return &l->ffn_out_norm; });
  }
  plan.push_back({"output_norm.weight", {c.dim}, -1, {},
                  [&w](const LayerWeights*) { return TensorSource{.values = &w.final_norm}; }});
  if (output_last) output();
  return plan;
}

void SetModelMetadata(GgufWriter& out, const ModelConfig& c, const Architecture& arch, const std::string& name,
                      uint32_t file_type) {
  const std::string& a = arch.name;
  out.Set("general.architecture", a);
  out.Set("general.type", std::string("model"));
  out.Set("general.name", name);
  out.Set(a + ".block_count", c.n_layers);
  out.Set(a + ".context_length", c.max_position);
  out.Set(a + ".embedding_length", c.dim);
  out.Set(a + ".feed_forward_length", c.ffn_dim);
  out.Set(a + ".attention.head_count", c.n_heads);
  out.Set(a + ".attention.head_count_kv", c.n_kv_heads);
  out.Set(a + ".rope.freq_base", c.rope_theta);
  out.Set(a + (c.norm == NormKind::kLayer ? ".attention.layer_norm_epsilon" : ".attention.layer_norm_rms_epsilon"),
          c.norm_eps);
  if (a == "command-r" || a == "cohere2") out.Set(a + ".logit_scale", c.logit_multiplier);
  if (c.head_dim != c.dim / c.n_heads && !IsDeepSeek2(arch)) {
    out.Set(a + ".attention.key_length", c.head_dim);
    out.Set(a + ".attention.value_length", c.head_dim);
  }
  out.Set("general.file_type", file_type);
  if (a == "llama" || a == "granite" || a == "granitemoe" || a == "smollm3" || a == "ernie4_5" || a == "ernie4_5-moe" ||
      a == "llama4" || a == "mistral3") {
    out.Set(a + ".vocab_size", c.vocab_size);
    out.Set(a + ".rope.dimension_count", c.head_dim);
  }
  if (a == "granite" || a == "granitemoe") {  // llama.cpp's names for Granite's multipliers (conversion/granite.py)
    out.Set(a + ".logit_scale", c.logit_scale);
    if (c.residual_scale != 1) out.Set(a + ".residual_scale", c.residual_scale);
    if (c.embed_scale != 1) out.Set(a + ".embedding_scale", c.embed_scale);
    out.Set(a + ".attention.scale", c.attention_scale());
  }
  if (PartialRotary(arch)) out.Set(a + ".rope.dimension_count", c.rope_dims());
  if (a == "phi3") {
    if (c.rope_scaling.type == RopeScalingType::kLongRope) {
      out.Set(a + ".rope.scaling.attn_factor", c.rope_scaling.attention_factor);
      out.Set(a + ".rope.scaling.original_context_length", c.rope_scaling.original_max_position);
    }
    if (c.sliding_window > 0) out.Set(a + ".attention.sliding_window", c.sliding_window);
  }
  if (c.n_experts > 0) {
    out.Set(a + ".expert_count", c.n_experts);
    out.Set(a + ".expert_used_count", c.experts_per_token);
    if (a != "llama") out.Set(a + ".expert_feed_forward_length", c.expert_ffn_dim);
    if (c.shared_expert_ffn_dim > 0 && !IsDeepSeek2(arch) && a != "glm4moe" && a != "llama4")
      out.Set(a + ".expert_shared_feed_forward_length", c.shared_expert_ffn_dim);
  }
  if (IsDeepSeek2(arch)) SetDeepSeek2Metadata(out, c, a);
  if (a == "glm4moe") SetDeepSeekRoutingMetadata(out, c, a);
  if (a == "ernie4_5-moe") {  // the sparse layers: from the dense lead on, every step-th (CheckMoeExportable)
    const auto [lead, step] = ErnieMoeLayout(c);
    out.Set(a + ".leading_dense_block_count", lead);
    out.Set(a + ".interleave_moe_layer_step", step);
    if (c.routed_scale != 1) out.Set(a + ".expert_weights_scale", c.routed_scale);
  }
  if (a == "llama4") out.Set(a + ".interleave_moe_layer_step", LlamaMoeStep(c));
  if (a == "hunyuan-moe") out.Set(a + ".expert_shared_count", uint32_t{1});  // as llama.cpp's converter writes it
  if (a == "minimax-m2") SetGatingFunc(out, c, a);
  if (!c.mrope_sections.empty()) {  // qwen2vl, qwen3vl, qwen3vlmoe: mrope_section padded to four, as llama.cpp's
    std::vector<int32_t> sections(c.mrope_sections.begin(), c.mrope_sections.end());  // converter writes it
    sections.resize(4, 0);
    out.Set(a + ".rope.dimension_sections", GgufArray{std::move(sections)});
    if (a != "qwen2vl") out.Set(a + ".n_deepstack_layers", c.deepstack_layers);
  }
  if (c.attn_softcap > 0) out.Set(a + ".attn_logit_softcapping", c.attn_softcap);
  if (c.final_softcap > 0) out.Set(a + ".final_logit_softcapping", c.final_softcap);
  if (c.sliding_window > 0 && a != "llama" && a != "phi3") {
    out.Set(a + ".attention.sliding_window", c.sliding_window);
    std::vector<bool> sliding(c.n_layers);  // per layer: llama.cpp's own default patterns differ by architecture
    for (uint32_t i = 0; i < c.n_layers; ++i) sliding[i] = c.sliding(i);
    out.Set(a + ".attention.sliding_window_pattern", GgufArray{std::move(sliding)});
    if (c.local_rope_theta > 0) out.Set(a + ".rope.freq_base_swa", c.local_rope_theta);
  }
  if (c.rope_scaling.type == RopeScalingType::kLinear) {
    out.Set(a + ".rope.scaling.type", std::string("linear"));
    out.Set(a + ".rope.scaling.factor", c.rope_scaling.factor);
  }
  if ((a == "gpt-oss" || a == "mistral3") && c.rope_scaling.type == RopeScalingType::kYarn) {
    const RopeScaling& s = c.rope_scaling;
    out.Set(a + ".rope.scaling.type", std::string("yarn"));
    out.Set(a + ".rope.scaling.factor", s.factor);
    out.Set(a + ".rope.scaling.original_context_length", s.original_max_position);
    out.Set(a + ".rope.scaling.yarn_beta_fast", s.beta_fast);
    out.Set(a + ".rope.scaling.yarn_beta_slow", s.beta_slow);
    if (a == "mistral3")
      if (const double log_multiplier = YarnLogMultiplier(s); log_multiplier != 0)
        out.Set(a + ".rope.scaling.yarn_log_multiplier", static_cast<float>(log_multiplier));
  }
  if (a == "mistral3" && c.attn_temperature_floor > 0)
    out.Set(a + ".attention.temperature_scale", c.attn_temperature_scale);
  out.Set("general.quantization_version", kQuantizationVersion);
}

// Encodes one planned tensor into GGUF bytes of the chosen type, or carries a quantized source's
// codes over bit for bit (GgufExportOptions::keep_source_grids).
class TensorEncoder {
 public:
  TensorEncoder(const GgufExportOptions& options, size_t threads) : options_(options), pool_(threads) {}

  struct Encoded {
    uint32_t type;
    bool repacked;
    std::vector<std::byte> bytes;
  };

  Encoded Encode(const PlannedTensor& t, const TensorSource& src, uint32_t head_dim, uint32_t type) {
    const uint64_t cols = t.ne[0];
    const uint64_t rows = std::accumulate(t.ne.begin() + 1, t.ne.end(), uint64_t{1}, std::multiplies<>());
    struct Part {
      const QuantizedTensor* q = nullptr;
      const float* dense = nullptr;
      uint64_t rows = 0;
      std::span<const uint32_t> order;  // act-order: q's stored column order (ggml has none: re-encoded)
    };
    std::vector<Part> parts;
    if (!src.linears.empty()) {
      for (const Linear* l : src.linears) {
        LOWBIT_CHECK(l->cols() == cols);
        // llama.cpp multiplies the stored weight by the input as it is: a folder whose linears expect their input
        // transformed first would load and run as a different model.
        if (l->input_hadamard != 0)
          Fail("{}: the source's linear expects an online Hadamard rotation of its input (quantize --rotate), which "
               "llama.cpp does not run; export the unrotated model", t.name);
        if (l->outliers)
          Fail("{}: the source's linear keeps LLM.int8() outlier columns beside its codes, which GGUF cannot hold",
               t.name);
        if (const auto* d = std::get_if<DenseMatrix>(&l->weight)) parts.push_back({nullptr, d->values.data(), l->rows(), {}});
        else parts.push_back({&std::get<QuantizedTensor>(l->weight), nullptr, l->rows(), l->input_order});
      }
    } else if (src.table && src.table->packed) {
      parts.push_back({&*src.table->packed, nullptr, rows, {}});
    } else {
      const std::vector<float>* values = src.table ? &src.table->values : src.computed ? src.computed.get() : src.values;
      LOWBIT_CHECK(values && values->size() == rows * cols);
      parts.push_back({nullptr, values->data(), rows, {}});
    }
    LOWBIT_CHECK(std::accumulate(parts.begin(), parts.end(), uint64_t{0},
                                 [](uint64_t n, const Part& p) { return n + p.rows; }) == rows);
    // Codes carried over bit for bit need every part on the same GGUF grid.
    std::optional<uint32_t> exact = parts[0].q ? ExactGgufType(*parts[0].q) : std::nullopt;
    for (const Part& p : parts)
      if (!p.q || !p.order.empty() || ExactGgufType(*p.q) != exact) exact.reset();
    if (exact && *exact != type && !options_.keep_source_grids) exact.reset();
    if (exact) type = *exact;
    // One importance vector for the tensor, or (llama-imatrix on ffn_*_exps) one per expert.
    std::span<const float> importance;
    const uint64_t matrices = t.ne.size() > 2 ? t.ne[2] : 1;
    if (options_.imatrix && !exact) {
      if (auto it = options_.imatrix->find(t.name); it != options_.imatrix->end()) {
        if (it->second.size() != cols && it->second.size() != cols * matrices)
          Fail("importance matrix: entry '{}' has {} values, the tensor has {} columns{}", t.name, it->second.size(),
               cols, matrices > 1 ? fmt::format(" in each of {} experts", matrices) : "");
        importance = it->second;
      }
    }
    const uint64_t rows_per_matrix = rows / matrices;
    const uint64_t row_bytes = GgufWriter::TensorBytes(type, std::vector<uint64_t>{cols});
    Encoded out{type, exact.has_value(), std::vector<std::byte>(row_bytes * rows)};
    ParallelFor(&pool_, rows, [&](size_t begin, size_t end) {
      std::vector<float> row(cols), stored(cols);
      for (size_t r = begin; r < end; ++r) {
        uint64_t from = src.permute_heads ? HalfStyleRow(r, head_dim) : r;
        const Part* part = parts.data();
        while (from >= part->rows) from -= (part++)->rows;
        std::byte* dst = out.bytes.data() + r * row_bytes;
        if (exact) {
          PackGgufRow(*part->q, from, dst);
          continue;
        }
        const float* x = part->dense ? part->dense + from * cols : row.data();
        if (part->q && part->order.empty()) {
          part->q->DequantizeRow(from, row.data());
        } else if (part->q) {  // back to input order
          part->q->DequantizeRow(from, stored.data());
          for (uint64_t j = 0; j < cols; ++j) row[part->order[j]] = stored[j];
        }
        const std::span<const float> row_importance =
            importance.size() > cols ? importance.subspan(r / rows_per_matrix * cols, cols) : importance;
        QuantizeGgufRow(type, x, static_cast<int64_t>(cols), row_importance, dst);
      }
    });
    return out;
  }

 private:
  const GgufExportOptions& options_;
  ThreadPool pool_;
};

}  // namespace

std::string GgufArchitectureOf(const ModelConfig& c) { return ArchitectureOf(c).name; }

GgufExportResult ExportGguf(StreamedModel& s, const std::filesystem::path& out_path, const GgufExportOptions& options) {
  const Model& m = s.model;
  const ModelConfig& c = m.config;
  const GgufFileType& file_type = FindGgufFileType(options.type);
  const Architecture arch = ArchitectureOf(c);
  std::optional<std::vector<float>> rope_divisors;
  if (c.rope_scaling.type == RopeScalingType::kLlama3) {
    if (arch.name != "llama" && arch.name != "llama4")
      Fail("{}: Llama 3 rope scaling is only exported for the llama and llama4 architectures", m.source);
    rope_divisors = Llama3RopeDivisors(c);
  }
  const bool deepseek = IsDeepSeek2(arch);
  if (IsGemmaArch(arch)) CheckGemmaExportable(c, arch, m.source);
  if (deepseek) CheckDeepSeek2Exportable(c, m.source);
  const bool gpt_oss = arch.name == "gpt-oss";
  if (gpt_oss) CheckGptOssExportable(c, m.source);
  if (arch.name == "glm4moe") CheckGlm4MoeExportable(c, m.source);
  if (arch.name == "llama4") CheckLlama4Exportable(c, m.source);
  if (arch.name == "mistral3") CheckMistral3Exportable(c, m.source);
  if (c.attn_temperature_floor > 0 && arch.name != "llama4" && arch.name != "mistral3" && !deepseek)
    Fail("{}: llama.cpp's {} has no query temperature (Llama 4's attn_temperature_tuning, Ministral 3's "
         "llama_4_scaling_beta)", m.source, arch.name);
  CheckMoeExportable(c, arch, m.source);
  CheckNopeExportable(c, arch, m.source);
  if (arch.name == "command-r" || arch.name == "cohere2") CheckCohereExportable(c, arch, m.source);
  if ((arch.name == "olmo2" || arch.name == "olmoe") && c.tie_embeddings)  // models/olmo2.cpp, olmoe.cpp
    Fail("{}: llama.cpp's {} reads a separate output.weight; this model ties its embeddings", m.source, arch.name);
  // models/olmoe.cpp: q, k and their whole-projection norms n_embd wide (no grouped-query attention), no biases
  if (arch.name == "olmoe" && (c.q_dim() != c.dim || c.kv_dim() != c.dim || !c.qk_norm_full || c.qkv_bias || c.o_bias))
    Fail("{}: llama.cpp's olmoe needs num_heads * head_dim = num_key_value_heads * head_dim = hidden_size ({} x {}, "
         "{} x {}, {}), q/k norms over whole projections and no attention biases", m.source, c.n_heads, c.head_dim,
         c.n_kv_heads, c.head_dim, c.dim);
  const bool longrope = arch.name == "phi3" && c.rope_scaling.type == RopeScalingType::kLongRope;
  if (!IsGemmaArch(arch) && !longrope && !deepseek && !gpt_oss && arch.name != "mistral3" &&
      c.rope_scaling.type != RopeScalingType::kNone &&
      c.rope_scaling.type != RopeScalingType::kLlama3)
    Fail("{}: this RoPE scaling is not exported to GGUF {} yet", m.source, arch.name);
  if (c.rotary_dim != 0 && !PartialRotary(arch) && !deepseek)
    Fail("{}: partial rotary embeddings are exported for phi3, glm4, chatglm, glm4moe and deepseek2 only", m.source);
  const bool hunyuan = arch.name == "hunyuan-dense" || arch.name == "hunyuan-moe";
  if ((arch.name == "seed_oss" || hunyuan) && c.o_bias)  // models/seed-oss.cpp, hunyuan-vl.cpp, hunyuan-moe.cpp
    Fail("{}: llama.cpp's {} reads no o_proj bias (attention_bias)", m.source, arch.name);
  if (c.qk_norm_after_rope != hunyuan)  // models/hunyuan-vl.cpp and hunyuan-moe.cpp norm q and k after RoPE
    Fail("{}: llama.cpp's {} norms q and k {}; this model {}", m.source, arch.name,
         hunyuan ? "after RoPE" : "before RoPE, if at all", c.qk_norm_after_rope ? "after" : "before (or not at all)");
  // models/exaone4.cpp, chatglm.cpp: attn_output is n_embd x n_embd; exaone4 slides windows at 64 layers only
  if ((arch.name == "exaone4" || arch.name == "chatglm") && c.q_dim() != c.dim)
    Fail("{}: llama.cpp's {} needs num_heads * head_dim = hidden_size ({} x {} != {})", m.source, arch.name, c.n_heads,
         c.head_dim, c.dim);
  if (arch.name == "exaone4" && c.sliding_window > 0 && c.n_layers != 64)
    Fail("{}: llama.cpp's exaone4 slides its window in 64-layer models (EXAONE 4.0 32B) only; this model has {} "
         "layers and a window of {}", m.source, c.n_layers, c.sliding_window);
  if (arch.name == "phi3") {
    if (c.q_dim() != c.dim || c.qkv_bias)
      Fail("{}: llama.cpp's phi3 needs num_heads * head_dim = hidden_size and no q/k/v bias", m.source);
    if (c.sliding_window > 0)
      std::fprintf(stderr, "lowbit: warning: %s: llama.cpp ignores Phi-3's sliding window (%u tokens)\n",
                   m.source.c_str(), c.sliding_window);
  }
  if (arch.name == "llama" && c.sliding_window > 0)  // llama.cpp's converter drops Mistral's window too
    std::fprintf(stderr, "lowbit: warning: %s: llama.cpp's llama architecture has no sliding window; the GGUF file "
                 "attends past the model's window of %u tokens\n", m.source.c_str(), c.sliding_window);
  const bool calibrating = !options.calibration.empty();
  std::vector<PlannedTensor> plan = Plan(m, arch, rope_divisors ? &*rope_divisors : nullptr, calibrating);

  GgufMixModel mix{c.n_layers, c.n_kv_heads ? c.n_heads / c.n_kv_heads : 1, !c.tie_embeddings, c.n_experts};
  GgufTypeChooser chooser(file_type, mix, options.pure, options.imatrix != nullptr, options.table_types);
  GgufWriter writer(out_path);
  std::string name = options.name;
  if (name.empty()) name = std::filesystem::path(m.source).filename().string();
  SetModelMetadata(writer, c, arch, name, file_type.ftype);
  for (const GgufKeyValue& kv : options.metadata) writer.Set(kv.key, kv.value);

  GgufExportResult result;
  result.architecture = arch.name;
  result.file_type = file_type.ftype;
  for (const PlannedTensor& t : plan) {
    writer.DeclareTensor(t.name, t.ne);
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    result.weights += n;
  }

  // Types in file order (llama-quantize's counters follow it).
  std::vector<uint32_t> types;
  for (const PlannedTensor& t : plan) {
    types.push_back(chooser.Choose(t.name, t.ne));
    if (!CanQuantizeGguf(types.back())) Fail("writing ggml type {} is not supported", GgmlTypeName(types.back()));
  }
  std::optional<GgufLayerCalibrator> calibrator;
  if (!options.calibration.empty()) {
    if (s.read_layer) {  // calibration runs the whole model
      for (uint32_t l = 0; l < c.n_layers; ++l) s.model.weights.layers[l] = s.read_layer(l);
      s.read_layer = nullptr;
    }
    calibrator.emplace(s.model, options.calibration, options.gptq, options.threads);
  }

  TensorEncoder encoder(options, options.threads);
  std::optional<LayerWeights> layer;
  int loaded = -1;
  std::vector<std::vector<std::byte>> calibrated;  // the block's linears' bytes (BlockLinears order)
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedTensor& t = plan[i];
    if (options.progress) options.progress(i, plan.size(), t.name);
    const LayerWeights* l = nullptr;
    if (t.layer >= 0) {
      if (s.read_layer) {
        if (loaded != t.layer) {
          layer.reset();  // free the previous block first: one block in memory at a time
          ReleaseFreedMemory();
          layer = s.read_layer(static_cast<size_t>(t.layer));
          loaded = t.layer;
        }
        l = &*layer;
      } else {
        l = &m.weights.layers[static_cast<size_t>(t.layer)];
      }
      if (calibrator && loaded != t.layer) {
        std::vector<uint32_t> linear_types(BlockLinearShapes(c, static_cast<size_t>(t.layer)).size());
        for (size_t j = i; j < plan.size() && plan[j].layer == t.layer; ++j)
          for (const size_t linear : plan[j].linears) linear_types[linear] = types[j];
        calibrated = calibrator->QuantizeLayer(static_cast<size_t>(t.layer), linear_types);
        loaded = t.layer;
      }
    }
    const TensorSource src = t.source(l);
    if (calibrator && t.name == "output.weight") {
      const std::vector<std::byte> bytes = calibrator->QuantizeOutput(types[i]);
      writer.WriteTensor(t.name, types[i], bytes);
      result.tensors.push_back({t.name, types[i], t.ne, bytes.size(), false, true});
      continue;
    }
    if (calibrator && !t.linears.empty()) {
      // GPTQ's bytes are in each linear's own row order: permute Q/K rows as the encoder does.
      std::vector<std::byte> bytes;
      for (const size_t linear : t.linears)
        bytes.insert(bytes.end(), calibrated[linear].begin(), calibrated[linear].end());
      if (src.permute_heads) {
        const uint64_t rows = t.ne[1], row_bytes = bytes.size() / rows;
        std::vector<std::byte> permuted(bytes.size());
        for (uint64_t r = 0; r < rows; ++r)
          std::copy_n(bytes.begin() + static_cast<ptrdiff_t>(HalfStyleRow(r, c.head_dim) * row_bytes), row_bytes,
                      permuted.begin() + static_cast<ptrdiff_t>(r * row_bytes));
        bytes = std::move(permuted);
      }
      writer.WriteTensor(t.name, types[i], bytes);
      result.tensors.push_back({t.name, types[i], t.ne, bytes.size(), false, true});
      continue;
    }
    const TensorEncoder::Encoded e = encoder.Encode(t, src, c.head_dim, types[i]);
    writer.WriteTensor(t.name, e.type, e.bytes);
    result.tensors.push_back({t.name, e.type, t.ne, e.bytes.size(), e.repacked, false});
    // Written and no longer needed (unless calibration still runs the model): make room for the blocks.
    if (!calibrating && t.name == "token_embd.weight") s.model.weights.embed = Embedding{};
    if (!calibrating && (t.name == "output.weight" || (t.name == "token_embd.weight" && c.tie_embeddings)))
      s.model.weights.lm_head.weight = DenseMatrix{};
  }
  if (options.progress) options.progress(plan.size(), plan.size(), "");
  result.file_bytes = writer.Commit();
  return result;
}

}  // namespace lowbit
