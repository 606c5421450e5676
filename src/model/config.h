// Decoder-only transformer hyper-parameters, from Hugging Face config.json, GGUF metadata or a
// llama2.c header: the Llama family (Llama, Mistral, Qwen2/3, Phi-3, Granite, SmolLM3, OLMo 2, ERNIE 4.5), Gemma 1/2/3, the
// mixtures of
// experts Mixtral, Qwen2/3-MoE and GPT-OSS, and DeepSeek-V2/V3 (latent attention), whose differences are
// fields here (activation, norm placement, soft-capping, sliding windows, RoPE variants, experts,
// latent attention), not separate model classes.
// Validate() checks the invariants the forward pass relies on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lowbit {

enum class RopeStyle : uint8_t {
  kHalf,      // Hugging Face "rotate half": pairs (i, i + head_dim/2)
  kAdjacent,  // Meta / llama2.c / GGUF after llama.cpp's Q/K permutation: pairs (2i, 2i + 1)
};

// Row r of a Q or K matrix laid out for RopeStyle::kAdjacent (llama.cpp's permutation of a Hugging
// Face checkpoint, formats.md 2.7) is row HalfStyleRow(r) of the same matrix laid out for kHalf.
inline uint64_t HalfStyleRow(uint64_t r, uint32_t head_dim) {
  const uint64_t head = r / head_dim, within = r % head_dim, i = within / 2, j = within % 2;
  return head * head_dim + j * (head_dim / 2) + i;
}

enum class RopeScalingType : uint8_t {
  kNone,
  kLlama3,    // Llama 3.1+: frequency-dependent division by `factor`
  kLinear,    // position interpolation: every frequency divided by `factor` (Gemma 3's global layers)
  kLongRope,  // Phi-3: per-frequency divisors, short or long by context size, and an attention factor
  kYarn,      // YaRN (DeepSeek-V2/V3, Qwen's long-context configs): low frequencies divided by `factor`, high
              // ones kept, a linear ramp between, and an attention factor
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 0;  // llama3, linear
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  uint32_t original_max_position = 8192;  // llama3, longrope, yarn
  float beta_fast = 32, beta_slow = 1;    // yarn: the ramp's ends, in rotations over the original context
  bool truncate = true;                   // yarn: the ramp's ends rounded out to whole dimensions
  // longrope: divisors of each frequency [rotary_dim / 2]; the long ones serve contexts (KV cache
  // capacities) longer than original_max_position, as llama.cpp picks them by n_ctx.
  std::vector<float> short_factor, long_factor;
  float attention_factor = 1;  // longrope, yarn: RoPE's cos and sin are multiplied by it
};

enum class NormKind : uint8_t {
  kRms,    // RMSNorm: x / rms(x) * w
  kLayer,  // LayerNorm without a bias (Cohere): (x - mean) / std(x) * w
};

enum class RouterScoring : uint8_t { kSoftmax, kSigmoid };
enum class GroupScore : uint8_t { kBestExpert, kBestTwoSum };

