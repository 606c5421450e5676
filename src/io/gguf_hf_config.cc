#include "io/gguf_hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "io/gguf_deepseek.h"
#include "io/gguf_model.h"

namespace lowbit {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson RopeScalingJson(const RopeScaling& s) {
  switch (s.type) {
    case RopeScalingType::kNone: return nullptr;
    case RopeScalingType::kLinear: return {{"rope_type", "linear"}, {"factor", ShortestDecimal(s.factor)}};
    case RopeScalingType::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", ShortestDecimal(s.factor)},
              {"low_freq_factor", ShortestDecimal(s.low_freq_factor)},
              {"high_freq_factor", ShortestDecimal(s.high_freq_factor)},
              {"original_max_position_embeddings", s.original_max_position}};
    case RopeScalingType::kLongRope:
      return {{"type", "longrope"},
              {"short_factor", s.short_factor},
              {"long_factor", s.long_factor},
              {"original_max_position_embeddings", s.original_max_position},
              {"attention_factor", ShortestDecimal(s.attention_factor)}};
    case RopeScalingType::kYarn:
      return {{"rope_type", "yarn"},
              {"factor", ShortestDecimal(s.factor)},
              {"original_max_position_embeddings", s.original_max_position},
              {"beta_fast", ShortestDecimal(s.beta_fast)},
              {"beta_slow", ShortestDecimal(s.beta_slow)},
              {"truncate", s.truncate},
              {"attention_factor", ShortestDecimal(s.attention_factor)}};
  }
  return nullptr;
}

// Row r of the rotate-half layout is row from[r] of the adjacent one (HalfStyleRow's inverse).
std::vector<uint64_t> HalfFromAdjacent(uint64_t rows, uint32_t head_dim) {
  std::vector<uint64_t> from(rows);
  for (uint64_t r = 0; r < rows; ++r) from[HalfStyleRow(r, head_dim)] = r;
  return from;
}

void PermuteRows(Linear& l, const std::vector<uint64_t>& from) {
  if (auto* q = std::get_if<QuantizedTensor>(&l.weight)) {
    l.weight = GatherRows(*q, from);
  } else {
    DenseMatrix& d = std::get<DenseMatrix>(l.weight);
    std::vector<float> values(d.values.size());
    for (uint64_t r = 0; r < from.size(); ++r)
      std::copy_n(d.values.begin() + from[r] * d.cols(), d.cols(), values.begin() + r * d.cols());
    d.values = std::move(values);
  }
  if (!l.bias.empty()) {
    std::vector<float> bias(l.bias.size());
    for (uint64_t r = 0; r < from.size(); ++r) bias[r] = l.bias[from[r]];
    l.bias = std::move(bias);
  }
  LOWBIT_CHECK(!l.outliers);  // GGUF files have none
}

