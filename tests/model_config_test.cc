// config.json as the Hub ships it for Phi-3.5, Gemma 2 and Gemma 3 (transformers 4.x field names:
// rope_scaling, rope_local_base_freq, sliding_window_pattern), and the RoPE frequencies they give,
// against values derived by hand from the papers' formulas. The architectures' forward passes are
// checked against transformers itself in architecture_fixture_test.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/forward.h"
#include "plan/arch.h"
#include "test_util.h"

namespace lowbit {
namespace {

ModelConfig Read(const nlohmann::json& config, const testing_util::ScratchDir& dir) {
  std::ofstream(dir / "config.json") << config.dump();
  return ReadHfConfig(dir / "config.json");
}

std::string ErrorOf(const nlohmann::json& config, const testing_util::ScratchDir& dir) {
  try {
    Read(config, dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Phi-3.5-mini-instruct's config.json (the factor lists shortened to their pattern).
nlohmann::json Phi35() {
  std::vector<double> short_factor, long_factor;
  for (int i = 0; i < 48; ++i) {
    short_factor.push_back(1.0 + 0.01 * i);
    long_factor.push_back(1.0 + 1.0 * i);
  }
  return {{"architectures", {"Phi3ForCausalLM"}}, {"model_type", "phi3"}, {"hidden_size", 3072},
          {"intermediate_size", 8192}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
          {"num_hidden_layers", 32}, {"vocab_size", 32064}, {"max_position_embeddings", 131072},
          {"original_max_position_embeddings", 4096}, {"rope_theta", 10000.0}, {"rms_norm_eps", 1e-05},
          {"sliding_window", 262144}, {"tie_word_embeddings", false}, {"hidden_act", "silu"},
          {"bos_token_id", 1}, {"eos_token_id", 32000},
          {"rope_scaling", {{"type", "longrope"}, {"short_factor", short_factor}, {"long_factor", long_factor}}}};
}

TEST(ModelConfig, Phi35LongRope) {
  testing_util::ScratchDir dir("lowbit-config");
  const ModelConfig c = Read(Phi35(), dir);
  EXPECT_EQ(c.head_dim, 96u);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position, 4096u);
  // factor = 131072 / 4096 = 32; attention factor sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12).
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_NEAR(c.rope_scaling.attention_factor, std::sqrt(17.0 / 12.0), 1e-6);
  EXPECT_EQ(c.sliding_window, 262144u);
  EXPECT_TRUE(c.sliding(0) && c.sliding(31));
  EXPECT_EQ(c.activation, FfnActivation::kSilu);
  EXPECT_FALSE(c.norm_plus_one);

  // inv_freq[i] = 1 / (factor_i * 10000^(2i / 96)), short or long.
  const std::vector<float> shorter = RopeInverseFrequencies(c, RopeVariant::kDefault);
  const std::vector<float> longer = RopeInverseFrequencies(c, RopeVariant::kLong);
  ASSERT_EQ(shorter.size(), 48u);
  for (const size_t i : {size_t{0}, size_t{7}, size_t{47}}) {
    const double base = std::pow(10000.0, 2.0 * i / 96.0);
    EXPECT_NEAR(shorter[i], 1 / ((1.0 + 0.01 * i) * base), 1e-6 / base) << i;
    EXPECT_NEAR(longer[i], 1 / ((1.0 + 1.0 * i) * base), 1e-6 / base) << i;
  }

  nlohmann::json bad = Phi35();
  bad["rope_scaling"]["short_factor"] = std::vector<double>(47, 1.0);
  EXPECT_NE(ErrorOf(bad, dir).find("48 entries"), std::string::npos) << ErrorOf(bad, dir);
  bad = Phi35();
  bad["rope_scaling"]["type"] = "dynamic";
  EXPECT_NE(ErrorOf(bad, dir).find("rope_scaling: rope type 'dynamic' is not supported"), std::string::npos)
      << ErrorOf(bad, dir);
  // Phi-4-mini: a quarter of each head is not rotated.
  nlohmann::json partial = Phi35();
  partial["partial_rotary_factor"] = 0.75;
  partial["rope_scaling"]["short_factor"] = std::vector<double>(36, 1.0);
  partial["rope_scaling"]["long_factor"] = std::vector<double>(36, 2.0);
  EXPECT_EQ(Read(partial, dir).rope_dims(), 72u);
}

TEST(ModelConfig, Gemma2) {
  testing_util::ScratchDir dir("lowbit-config");
  // gemma-2-2b's config.json.
  const nlohmann::json gemma2 = {
      {"architectures", {"Gemma2ForCausalLM"}}, {"model_type", "gemma2"}, {"hidden_size", 2304},
      {"intermediate_size", 9216}, {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
      {"num_hidden_layers", 26}, {"vocab_size", 256000}, {"max_position_embeddings", 8192},
      {"rms_norm_eps", 1e-06}, {"rope_theta", 10000.0}, {"hidden_act", "gelu_pytorch_tanh"},
      {"hidden_activation", "gelu_pytorch_tanh"}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
      {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}, {"bos_token_id", 2},
      {"eos_token_id", 1}, {"pad_token_id", 0}};
  const ModelConfig c = Read(gemma2, dir);
  EXPECT_EQ(c.activation, FfnActivation::kGeluTanh);
  EXPECT_TRUE(c.norm_plus_one && c.sandwich_norms && c.tie_embeddings && !c.qk_norm);
  EXPECT_FLOAT_EQ(c.embed_scale, 48.0f);  // sqrt(2304)
  EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / 16);
  for (uint32_t i = 0; i < c.n_layers; ++i) EXPECT_EQ(c.sliding(i), i % 2 == 0) << i;  // local first

  nlohmann::json typed = gemma2;  // transformers >= 5 lists the layer types
  typed["num_hidden_layers"] = 3;
  typed["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  const ModelConfig t = Read(typed, dir);
  EXPECT_TRUE(!t.sliding(0) && t.sliding(1) && !t.sliding(2));
  typed["layer_types"][2] = "chunked_attention";
  EXPECT_NE(ErrorOf(typed, dir).find("layer_types[2]: 'chunked_attention'"), std::string::npos) << ErrorOf(typed, dir);
  typed = gemma2;
  typed["hidden_activation"] = "relu";
  EXPECT_NE(ErrorOf(typed, dir).find("hidden_activation: activation 'relu'"), std::string::npos) << ErrorOf(typed, dir);
}

TEST(ModelConfig, Gemma3LocalAndGlobalRope) {
  testing_util::ScratchDir dir("lowbit-config");
  // gemma-3-4b's text config as a Gemma3ForCausalLM (linear scaling of the global layers).
  nlohmann::json gemma3 = {
      {"architectures", {"Gemma3ForCausalLM"}}, {"model_type", "gemma3_text"}, {"hidden_size", 2560},
      {"intermediate_size", 10240}, {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
      {"num_hidden_layers", 34}, {"vocab_size", 262208}, {"max_position_embeddings", 131072},
      {"rms_norm_eps", 1e-06}, {"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0},
      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}, {"query_pre_attn_scalar", 256},
      {"sliding_window", 1024}, {"sliding_window_pattern", 6}, {"attn_logit_softcapping", nullptr},
      {"final_logit_softcapping", nullptr}, {"hidden_activation", "gelu_pytorch_tanh"}};
  const ModelConfig c = Read(gemma3, dir);
  EXPECT_TRUE(c.qk_norm && c.sandwich_norms && c.norm_plus_one);
  EXPECT_EQ(c.attn_softcap, 0.0f);
  EXPECT_EQ(c.final_softcap, 0.0f);
  for (uint32_t i = 0; i < c.n_layers; ++i) EXPECT_EQ(c.sliding(i), (i + 1) % 6 != 0) << i;  // 5 local, 1 global
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLinear);
  const std::vector<float> global = RopeInverseFrequencies(c, RopeVariant::kDefault);
  const std::vector<float> local = RopeInverseFrequencies(c, RopeVariant::kLocal);
  for (const size_t i : {size_t{0}, size_t{5}, size_t{127}}) {
    const double g = 1 / (8.0 * std::pow(1e6, 2.0 * i / 256)), l = 1 / std::pow(1e4, 2.0 * i / 256);
    EXPECT_NEAR(global[i], g, 1e-5 * g) << i;
    EXPECT_NEAR(local[i], l, 1e-5 * l) << i;
  }
  // transformers >= 5: one rope_parameters object per layer type.
  gemma3.erase("rope_theta");
  gemma3.erase("rope_local_base_freq");
  gemma3.erase("rope_scaling");
  gemma3["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  const ModelConfig v5 = Read(gemma3, dir);
  EXPECT_EQ(v5.rope_theta, 1e6f);
  EXPECT_EQ(v5.local_rope_theta, 1e4f);
  EXPECT_EQ(v5.rope_scaling.factor, 8.0f);
  gemma3["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  gemma3["rope_parameters"]["sliding_attention"]["factor"] = 2.0;
  EXPECT_NE(ErrorOf(gemma3, dir).find("rope_parameters.sliding_attention: RoPE scaling on sliding layers"),
            std::string::npos) << ErrorOf(gemma3, dir);
}

// MiniMax-M2's config.json in its release's shape (the FP8 quantization_config left to engine_checkpoint_test): its
// legacy rotary_dim, full attention in every layer, sigmoid routing with the correction bias, no shared expert.
TEST(ModelConfig, MiniMaxM2AsReleased) {
  testing_util::ScratchDir dir("lowbit-config");
  nlohmann::json m = {{"architectures", {"MiniMaxM2ForCausalLM"}}, {"model_type", "minimax_m2"},
                      {"attn_type_list", std::vector<int>(62, 1)}, {"head_dim", 128}, {"hidden_size", 3072},
                      {"intermediate_size", 1536}, {"max_position_embeddings", 196608}, {"num_attention_heads", 48},
                      {"num_experts_per_tok", 8}, {"num_hidden_layers", 62}, {"num_key_value_heads", 8},
                      {"num_local_experts", 256}, {"qk_norm_type", "per_layer"}, {"rms_norm_eps", 1e-06},
                      {"rope_theta", 5000000}, {"rotary_dim", 64}, {"scoring_func", "sigmoid"},
                      {"shared_intermediate_size", 0}, {"tie_word_embeddings", false}, {"use_qk_norm", true},
                      {"use_routing_bias", true}, {"vocab_size", 200064}};
  const ModelConfig c = Read(m, dir);
  EXPECT_EQ(c.rope_dims(), 64u);
  EXPECT_EQ(c.rope_style, RopeStyle::kHalf);
  EXPECT_TRUE(c.qk_norm && c.qk_norm_full && c.pre_norms);
  EXPECT_EQ(c.q_norm_dim(), 48u * 128u);
  EXPECT_EQ(c.n_experts, 256u);
  EXPECT_EQ(c.expert_ffn_dim, 1536u);
  EXPECT_TRUE(c.sparse_layers.empty());
  EXPECT_EQ(c.router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.router_bias && c.norm_expert_weights);
  EXPECT_EQ(c.shared_expert_ffn_dim, 0u);
  nlohmann::json lightning = m;
  lightning["attn_type_list"][5] = 0;
  EXPECT_NE(ErrorOf(lightning, dir).find("attn_type_list[5]: lightning attention"), std::string::npos)
      << ErrorOf(lightning, dir);
  nlohmann::json softmax = m;
  softmax["scoring_func"] = "softmax";
  EXPECT_NE(ErrorOf(softmax, dir).find("scoring_func: 'softmax' is not MiniMax-M2's"), std::string::npos)
      << ErrorOf(softmax, dir);
}

// Ministral 3 8B's config.json in its release's shape (Mistral3ForConditionalGeneration over a ministral3 language
// model; the vision config left out): YaRN whose mscale and mscale_all_dim cancel, and every layer's query scaled
// from YaRN's original context on, as transformers' Ministral3Attention does.
TEST(ModelConfig, Ministral3AsReleased) {
  testing_util::ScratchDir dir("lowbit-config");
  nlohmann::json text = {
      {"model_type", "ministral3"}, {"head_dim", 128}, {"hidden_act", "silu"}, {"hidden_size", 4096},
      {"intermediate_size", 14336}, {"max_position_embeddings", 262144}, {"num_attention_heads", 32},
      {"num_hidden_layers", 34}, {"num_key_value_heads", 8}, {"rms_norm_eps", 1e-05}, {"sliding_window", nullptr},
      {"tie_word_embeddings", false}, {"vocab_size", 131072},
      {"rope_parameters", {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 16.0}, {"llama_4_scaling_beta", 0.1},
                           {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 16384},
                           {"rope_theta", 1000000.0}, {"rope_type", "yarn"}}}};
  nlohmann::json ministral = {{"architectures", {"Mistral3ForConditionalGeneration"}}, {"model_type", "mistral3"},
                              {"text_config", text}, {"vision_config", {{"model_type", "pixtral"}}}};
  const ModelConfig c = Read(ministral, dir);
  EXPECT_EQ(c.architecture, "Ministral3ForCausalLM");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 16.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, 1.0f);  // (0.1 ln 16 + 1) / (0.1 ln 16 + 1)
  EXPECT_EQ(c.attn_temperature_floor, 16384u);
  EXPECT_TRUE(c.attn_temperature_every_layer);
  EXPECT_FLOAT_EQ(c.query_temperature(0, 16383), 1.0f);
  EXPECT_FLOAT_EQ(c.query_temperature(0, 16384), static_cast<float>(1 + 0.1 * std::log(2.0)));  // floor 1, not 1 + 1
  EXPECT_FLOAT_EQ(c.query_temperature(33, 3 * 16384 + 5), static_cast<float>(1 + 0.1 * std::log(4.0)));
  EXPECT_EQ(TextOnlyConfig(ministral)["architectures"], nlohmann::json({"Ministral3ForCausalLM"}));
  nlohmann::json no_beta = ministral;
  no_beta["text_config"]["rope_parameters"].erase("llama_4_scaling_beta");
  EXPECT_NE(ErrorOf(no_beta, dir).find("text_config.rope_parameters: missing 'llama_4_scaling_beta'"),
            std::string::npos) << ErrorOf(no_beta, dir);
  nlohmann::json other = ministral;
  other["text_config"]["model_type"] = "mistral5";
  EXPECT_NE(ErrorOf(other, dir).find("'mistral5' is not a language model lowbit runs in "
                                     "Mistral3ForConditionalGeneration (mistral, ministral3, mistral4)"),
            std::string::npos) << ErrorOf(other, dir);
}

// Llama 4 Scout's config.json in its release's shape (Llama4ForConditionalGeneration, transformers 4.51's fields:
// attn_temperature_tuning as the integer 4, rope_scaling with high_freq_factor 1; the vision config left out):
// the language model read with every layer sparse, 36 of 48 layers chunked, and `plan` holding those layers' KV
// cache to a chunk.
TEST(ModelConfig, Llama4ScoutAsReleased) {
  testing_util::ScratchDir dir("lowbit-config");
  std::vector<int> no_rope, moe_layers;
  for (int i = 0; i < 48; ++i) {
    no_rope.push_back((i + 1) % 4 != 0);
    moe_layers.push_back(i);
  }
  nlohmann::json text = {
      {"model_type", "llama4_text"}, {"attention_bias", false}, {"attention_chunk_size", 8192}, {"attn_scale", 0.1},
      {"attn_temperature_tuning", 4}, {"bos_token_id", 200000}, {"eos_token_id", {200001, 200007, 200008}},
      {"floor_scale", 8192}, {"head_dim", 128}, {"hidden_act", "silu"}, {"hidden_size", 5120},
      {"interleave_moe_layer_step", 1}, {"intermediate_size", 8192}, {"intermediate_size_mlp", 16384},
      {"max_position_embeddings", 10485760}, {"moe_layers", moe_layers}, {"no_rope_layers", no_rope},
      {"num_attention_heads", 40}, {"num_experts_per_tok", 1}, {"num_hidden_layers", 48},
      {"num_key_value_heads", 8}, {"num_local_experts", 16}, {"pad_token_id", 200018}, {"rms_norm_eps", 1e-05},
      {"rope_scaling", {{"factor", 16.0}, {"high_freq_factor", 1.0}, {"low_freq_factor", 1.0},
                        {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
      {"rope_theta", 500000.0}, {"use_qk_norm", true}, {"vocab_size", 202048}};
  nlohmann::json scout = {{"architectures", {"Llama4ForConditionalGeneration"}}, {"model_type", "llama4"},
                          {"text_config", text}, {"vision_config", {{"model_type", "llama4_vision_model"}}},
                          {"tie_word_embeddings", false}};
  const ModelConfig c = Read(scout, dir);
  EXPECT_EQ(c.architecture, "Llama4ForCausalLM");
  EXPECT_EQ(c.n_experts, 16u);
  EXPECT_EQ(c.expert_ffn_dim, 8192u);
  EXPECT_EQ(c.shared_expert_ffn_dim, 8192u);
  EXPECT_EQ(c.ffn_dim, 16384u);
  EXPECT_TRUE(c.sparse_layers.empty());  // every layer
  EXPECT_TRUE(c.expert_weight_on_input && c.qk_norm_unweighted && !c.shared_expert_gated);
  EXPECT_EQ(c.attn_temperature_floor, 8192u);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacent);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c.bos_id, 200000);
  EXPECT_EQ(c.eos_id, 200001);
  for (const uint32_t i : {0u, 2u, 3u, 47u}) EXPECT_EQ(c.chunked(i), (i + 1) % 4 != 0) << i;
  EXPECT_EQ(c.first_visible(0, 8191), 0u);
  EXPECT_EQ(c.first_visible(0, 8192), 8192u);
  EXPECT_EQ(c.first_visible(3, 20000), 0u);
  EXPECT_FLOAT_EQ(c.query_temperature(3, 8190), 1.0f);
  // floor(16384 / 8192) = 2
  EXPECT_FLOAT_EQ(c.query_temperature(3, 16383), static_cast<float>(1 + 0.1 * std::log(3.0)));
  EXPECT_FLOAT_EQ(c.query_temperature(2, 16383), 1.0f);  // RoPE layers: none
  const ModelArch a = ArchFromConfig(c, "scout");
  EXPECT_EQ(a.window_layers, 36u);
  EXPECT_EQ(a.sliding_window, 8192u);
  scout["text_config"]["layer_types"] = std::vector<std::string>(48, "chunked_attention");
  EXPECT_NE(ErrorOf(scout, dir).find("text_config.layer_types: layer 3 is 'chunked_attention'"), std::string::npos)
      << ErrorOf(scout, dir);
}

// Qwen2.5-VL-7B-Instruct's config.json as the Hub ships it: flat (the language model's fields at the top level beside
// vision_config), multimodal RoPE in rope_scaling. Its language model is read as the Qwen2 it is on text, and written
// as one: the top level without the vision config, model_type qwen2, the RoPE sections dropped.
TEST(ModelConfig, Qwen25VlFlatHubConfig) {
  testing_util::ScratchDir dir("lowbit-config");
  const nlohmann::json vl = {
      {"architectures", {"Qwen2_5_VLForConditionalGeneration"}}, {"model_type", "qwen2_5_vl"},
      {"bos_token_id", 151643}, {"eos_token_id", 151645}, {"image_token_id", 151655}, {"hidden_act", "silu"},
      {"hidden_size", 3584}, {"intermediate_size", 18944}, {"max_position_embeddings", 128000},
      {"max_window_layers", 28}, {"num_attention_heads", 28}, {"num_hidden_layers", 28}, {"num_key_value_heads", 4},
      {"rms_norm_eps", 1e-06}, {"rope_theta", 1000000.0}, {"sliding_window", 32768}, {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"}, {"use_sliding_window", false}, {"vocab_size", 152064},
      {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}}},
      {"vision_config", {{"depth", 32}, {"hidden_size", 1280}, {"out_hidden_size", 3584}}}};
  const ModelConfig c = Read(vl, dir);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.sliding_window, 0u);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c.rope_theta, 1e6f);
  const nlohmann::json text = TextOnlyConfig(vl);
  EXPECT_EQ(text["architectures"], nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(text["model_type"], "qwen2");
  EXPECT_FALSE(text.contains("vision_config"));
  EXPECT_EQ(text["rope_scaling"], nlohmann::json({{"type", "default"}}));
  nlohmann::json nested = {{"architectures", {"Qwen2_5_VLForConditionalGeneration"}},
                           {"text_config", {{"model_type", "qwen3_vl_text"}}}};
  EXPECT_NE(ErrorOf(nested, dir).find("text_config.model_type: 'qwen3_vl_text' is not a language model"),
            std::string::npos) << ErrorOf(nested, dir);
}

// Granite 4.0 (GraniteMoeHybridForCausalLM) runs when every layer is attention, without RoPE unless
// position_embedding_type says rope; a Mamba-2 layer is refused naming it, as is a config that leaves the layer types
// to transformers' default (every layer Mamba-2).
TEST(ModelConfig, Granite4AttentionOnly) {
  testing_util::ScratchDir dir("lowbit-config");
  nlohmann::json g = {{"architectures", {"GraniteMoeHybridForCausalLM"}}, {"model_type", "granitemoehybrid"},
                      {"hidden_size", 2560}, {"intermediate_size", 8192}, {"shared_intermediate_size", 8192},
                      {"num_attention_heads", 40}, {"num_key_value_heads", 8}, {"num_hidden_layers", 4},
                      {"vocab_size", 100352}, {"num_local_experts", 0}, {"embedding_multiplier", 12.0},
                      {"attention_multiplier", 0.015625}, {"residual_multiplier", 0.22}, {"logits_scaling", 10.0},
                      {"layer_types", {"attention", "attention", "attention", "attention"}},
                      {"position_embedding_type", "rope"}, {"rope_theta", 10000000.0}, {"tie_word_embeddings", true}};
  ModelConfig c = Read(g, dir);
  EXPECT_EQ(c.n_experts, 0u);
  EXPECT_EQ(c.ffn_dim, 8192u);
  EXPECT_TRUE(c.nope_layers.empty());
  g["position_embedding_type"] = "nope";
  c = Read(g, dir);
  EXPECT_TRUE(!c.rope(0) && !c.rope(3));
  g["layer_types"][2] = "mamba";
  EXPECT_NE(ErrorOf(g, dir).find("layer_types[2]: 'mamba': Mamba-2 layers are not supported"), std::string::npos)
      << ErrorOf(g, dir);
  g.erase("layer_types");
  EXPECT_NE(ErrorOf(g, dir).find("needs its layer_types"), std::string::npos) << ErrorOf(g, dir);
}

// Hunyuan-4B-Instruct's shape as its config.json gives it (the legacy rope_scaling form): NTK alpha 1000 over
// 128-wide heads makes the RoPE base 10000 * 1000^(128 / 126) = 11158839.9 (llama.cpp's converter writes the same
// base); q/k norms after RoPE.
TEST(ModelConfig, HunyuanDenseAlphaRopeBase) {
  testing_util::ScratchDir dir("lowbit-config");
  nlohmann::json h = {{"architectures", {"HunYuanDenseV1ForCausalLM"}}, {"model_type", "hunyuan_v1_dense"},
                      {"hidden_size", 3072}, {"intermediate_size", 8192}, {"num_attention_heads", 32},
                      {"num_key_value_heads", 8}, {"head_dim", 128}, {"num_hidden_layers", 32},
                      {"vocab_size", 128167}, {"max_position_embeddings", 32768}, {"rope_theta", 10000.0},
                      {"rope_scaling", {{"alpha", 1000.0}, {"beta_fast", 32}, {"beta_slow", 1}, {"factor", 1.0},
                                        {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"type", "dynamic"}}},
                      {"use_qk_norm", true}, {"use_cla", false}, {"cla_share_factor", 2}, {"attention_bias", false},
                      {"tie_word_embeddings", true}, {"rms_norm_eps", 1e-5}};
  const ModelConfig c = Read(h, dir);
  EXPECT_NEAR(c.rope_theta, 11158839.9251, 2.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(c.qk_norm && c.qk_norm_after_rope);
  EXPECT_FALSE(c.qkv_bias || c.o_bias);
  h["use_cla"] = true;
  EXPECT_NE(ErrorOf(h, dir).find("use_cla: cross-layer attention is not supported"), std::string::npos)
      << ErrorOf(h, dir);
  h["use_cla"] = false;
  h["use_qk_norm"] = false;
  EXPECT_NE(ErrorOf(h, dir).find("use_qk_norm: false is not run"), std::string::npos) << ErrorOf(h, dir);
  h["use_qk_norm"] = true;
  h["rope_scaling"].erase("alpha");  // plain dynamic NTK depends on the sequence length: not run
  EXPECT_NE(ErrorOf(h, dir).find("rope type 'dynamic' is not supported"), std::string::npos) << ErrorOf(h, dir);
}

// Hunyuan-A13B's shape: its per-layer lists, uniform, give 64 experts of 3072 (intermediate_size, the width
// transformers builds), top 8, one ungated shared MLP; a list that varies, or disagrees, is refused by entry.
TEST(ModelConfig, HunyuanMoePerLayerLists) {
  testing_util::ScratchDir dir("lowbit-config");
  const auto per_layer = [](int v) { return std::vector<int>(32, v); };
  nlohmann::json h = {{"architectures", {"HunYuanMoEV1ForCausalLM"}}, {"model_type", "hunyuan_v1_moe"},
                      {"hidden_size", 4096}, {"intermediate_size", 3072}, {"num_attention_heads", 32},
                      {"num_key_value_heads", 8}, {"head_dim", 128}, {"num_hidden_layers", 32},
                      {"vocab_size", 128167}, {"rope_theta", 10000.0},
                      {"rope_scaling", {{"alpha", 1000.0}, {"factor", 1.0}, {"type", "dynamic"}}},
                      {"num_experts", 64}, {"moe_topk", per_layer(8)}, {"moe_intermediate_size", per_layer(3072)},
                      {"num_shared_expert", per_layer(1)}, {"use_qk_norm", true}, {"tie_word_embeddings", true}};
  const ModelConfig c = Read(h, dir);
  EXPECT_EQ(c.n_experts, 64u);
  EXPECT_EQ(c.experts_per_token, 8u);
  EXPECT_EQ(c.expert_ffn_dim, 3072u);
  EXPECT_EQ(c.shared_expert_ffn_dim, 3072u);
  EXPECT_FALSE(c.shared_expert_gated);
  EXPECT_TRUE(c.norm_expert_weights && c.moe(0) && c.moe(31) && c.qk_norm_after_rope);
  h["moe_topk"][5] = 6;
  EXPECT_NE(ErrorOf(h, dir).find("moe_topk[5]: differs from layer 0's 8"), std::string::npos) << ErrorOf(h, dir);
  h["moe_topk"] = 8;
  h["moe_intermediate_size"] = per_layer(1536);
  EXPECT_NE(ErrorOf(h, dir).find("moe_intermediate_size: must be intermediate_size (3072)"), std::string::npos)
      << ErrorOf(h, dir);
  h.erase("moe_intermediate_size");
  h["num_shared_expert"] = per_layer(2);
  EXPECT_NE(ErrorOf(h, dir).find("num_shared_expert: must be 1"), std::string::npos) << ErrorOf(h, dir);
  h["num_shared_expert"] = std::vector<int>(31, 1);
  EXPECT_NE(ErrorOf(h, dir).find("num_shared_expert: has 31 entries, but num_hidden_layers is 32"), std::string::npos)
      << ErrorOf(h, dir);
}

}  // namespace
}  // namespace lowbit