enum class FfnActivation : uint8_t {
  kSilu,      // SwiGLU
  kGeluTanh,  // GeGLU with the tanh approximation (gelu_pytorch_tanh: Gemma)
  // GPT-OSS's experts: g = min(gate, limit), u = clamp(up, -limit, limit), g sigmoid(alpha g) (u + 1)
  // (ModelConfig::swiglu_alpha, swiglu_limit).
  kSwigluClamped,
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
  NormKind norm = NormKind::kRms;  // every norm of the model
  bool tie_embeddings = false;
  bool qkv_bias = false;     // Qwen2
  bool o_bias = false;       // Llama's and GPT-OSS's attention_bias: o_proj has a bias too
  bool qk_norm = false;      // Qwen3, Gemma 3: RMSNorm over each head of q and k, before RoPE
  bool qk_norm_after_rope = false;  // HunYuan: those per-head norms after RoPE
  bool qk_norm_full = false; // OLMo 2: that RMSNorm over the whole q and k projections (all heads at once)
  bool qk_norm_per_head = false;  // Cohere (Command R+): each head normed on its own, with its own weights
  uint32_t rotary_dim = 0;   // leading dimensions of a head that RoPE rotates (partial_rotary_factor); 0 = all
  // Qwen2-VL / Qwen2.5-VL / Qwen3-VL: the multimodal RoPE's sections (mrope_section, in pairs of a head's dimensions),
  // kept so GGUF export writes llama.cpp's qwen2vl / qwen3vl / qwen3vlmoe (which an mmproj file pairs with); on text
  // it is the plain RoPE. Empty = none.
  std::vector<uint32_t> mrope_sections;
  // Qwen3-VL: how many of the first layers add the vision tower's DeepStack features (its deepstack_visual_indexes),
  // zero on text; kept for GGUF's n_deepstack_layers, by which an mmproj file's embeddings are sized.
  uint32_t deepstack_layers = 0;
  // SmolLM3, Llama 4: layers whose q and k take no RoPE (no_rope_layers 0); empty = none
  std::vector<uint8_t> nope_layers;
  // Llama 4: each head of q and k RMS-normed without weights after RoPE (Llama4TextL2Norm), in the RoPE layers only.
  bool qk_norm_unweighted = false;
  // Llama 4: a RoPE layer attends only within its own chunk of attention_chunk positions (chunked_attention);
  // 0 = none.
  uint32_t attention_chunk = 0;
  // Llama 4's NoPE layers scale q by 1 + attn_temperature_scale * log(1 + floor((position + 1) /
  // attn_temperature_floor)) (attn_temperature_tuning), so attention stays sharp at long contexts; 0 = none.
  // Ministral 3 and Mistral 4 (llama_4_scaling_beta, with YaRN's original context as the floor) scale q in every
  // layer, after RoPE, by floor(position / attn_temperature_floor): attn_temperature_every_layer.
  uint32_t attn_temperature_floor = 0;
  float attn_temperature_scale = 0;
  bool attn_temperature_every_layer = false;
  FfnActivation activation = FfnActivation::kSilu;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // kSwigluClamped
  // GPT-OSS: a learned logit per query head ("sink") joins each softmax's denominator, attending to
  // nothing (LayerWeights::attn_sinks).
  bool attention_sinks = false;
  // Sliding-window attention: a sliding layer sees its last `sliding_window` positions (itself
  // included). `sliding_layers` marks them per layer; empty with a window set = every layer.
  uint32_t sliding_window = 0;
  std::vector<uint8_t> sliding_layers;
  float local_rope_theta = 0;  // Gemma 3: the sliding layers' RoPE base, unscaled; 0 = as the others
  // Gemma: the checkpoint stores RMSNorm weights w and the model scales by 1 + w. A loaded model holds
  // 1 + w (what the forward pass multiplies by, and what GGUF stores); Hugging Face writers subtract 1.
  bool norm_plus_one = false;
  float embed_scale = 1;      // Gemma: embeddings are multiplied by sqrt(hidden_size)
  bool sandwich_norms = false;  // Gemma 2/3: attention and MLP outputs are RMS-normed before each residual add
  bool pre_norms = true;        // false (OLMo 2): attention and MLP read the residual stream itself, only the
                                // sandwich norms on their outputs remain
  bool parallel_block = false;  // Cohere: attention and MLP both read the input norm's output, and both outputs
                                // join the residual at once (no ffn_norm)
  float attn_softcap = 0;     // Gemma 2: attention scores become cap * tanh(score / cap); 0 = none
  float final_softcap = 0;    // Gemma 2: the same on the logits
  float query_scale = 0;      // attention score scale (Gemma's query_pre_attn_scalar^-1/2); 0 = 1/sqrt(head_dim)
  float residual_scale = 1;   // Granite: attention and MLP outputs are multiplied by it before each residual add
  float logit_scale = 1;      // Granite: the logits are divided by it (logits_scaling)
  float logit_multiplier = 1; // Cohere: the logits are multiplied by it (its logit_scale)
  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): a sparse layer's MLP is `n_experts` SwiGLU
  // experts of width expert_ffn_dim; a router picks experts_per_token of them for each token and
  // weighs their outputs by its softmax probabilities (renormalized over the chosen ones when
  // norm_expert_weights). Qwen2-MoE adds a shared expert every token passes, gated by a sigmoid.
  uint32_t n_experts = 0;              // 0 = a dense model
  uint32_t experts_per_token = 0;
  uint32_t expert_ffn_dim = 0;
  bool norm_expert_weights = false;
  uint32_t shared_expert_ffn_dim = 0;  // 0 = no shared expert
  std::vector<uint8_t> sparse_layers;  // which layers are sparse (Qwen's mlp_only_layers); empty = all
  // DeepSeek-V2/V3 routing: softmax or sigmoid scores; with expert_groups > 0 a token only picks from the
  // expert_groups_used groups (of n_experts / expert_groups) that score best (V2: a group's best expert;
  // V3: the sum of its best two); V3 adds a per-expert bias (LayerWeights::router_bias) to the scores
  // that choose, not to the weights; the chosen weights are multiplied by routed_scale. Their shared
  // experts (mlp.shared_experts, one MLP of shared_expert_ffn_dim) are not gated.
  RouterScoring router_scoring = RouterScoring::kSoftmax;
  uint32_t expert_groups = 0, expert_groups_used = 0;
  GroupScore group_score = GroupScore::kBestExpert;
  bool router_bias = false;
  float routed_scale = 1;
  bool shared_expert_gated = true;  // Qwen2-MoE: scaled by sigmoid(shared_gate . x)
  // Llama 4: a routed expert's input is multiplied by its weight, not its output (the experts are not linear, so
  // the two differ).
  bool expert_weight_on_input = false;
  // GPT-OSS: the router has a bias on its logits (LayerWeights::router_logit_bias: it moves both the choice
  // and the weights, unlike DeepSeek-V3's), and the experts' linears have biases.
  bool router_logit_bias = false;
  bool expert_bias = false;
  // Multi-head latent attention (DeepSeek-V2/V3, kv_lora_rank > 0). Each token caches one latent: the
  // kv_lora_rank-wide RMS-normed compression of its hidden state and a qk_rope_dim-wide key shared by
  // every head, RoPE'd (adjacent pairs; halves where V3's rope_interleave is false). The model runs it as
  // multi-query attention over that latent
  // ("absorbed": each head's query nope part is taken through its kv_b key rows into latent space, and its
  // output through its kv_b value rows), so head_dim = kv_lora_rank + qk_rope_dim is the cached width,
  // n_kv_heads = 1, and rotary_dim = qk_rope_dim (the trailing dimensions). q_lora_rank > 0: q comes
  // through a rank-q_lora_rank bottleneck with its own norm; 0: one projection.
  uint32_t q_lora_rank = 0;
  uint32_t kv_lora_rank = 0;
  uint32_t qk_nope_dim = 0;
  uint32_t v_head_dim = 0;
  // DeepSeek-V3's multi-token-prediction blocks, stored after the last block (num_nextn_predict_layers):
  // not run, as transformers does not run them.
  uint32_t nextn_layers = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;

  uint32_t q_dim() const { return n_heads * head_dim; }
  bool mla() const { return kv_lora_rank > 0; }
  // Latent attention: a head's q and k width in the checkpoint (nope + rope), and the attention output's
  // width (o_proj's input).
  uint32_t qk_head_dim() const { return qk_nope_dim + rope_dims(); }
  uint32_t attn_out_dim() const { return mla() ? n_heads * v_head_dim : q_dim(); }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }
  uint32_t rope_dims() const { return rotary_dim ? rotary_dim : head_dim; }
  // The q and k norms' widths: a head's, or the whole projection's (qk_norm_full, qk_norm_per_head); 0 without
  // them.
  uint32_t q_norm_dim() const { return !qk_norm ? 0 : qk_norm_full || qk_norm_per_head ? q_dim() : head_dim; }
  uint32_t k_norm_dim() const { return !qk_norm ? 0 : qk_norm_full || qk_norm_per_head ? kv_dim() : head_dim; }
  bool sliding(size_t layer) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[layer] != 0);
  }
  bool rope(size_t layer) const { return nope_layers.empty() || nope_layers[layer] == 0; }
  bool chunked(size_t layer) const { return attention_chunk > 0 && rope(layer); }
  // The first position a query at `position` of `layer` sees: its sliding window's or its chunk's start, or 0.
  size_t first_visible(size_t layer, size_t position) const {
    if (sliding(layer)) return position >= sliding_window ? position + 1 - sliding_window : 0;
    if (chunked(layer)) return position - position % attention_chunk;
    return 0;
  }
  // What q is multiplied by at `position` of `layer` (Llama 4's attention temperature): 1 in most layers.
  float query_temperature(size_t layer, size_t position) const;
  bool moe(size_t layer) const { return n_experts > 0 && (sparse_layers.empty() || sparse_layers[layer] != 0); }
  float attention_scale() const;
  // Throws Error naming `source` and the field when something is inconsistent.
  void Validate(const std::string& source) const;
};