// Ernie4_5_MoeForCausalLM from an ernie4_5-moe file (the sparse layers from the dense lead to the last, every step-th,
// as llama.cpp runs them). transformers' ERNIE always biases the choice (moe_statics) and never scales the weights.
void WriteErnieMoeHfConfig(OrderedJson& j, const ModelConfig& c, const std::string& source) {
  const auto [lead, step] = ErnieMoeLayout(c);
  if (!c.router_bias)
    Fail("{}: tensor 'blk.{}.exp_probs_b.bias' is missing: Ernie4_5_MoeForCausalLM always biases its choice of experts "
         "(moe_statics)", source, lead);
  if (c.routed_scale != 1)
    Fail("{}: key 'ernie4_5-moe.expert_weights_scale' ({}): Ernie4_5_MoeForCausalLM does not scale the experts' "
         "weights", source, c.routed_scale);
  if (c.shared_expert_ffn_dim % c.expert_ffn_dim != 0)
    Fail("{}: key 'ernie4_5-moe.expert_shared_feed_forward_length' ({}) is not a whole number of experts of {}", source,
         c.shared_expert_ffn_dim, c.expert_ffn_dim);
  j["moe_num_experts"] = c.n_experts;
  j["moe_k"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.expert_ffn_dim;
  j["moe_num_shared_experts"] = c.shared_expert_ffn_dim / c.expert_ffn_dim;
  j["moe_layer_start_index"] = lead;
  j["moe_layer_end_index"] = -1;
  j["moe_layer_interval"] = step;
}

// Ministral3Config's and Mistral4Config's RoPE object (rope_parameters, replacing rope_theta and rope_scaling):
// rope_scaling's (YaRN's, or the default) with the base and the query temperature's llama_4_scaling_beta, whose
// floor is the object's original_max_position_embeddings, YaRN's original context too where there is YaRN.
void WriteLlama4ScalingRope(OrderedJson& j, const ModelConfig& c, const std::string& source) {
  const bool yarn = j.contains("rope_scaling") && j["rope_scaling"].is_object();
  OrderedJson rope = yarn ? j["rope_scaling"] : OrderedJson{{"rope_type", "default"}};
  const uint32_t original = yarn                            ? c.rope_scaling.original_max_position
                            : c.attn_temperature_floor > 0 ? c.attn_temperature_floor
                                                           : c.max_position;
  if (c.attn_temperature_floor > 0 && c.attn_temperature_floor != original)
    Fail("{}: the query temperature's floor ({}) is not YaRN's original context ({}), which is {}'s one "
         "original_max_position_embeddings", source, c.attn_temperature_floor, original,
         j["architectures"][0].get<std::string>());
  rope["rope_theta"] = ShortestDecimal(c.rope_theta);
  rope["original_max_position_embeddings"] = original;
  rope["llama_4_scaling_beta"] = ShortestDecimal(c.attn_temperature_scale);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = std::move(rope);
}

// Llama4TextConfig's fields for what llama.cpp's llama4 runs (gguf_model.cc: ReadLlama4Keys), each spelled out.
void WriteLlama4HfConfig(OrderedJson& j, const ModelConfig& c) {
  j["intermediate_size"] = c.expert_ffn_dim;
  j["intermediate_size_mlp"] = c.ffn_dim;
  j["num_local_experts"] = c.n_experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  OrderedJson sparse = OrderedJson::array(), rope = OrderedJson::array(), types = OrderedJson::array();
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    if (c.moe(i)) sparse.push_back(i);
    rope.push_back(c.rope(i) ? 1 : 0);
    types.push_back(c.chunked(i) ? "chunked_attention" : "full_attention");
  }
  j["moe_layers"] = std::move(sparse);
  j["no_rope_layers"] = std::move(rope);
  j["layer_types"] = std::move(types);
  j["attention_chunk_size"] = c.attention_chunk > 0 ? OrderedJson(c.attention_chunk) : OrderedJson();
  j["use_qk_norm"] = c.qk_norm_unweighted;
  j["attn_temperature_tuning"] = c.attn_temperature_floor > 0;
  if (c.attn_temperature_floor > 0) {
    j["floor_scale"] = c.attn_temperature_floor;
    j["attn_scale"] = ShortestDecimal(c.attn_temperature_scale);
  }
}

}  // namespace