// YaRN's attention magnitude scale for a context `scale` times the original (transformers' get_mscale).
double YarnMscale(double scale, double mscale);
// HunYuan's NTK-aware RoPE base: theta * alpha^(d / (d - 2)) over heads of d dimensions (the config's "dynamic" RoPE
// with alpha, and GGUF's rope.scaling.alpha).
double NtkAlphaRopeBase(double theta, double alpha, double head_dim);

// Reads a Hugging Face config.json (Llama / Mistral / Mixtral / Qwen2 / Qwen3 / Qwen2-MoE / Qwen3-MoE /
// Phi-3 / Gemma 1-3 / DeepSeek-V2/V3 / GPT-OSS / Granite / SmolLM3 / OLMo 2 / ERNIE 4.5). Unknown
// architectures are errors that list the supported ones.
// An image-text checkpoint (MultimodalText) is read as the language model of its text_config.
ModelConfig ReadHfConfig(const std::filesystem::path& config_json);
// The same for a config.json already parsed (`source` names it in errors).
ModelConfig HfConfigFromJson(const nlohmann::json& config, const std::string& source);

// Image-text checkpoints whose language model lowbit runs on text (their vision tower is not read): the wrapper's
// architecture, its text model's, the text_config model_type that text model has, the model_type the language
// model is written with (one transformers' AutoModelForCausalLM builds), a boolean field the wrapper's text
// model always has true where the written architecture's default is false (nullptr: none), and whether its attention
// heads are hidden_size / num_attention_heads wide whatever head_dim says (written out, as the text model's own
// default differs).
struct MultimodalText {
  const char* wrapper;
  const char* text;
  const char* text_model_type;
  const char* written_model_type;
  const char* implied_true = nullptr;
  bool heads_split_hidden = false;
};
inline constexpr MultimodalText kMultimodalTexts[] = {
    {"Gemma3ForConditionalGeneration", "Gemma3ForCausalLM", "gemma3_text", "gemma3_text"},  // Gemma 3 4B / 12B / 27B
    {"Mistral3ForConditionalGeneration", "MistralForCausalLM", "mistral", "mistral"},     // Mistral Small 3.1 / 3.2
    // Ministral 3 (3B / 8B / 14B): the same wrapper over a Ministral3 language model
    {"Mistral3ForConditionalGeneration", "Ministral3ForCausalLM", "ministral3", "ministral3"},
    // Mistral Small 4, Mistral Large 3: the same wrapper over a Mistral 4 (DeepSeek-V3's latent attention)
    {"Mistral3ForConditionalGeneration", "Mistral4ForCausalLM", "mistral4", "mistral4"},
    {"Llama4ForConditionalGeneration", "Llama4ForCausalLM", "llama4_text", "llama4_text"},  // Llama 4 Scout / Maverick
    {"Qwen2VLForConditionalGeneration", "Qwen2ForCausalLM", "qwen2_vl_text", "qwen2"},      // Qwen2-VL
    {"Qwen2_5_VLForConditionalGeneration", "Qwen2ForCausalLM", "qwen2_5_vl_text", "qwen2"},  // Qwen2.5-VL
    {"Qwen3VLForConditionalGeneration", "Qwen3ForCausalLM", "qwen3_vl_text", "qwen3"},      // Qwen3-VL (dense)
    // GLM-4.1V, GLM-4.6V-Flash: GLM-4 with q/k/v biases (GLM-4's default too)
    {"Glm4vForConditionalGeneration", "Glm4ForCausalLM", "glm4v_text", "glm4", nullptr, true},
    {"Glm4vMoeForConditionalGeneration", "Glm4MoeForCausalLM", "glm4v_moe_text", "glm4_moe"},  // GLM-4.5V, GLM-4.6V
    // Qwen3-VL-MoE (30B-A3B, 235B-A22B): its router always renormalizes the chosen experts' weights
    {"Qwen3VLMoeForConditionalGeneration", "Qwen3MoeForCausalLM", "qwen3_vl_moe_text", "qwen3_moe", "norm_topk_prob"},
};
inline constexpr const char* kGemma3Multimodal = "Gemma3ForConditionalGeneration";

// The entry of kMultimodalTexts for `architecture` whose language model is `text_model_type` (a wrapper's first
// entry where none is, or the type is empty), or nullptr.
inline const MultimodalText* FindMultimodalText(const std::string& architecture,
                                                const std::string& text_model_type = "") {
  const MultimodalText* first = nullptr;
  for (const MultimodalText& m : kMultimodalTexts) {
    if (architecture != m.wrapper) continue;
    if (text_model_type == m.text_model_type) return &m;
    if (!first) first = &m;
  }
  return first;
}

// text_config's model_type in `source` (an image-text config), or "" where it has none.
template <class Json>
std::string TextModelType(const Json& source) {
  if (!source.contains("text_config") || !source.at("text_config").is_object()) return "";
  const auto& text = source.at("text_config");
  return text.contains("model_type") && text.at("model_type").is_string()
             ? text.at("model_type").template get<std::string>()
             : "";
}

// Qwen-VL's multimodal RoPE (mrope_section: t / h / w positions on sections of each head) as what it is on text,
// where the three positions are one: the default RoPE. `rope` is a rope_scaling or rope_parameters object.
template <class Json>
void DropMrope(Json& rope) {
  if (!rope.is_object()) return;
  for (const char* key : {"type", "rope_type"})
    if (rope.contains(key) && rope.at(key) == "mrope") rope[key] = "default";
  rope.erase("mrope_section");
  rope.erase("mrope_interleaved");
}