OrderedJson HfConfigOfGguf(const ModelConfig& c, const std::string& arch, const std::string& torch_dtype,
                           const std::string& source) {
  const bool moe = c.n_experts > 0;
  // general.architecture -> transformers' class and model_type (llama.cpp's converter maps Mistral to llama, and
  // Mixtral to llama with experts).
  struct Family {
    std::string_view gguf, architecture, model_type;
  };
  static constexpr Family kFamilies[] = {{"llama", "LlamaForCausalLM", "llama"},
                                         {"qwen2", "Qwen2ForCausalLM", "qwen2"},
                                         {"qwen3", "Qwen3ForCausalLM", "qwen3"},
                                         {"qwen2vl", "Qwen2ForCausalLM", "qwen2"},  // the language model, on text
                                         {"qwen3vl", "Qwen3ForCausalLM", "qwen3"},
                                         {"qwen3vlmoe", "Qwen3MoeForCausalLM", "qwen3_moe"},
                                         {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe"},
                                         {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
                                         {"gemma", "GemmaForCausalLM", "gemma"},
                                         {"gemma2", "Gemma2ForCausalLM", "gemma2"},
                                         {"gemma3", "Gemma3ForCausalLM", "gemma3_text"},
                                         {"phi3", "Phi3ForCausalLM", "phi3"},
                                         {"gpt-oss", "GptOssForCausalLM", "gpt_oss"},
                                         {"granite", "GraniteForCausalLM", "granite"},
                                         // GraniteMoeSharedForCausalLM where the file has a shared expert
                                         {"granitemoe", "GraniteMoeForCausalLM", "granitemoe"},
                                         {"smollm3", "SmolLM3ForCausalLM", "smollm3"},
                                         {"olmo2", "Olmo2ForCausalLM", "olmo2"},
                                         {"ernie4_5", "Ernie4_5ForCausalLM", "ernie4_5"},
                                         {"glm4", "Glm4ForCausalLM", "glm4"},
                                         {"chatglm", "GlmForCausalLM", "glm"},
                                         {"glm4moe", "Glm4MoeForCausalLM", "glm4_moe"},
                                         {"exaone4", "Exaone4ForCausalLM", "exaone4"},
                                         {"seed_oss", "SeedOssForCausalLM", "seed_oss"},
                                         {"ernie4_5-moe", "Ernie4_5_MoeForCausalLM", "ernie4_5_moe"},
                                         {"command-r", "CohereForCausalLM", "cohere"},
                                         {"cohere2", "Cohere2ForCausalLM", "cohere2"},
                                         {"llama4", "Llama4ForCausalLM", "llama4_text"},
                                         {"mistral3", "Ministral3ForCausalLM", "ministral3"},
                                         {"minimax-m2", "MiniMaxM2ForCausalLM", "minimax_m2"},
                                         {"olmoe", "OlmoeForCausalLM", "olmoe"},
                                         {"hunyuan-dense", "HunYuanDenseV1ForCausalLM", "hunyuan_v1_dense"},
                                         {"hunyuan-moe", "HunYuanMoEV1ForCausalLM", "hunyuan_v1_moe"},
                                         // DeepseekV3ForCausalLM where the file gates by sigmoid
                                         {"deepseek2", "DeepseekV2ForCausalLM", "deepseek_v2"},
                                         // (Mistral4ForCausalLM where the file routes or scales as Mistral 4 does)
                                         {"mistral4", "DeepseekV2ForCausalLM", "deepseek_v2"}};
  const Family* family = nullptr;
  for (const Family& f : kFamilies)
    if (f.gguf == arch) family = &f;
  if (!family) {
    std::string names;
    for (const Family& f : kFamilies) names += fmt::format("{}{}", names.empty() ? "" : ", ", f.gguf);
    Fail("{}: general.architecture '{}': lowbit writes Hugging Face folders of {} GGUF files", source, arch, names);
  }
  const bool mixtral = arch == "llama" && moe, gemma = arch.starts_with("gemma"), phi3 = arch == "phi3",
             deepseek = arch == "deepseek2" || arch == "mistral4", gpt_oss = arch == "gpt-oss",
             glm = arch == "glm4" || arch == "chatglm",
             cohere = arch == "command-r" || arch == "cohere2", glm4moe = arch == "glm4moe";
  const bool olmo3 = arch == "olmo2" && c.sliding_window > 0;  // llama.cpp runs OLMo 3 as olmo2 with its windows
  const bool granite_shared = arch == "granitemoe" && c.shared_expert_ffn_dim > 0;
  const std::string architecture(mixtral          ? "MixtralForCausalLM"
                                 : olmo3          ? "Olmo3ForCausalLM"
                                 : granite_shared ? "GraniteMoeSharedForCausalLM"
                                                  : std::string(family->architecture));
  if ((arch == "llama" || arch == "granite" || arch == "granitemoe" || arch == "olmo2" || arch == "olmoe" ||
       arch == "llama4" || cohere ||
       arch.starts_with("hunyuan")) &&
      c.qkv_bias != c.o_bias)
    Fail("{}: tensor 'blk.0.{}.bias': {}'s attention_bias biases q/k/v and o_proj together; this file biases only {}",
         source, c.qkv_bias ? "attn_output" : "attn_q", architecture, c.qkv_bias ? "q/k/v" : "o_proj");
  if (olmo3 && c.local_rope_theta > 0)
    Fail("{}: key 'olmo2.rope.freq_base_swa' ({}): Olmo3ForCausalLM has one RoPE base ({})", source, c.local_rope_theta,
         c.rope_theta);
  if ((glm || glm4moe) && c.o_bias)  // GLM's attention_bias biases q/k/v, never o_proj
    Fail("{}: tensor 'blk.0.attn_output.bias': {} has no bias on o_proj", source, architecture);
  if (c.rotary_dim != 0 && !phi3 && !deepseek && !glm && !glm4moe && arch != "minimax-m2")
    Fail("{}: key '{}.rope.dimension_count' ({}): partial rotary embeddings have no field in {}", source, arch,
         c.rotary_dim, architecture);
  if ((c.rope_scaling.type == RopeScalingType::kLongRope) != phi3 ||
      (c.sliding_window != 0 && !gemma && !phi3 && !gpt_oss && arch != "cohere2" && !olmo3 && arch != "exaone4"))
    Fail("{}: {} has no field for this file's {}", source, architecture,
         c.sliding_window ? "sliding window" : "RoPE scaling");
  OrderedJson j = {{"architectures", {architecture}},
                   {"model_type", mixtral          ? "mixtral"
                                  : olmo3          ? "olmo3"
                                  : granite_shared ? "granitemoeshared"
                                                   : std::string(family->model_type)},
                   {"vocab_size", c.vocab_size},
                   {"hidden_size", c.dim},
                   {"intermediate_size", c.ffn_dim},
                   {"num_hidden_layers", c.n_layers},
                   {"num_attention_heads", c.n_heads},
                   {"num_key_value_heads", c.n_kv_heads},
                   {"head_dim", c.head_dim},
                   {"max_position_embeddings", c.max_position},
                   {"rms_norm_eps", ShortestDecimal(c.norm_eps)},
                   {"rope_theta", ShortestDecimal(c.rope_theta)},
                   {"rope_scaling", RopeScalingJson(c.rope_scaling)},
                   {"tie_word_embeddings", c.tie_embeddings},
                   {"hidden_act", "silu"},
                   {"attention_bias", c.qkv_bias && c.o_bias},
                   {"bos_token_id", c.bos_id},
                   {"eos_token_id", c.eos_id},
                   {"torch_dtype", torch_dtype}};
  // implied by the architecture
  if (arch == "qwen2" || arch == "qwen2vl" || arch == "qwen2moe") j.erase("attention_bias");
  if (arch.starts_with("qwen")) j["use_sliding_window"] = false;
  if (deepseek) {
    WriteDeepSeekHfConfig(j, c, source);
  } else if (arch == "ernie4_5-moe") {
    WriteErnieMoeHfConfig(j, c, source);
  } else if (glm4moe) {
    WriteGlm4MoeHfConfig(j, c, source);
  } else if (arch == "llama4") {
    WriteLlama4HfConfig(j, c);
  } else if (gpt_oss) {  // llama.cpp's constants and layout (gguf_model.cc: ReadGptOssKeys)
    j["intermediate_size"] = c.expert_ffn_dim;
    j["num_local_experts"] = c.n_experts;
    j["num_experts_per_tok"] = c.experts_per_token;
    j["swiglu_alpha"] = ShortestDecimal(c.swiglu_alpha);
    j["swiglu_limit"] = ShortestDecimal(c.swiglu_limit);
  } else if (arch == "minimax-m2") {  // llama.cpp's layout (gguf_model.cc): experts everywhere, exp_probs_b
    if (c.router_scoring != RouterScoring::kSigmoid)
      Fail("{}: key 'minimax-m2.expert_gating_func': MiniMaxM2ForCausalLM scores its experts by sigmoid", source);
    j["intermediate_size"] = c.expert_ffn_dim;
    j["num_local_experts"] = c.n_experts;
    j["num_experts_per_tok"] = c.experts_per_token;
    j["rotary_dim"] = c.rope_dims();
    j["partial_rotary_factor"] = ShortestDecimal(static_cast<float>(c.rope_dims()) / c.head_dim);
  } else if (arch == "hunyuan-moe") {  // every layer, experts and the shared MLP of intermediate_size
    if (c.expert_ffn_dim != c.ffn_dim || c.shared_expert_ffn_dim != c.ffn_dim || c.shared_expert_gated ||
        !c.norm_expert_weights || !c.sparse_layers.empty())
      Fail("{}: HunYuanMoEV1ForCausalLM runs experts and an ungated shared MLP of intermediate_size in every layer, "
           "renormalized", source);
    j["num_experts"] = c.n_experts;
    j["moe_topk"] = c.experts_per_token;
  } else if (moe) {
    j[arch == "llama" || arch == "granitemoe" ? "num_local_experts" : "num_experts"] = c.n_experts;
    j["num_experts_per_tok"] = c.experts_per_token;
    if (granite_shared) j["shared_intermediate_size"] = c.shared_expert_ffn_dim;
    if (arch != "llama" && arch != "granitemoe") {
      j["moe_intermediate_size"] = c.expert_ffn_dim;
      j["norm_topk_prob"] = c.norm_expert_weights;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = OrderedJson::array();
      if (arch == "qwen2moe") j["shared_expert_intermediate_size"] = c.shared_expert_ffn_dim;
    }
  }
  if (c.sliding_window != 0) {  // Gemma 2/3's local layers, Phi-3's window on every layer
    j["sliding_window"] = c.sliding_window;
    if (!c.sliding_layers.empty()) {
      OrderedJson types = OrderedJson::array();
      for (const uint8_t sliding : c.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
      j["layer_types"] = std::move(types);
    }
  } else if (arch == "exaone4") {  // Exaone4Config's default would be a window of 4096, and without one it needs
    j["sliding_window"] = nullptr;   // the layer types spelled out
    j["layer_types"] = OrderedJson(std::vector<std::string>(c.n_layers, "full_attention"));
  }
  if (gemma) {
    // GeGLU, (1 + w) norms and scaled embeddings are the architecture's; llama.cpp's attention scale becomes the
    // query_pre_attn_scalar it implies (Gemma 2 27B: hidden / heads).
    j.erase("hidden_act");
    j["hidden_activation"] = "gelu_pytorch_tanh";
    if (arch != "gemma") {
      const double scalar = 1.0 / (static_cast<double>(c.attention_scale()) * c.attention_scale());
      j["query_pre_attn_scalar"] = std::abs(scalar - std::round(scalar)) < 1e-3 * scalar ? std::round(scalar) : scalar;
      const auto cap = [](float x) { return x > 0 ? OrderedJson(ShortestDecimal(x)) : OrderedJson(); };
      j["final_logit_softcapping"] = cap(c.final_softcap);
      j["attn_logit_softcapping"] = cap(c.attn_softcap);
    }
    if (arch == "gemma3" && c.local_rope_theta > 0) j["rope_local_base_freq"] = ShortestDecimal(c.local_rope_theta);
  }
  if (arch == "ernie4_5" || arch == "ernie4_5-moe") j["use_bias"] = false;
  // Ministral 3's and Mistral 4's RoPE objects carry the query temperature, which their attention requires
  if (arch == "mistral3" || j["architectures"][0] == "Mistral4ForCausalLM") WriteLlama4ScalingRope(j, c, source);
  if (arch == "seed_oss") {  // q/k/v's and o_proj's biases are separate fields
    j["attention_bias"] = c.qkv_bias;
    j["attention_out_bias"] = c.o_bias;
  }
  if (cohere) {  // LayerNorm's epsilon, the logit multiplier, Command R+'s per-head q/k norms
    j.erase("rms_norm_eps");
    j["layer_norm_eps"] = ShortestDecimal(c.norm_eps);
    j["logit_scale"] = ShortestDecimal(c.logit_multiplier);
    if (arch == "command-r") j["use_qk_norm"] = c.qk_norm;
  }
  if (glm) {  // GLM's attention_bias is q/k/v's alone; its rotary fraction is a field (default 0.5)
    j["attention_bias"] = c.qkv_bias;
    j["partial_rotary_factor"] = ShortestDecimal(static_cast<float>(c.rope_dims()) / c.head_dim);
  }  // its biases (none in the files llama.cpp runs) are all or none
  if (arch == "smollm3") {  // 1: RoPE, 0: none (every fourth layer in llama.cpp)
    OrderedJson flags = OrderedJson::array();
    for (uint32_t i = 0; i < c.n_layers; ++i) flags.push_back(c.rope(i) ? 1 : 0);
    j["no_rope_layers"] = std::move(flags);
    j["use_sliding_window"] = false;
  }
  // transformers' multipliers, each 1 by default (the attention scale too)
  if (arch == "granite" || arch == "granitemoe") {
    j["embedding_multiplier"] = ShortestDecimal(c.embed_scale);
    j["attention_multiplier"] = ShortestDecimal(c.attention_scale());
    j["residual_multiplier"] = ShortestDecimal(c.residual_scale);
    j["logits_scaling"] = ShortestDecimal(c.logit_scale);
  }
  if (phi3) {
    j.erase("head_dim");  // hidden / heads, which Phi3Config derives
    if (c.rotary_dim != 0) j["partial_rotary_factor"] = ShortestDecimal(static_cast<float>(c.rotary_dim) / c.head_dim);
    if (c.rope_scaling.type == RopeScalingType::kLongRope)
      j["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
  }
  return j;
}

void ToRotateHalf(Model& m) {
  ModelConfig& c = m.config;
  // Latent attention, ERNIE 4.5, GLM and Cohere keep adjacent pairs: their own checkpoints' order (DeepSeek-V2
  // always, V3 with rope_interleave; the others always).
  if (c.rope_style == RopeStyle::kHalf || c.mla() || c.architecture.starts_with("gguf:ernie4_5") ||
      c.architecture == "gguf:glm4" || c.architecture == "gguf:chatglm" || c.architecture == "gguf:command-r" ||
      c.architecture == "gguf:cohere2")
    return;
  const std::vector<uint64_t> q = HalfFromAdjacent(c.q_dim(), c.head_dim), k = HalfFromAdjacent(c.kv_dim(), c.head_dim);
  for (LayerWeights& layer : m.weights.layers) {
    PermuteRows(layer.wq, q);
    PermuteRows(layer.wk, k);
  }
  c.rope_style = RopeStyle::kHalf;
}

}  // namespace lowbit