// The config.json of the language model lowbit runs from `source` (nlohmann::json or ordered_json): for an
// image-text checkpoint, its text_config (or, in Qwen2-VL's flat Hub configs, the top level without the vision
// config) as its text model's, with the top level's tie_word_embeddings (where it has one) and dtype (where the text
// has none), and multimodal RoPE as the default; any other config unchanged. ReadHfConfig reads it, and the folder
// writers write it, since only the language model is written.
template <class Json>
Json TextOnlyConfig(Json source) {
  if (!source.is_object() || !source.contains("architectures")) return source;
  const auto& archs = source.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string()) return source;
  const MultimodalText* m = FindMultimodalText(archs[0].template get<std::string>(), TextModelType(source));
  if (!m) return source;
  const bool nested = source.contains("text_config");
  if (nested && !source.at("text_config").is_object()) return source;
  Json text = nested ? source.at("text_config") : source;
  if (!nested) text.erase("vision_config");
  text["architectures"] = {m->text};
  text["model_type"] = m->written_model_type;
  // transformers 5 ties the wrapper's embeddings by its top-level field (a text_config's may be its class default)
  if (source.contains("tie_word_embeddings")) text["tie_word_embeddings"] = source.at("tie_word_embeddings");
  for (const char* key : {"torch_dtype", "dtype", "transformers_version"})
    if (!text.contains(key) && source.contains(key)) text[key] = source.at(key);
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (text.contains(key)) DropMrope(text[key]);
  if (m->implied_true && !text.contains(m->implied_true)) text[m->implied_true] = true;
  if (m->heads_split_hidden && text.contains("hidden_size") && text.contains("num_attention_heads") &&
      text.at("hidden_size").is_number_unsigned() && text.at("num_attention_heads").is_number_unsigned() &&
      text.at("num_attention_heads").template get<uint64_t>() > 0)
    text["head_dim"] =
        text.at("hidden_size").template get<uint64_t>() / text.at("num_attention_heads").template get<uint64_t>();
  return text;
}

}  // namespace lowbit
