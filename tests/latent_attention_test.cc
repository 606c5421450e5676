// DeepSeek-V2/V3 beyond the logits of their fixtures (architecture_fixture_test): the real configs read
// to the numbers their papers and code give, YaRN and the group-limited sigmoid router by hand, the
// latent cache across decode steps, the multi-token-prediction block, and what quantization can do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/awq_scales.h"
#include "model/ptq.h"
#include "model/rotation.h"
#include "quant/hadamard.h"
#include "quant/scheme.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::ExpectError;
const fs::path kFixtures = LOWBIT_SOURCE_DIR "/tests/data/architectures";

nlohmann::json DeepSeekV3() { return nlohmann::json::parse(testing_util::kDeepSeekV3Config); }

// deepseek-ai/DeepSeek-V2-Lite's config.json (its remote-code fields as the Hub has them).
nlohmann::json DeepSeekV2Lite() {
  return nlohmann::json::parse(R"({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 102400,
      "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
      "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
      "routed_scaling_factor": 1.0, "kv_lora_rank": 512, "q_lora_rank": null, "qk_rope_head_dim": 64,
      "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
      "num_experts_per_tok": 6, "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": false,
      "scoring_func": "softmax", "hidden_act": "silu", "max_position_embeddings": 163840, "rms_norm_eps": 1e-06,
      "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
      "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096, "type": "yarn"},
      "tie_word_embeddings": false, "bos_token_id": 100000, "eos_token_id": 100001})");
}

std::string ErrorOf(const nlohmann::json& config) {
  try {
    (void)HfConfigFromJson(config, "ds/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The cached latent is one head of kv_lora_rank + rope (512 + 64); the softmax scale is 1 / sqrt(128 +
// 64) times YaRN's mscale(40, mscale_all_dim)^2 = (0.1 ln 40 + 1)^2; mscale / mscale_all_dim = 1 leaves
// RoPE's cos and sin unscaled. Layers 3.. are sparse; layer 61 is the multi-token-prediction block.
TEST(DeepSeekConfig, V3ReadsAsItsPaperDescribesIt) {
  const ModelConfig c = HfConfigFromJson(DeepSeekV3(), "ds/config.json");
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.head_dim, 576u);
  EXPECT_EQ(c.n_kv_heads, 1u);
  EXPECT_EQ(c.rope_dims(), 64u);
  EXPECT_EQ(c.qk_head_dim(), 192u);
  EXPECT_EQ(c.attn_out_dim(), 128u * 128u);
  EXPECT_EQ(c.q_lora_rank, 1536u);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacent);
  const double mscale = 0.1 * std::log(40.0) + 1;
  EXPECT_NEAR(c.attention_scale(), mscale * mscale / std::sqrt(192.0), 1e-7);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, 1.0f);
  EXPECT_FALSE(c.moe(2));
  EXPECT_TRUE(c.moe(3) && c.moe(60));
  EXPECT_EQ(c.router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.router_bias);
  EXPECT_EQ(c.expert_groups, 8u);
  EXPECT_EQ(c.expert_groups_used, 4u);
  EXPECT_EQ(c.group_score, GroupScore::kBestTwoSum);
  EXPECT_FLOAT_EQ(c.routed_scale, 2.5f);
  EXPECT_TRUE(c.norm_expert_weights);
  EXPECT_EQ(c.shared_expert_ffn_dim, 2048u);
  EXPECT_FALSE(c.shared_expert_gated);
  EXPECT_EQ(c.nextn_layers, 1u);
}

// V2-Lite: q through one projection, greedy softmax routing over all 64 experts, weights neither
// renormalized nor scaled, two shared experts; mscale_all_dim 0.707 in the softmax scale.
TEST(DeepSeekConfig, V2LiteReadsAsItsCodeRunsIt) {
  const ModelConfig c = HfConfigFromJson(DeepSeekV2Lite(), "ds/config.json");
  EXPECT_EQ(c.q_lora_rank, 0u);
  EXPECT_EQ(c.head_dim, 576u);
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1;
  EXPECT_NEAR(c.attention_scale(), mscale * mscale / std::sqrt(192.0), 1e-7);
  EXPECT_EQ(c.router_scoring, RouterScoring::kSoftmax);
  EXPECT_EQ(c.expert_groups, 0u);
  EXPECT_FALSE(c.router_bias || c.norm_expert_weights);
  EXPECT_EQ(c.shared_expert_ffn_dim, 2u * 1408u);
  EXPECT_FALSE(c.moe(0));
  EXPECT_TRUE(c.moe(1));
}

TEST(DeepSeekConfig, ErrorsNameTheField) {
  nlohmann::json bad = DeepSeekV3();
  bad["n_group"] = 7;
  EXPECT_NE(ErrorOf(bad).find("n_group (7) must divide the 256 experts"), std::string::npos) << ErrorOf(bad);
  bad = DeepSeekV3();
  bad["topk_group"] = 9;
  EXPECT_NE(ErrorOf(bad).find("topk_group is 9"), std::string::npos) << ErrorOf(bad);
  bad = DeepSeekV3();
  bad["topk_method"] = "greedy";
  EXPECT_NE(ErrorOf(bad).find("ds/config.json: topk_method: 'greedy' is not DeepSeek-V3's routing"), std::string::npos)
      << ErrorOf(bad);
  bad = DeepSeekV3();
  bad["scoring_func"] = "softmax";
  EXPECT_NE(ErrorOf(bad).find("scoring_func: 'softmax' is not DeepseekV3ForCausalLM's router scoring (sigmoid)"),
            std::string::npos) << ErrorOf(bad);
  bad = DeepSeekV2Lite();
  bad["num_key_value_heads"] = 8;
  EXPECT_NE(ErrorOf(bad).find("num_key_value_heads: must equal num_attention_heads"), std::string::npos)
      << ErrorOf(bad);
  bad = DeepSeekV2Lite();
  bad["qk_rope_head_dim"] = 63;
  EXPECT_NE(ErrorOf(bad).find("qk_rope_head_dim: must be positive and even"), std::string::npos) << ErrorOf(bad);
  bad = DeepSeekV2Lite();
  bad["topk_method"] = "noaux_tc";
  EXPECT_NE(ErrorOf(bad).find("'noaux_tc' is not supported (greedy, group_limited_greedy)"), std::string::npos)
      << ErrorOf(bad);
}

// GLM-4.7-Flash's shape (transformers' Glm4MoeLiteConfig defaults, the released model's): latent attention with a
// 768-wide q bottleneck and a 512 + 64 latent, 20 heads of 192 + 64 (softmax scale 1 / 16) and 256-wide values;
// layer 0 dense (mlp_layer_types absent), then 64 experts of 1536, top 4 by DeepSeek-V3's sigmoid routing scaled by
// 1.8, beside one shared expert; block 47 is the multi-token-prediction block.
nlohmann::json Glm47Flash() {
  return nlohmann::json::parse(R"({"architectures": ["Glm4MoeLiteForCausalLM"], "vocab_size": 154880,
      "hidden_size": 2048, "intermediate_size": 10240, "moe_intermediate_size": 1536, "num_hidden_layers": 47,
      "num_attention_heads": 20, "num_key_value_heads": 20, "n_shared_experts": 1, "n_routed_experts": 64,
      "routed_scaling_factor": 1.8, "kv_lora_rank": 512, "q_lora_rank": 768, "qk_rope_head_dim": 64,
      "v_head_dim": 256, "qk_nope_head_dim": 192, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 4,
      "norm_topk_prob": true, "hidden_act": "silu", "max_position_embeddings": 202752, "rms_norm_eps": 1e-05,
      "rope_theta": 1000000, "rope_interleave": true, "num_nextn_predict_layers": 1, "first_k_dense_replace": 1,
      "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": [154820, 154827, 154829]})");
}

TEST(DeepSeekConfig, Glm47FlashReadsAsTransformersRunsIt) {
  const ModelConfig c = HfConfigFromJson(Glm47Flash(), "glm/config.json");
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.head_dim, 576u);
  EXPECT_EQ(c.qk_head_dim(), 256u);
  EXPECT_EQ(c.attn_out_dim(), 20u * 256u);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / 16);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacent);
  EXPECT_FALSE(c.moe(0));
  EXPECT_TRUE(c.moe(1) && c.moe(46));
  EXPECT_EQ(c.router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.router_bias && c.norm_expert_weights);
  EXPECT_FLOAT_EQ(c.routed_scale, 1.8f);
  EXPECT_EQ(c.shared_expert_ffn_dim, 1536u);
  EXPECT_EQ(c.nextn_layers, 1u);
  // mlp_layer_types, when given, says which layers are dense (first_k_dense_replace must agree on the prefix).
  nlohmann::json j = Glm47Flash();
  j["num_hidden_layers"] = 4;
  j["mlp_layer_types"] = {"dense", "dense", "sparse", "sparse"};
  j["first_k_dense_replace"] = 2;
  const ModelConfig two = HfConfigFromJson(j, "glm/config.json");
  EXPECT_TRUE(!two.moe(1) && two.moe(2));
}

TEST(DeepSeekConfig, Glm47FlashErrorsNameTheField) {
  auto error_of = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = Glm47Flash();
    edit(j);
    return ErrorOf(j);
  };
  // transformers runs layer 0 dense whatever first_k_dense_replace says; llama.cpp's converter reads the key.
  EXPECT_NE(error_of([](nlohmann::json& j) { j["first_k_dense_replace"] = 3; })
                .find("first_k_dense_replace: is 3, but mlp_layer_types (absent: layer 0) makes the first 1 layers"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["mlp_layer_types"] = {"dense", "sparse"}; })
                .find("mlp_layer_types: has 2 entries, but num_hidden_layers is 47"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) {
              j["num_hidden_layers"] = 2;
              j["mlp_layer_types"] = {"dense", "moe"};
            }).find("mlp_layer_types[1]: 'moe' is not dense or sparse"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) {
              j["rope_parameters"] = {{"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
            }).find("rope_parameters.partial_rotary_factor: must be 1"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& j) { j["n_routed_experts"] = 0; }).find("n_routed_experts: must be positive"),
            std::string::npos);
}

// YaRN on 64 rotary dimensions, base 10000, factor 40 over an original 4096 positions: the dimension
// turning beta times over 4096 positions is 64 ln(4096 / (2 pi beta)) / (2 ln 10000): 10.47 for beta_fast
// 32, floored to 10, and 22.51 for beta_slow 1, ceiled to 23. Frequencies i <= 10 are kept, i >= 23
// divided by 40, and i between mix them by the ramp (i - 10) / 13.
TEST(DeepSeekConfig, YarnFrequenciesByHand) {
  const ModelConfig c = HfConfigFromJson(DeepSeekV3(), "ds/config.json");
  const std::vector<float> inv = RopeInverseFrequencies(c);
  ASSERT_EQ(inv.size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    const double base = std::pow(10000.0, -2.0 * static_cast<double>(i) / 64.0);
    const double ramp = std::clamp((static_cast<double>(i) - 10.0) / 13.0, 0.0, 1.0);
    EXPECT_NEAR(inv[i], base / 40 * ramp + base * (1 - ramp), 1e-6 * base) << i;
  }
  // An attention factor from mscale / mscale_all_dim when they differ, as transformers derives it.
  nlohmann::json j = DeepSeekV3();
  j["rope_scaling"]["mscale"] = 0.5;
  const ModelConfig d = HfConfigFromJson(j, "ds/config.json");
  EXPECT_NEAR(d.rope_scaling.attention_factor, (0.05 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1), 1e-6);
}

// Four experts in two groups, sigmoid scores s = 1 / (1 + e^-logit) of the logits (2, 1, 0, 3) (router
// rows scale x = (1)), biases (0, 0, 1, -0.5): the choice scores are (0.881, 0.731, 1.5, 0.453). Groups
// by their best two: {0, 1} 1.612, {2, 3} 1.953, so only experts 2 and 3 can be chosen, though expert 0
// scores more than 3: the top two are 2, then 3, weighted by their unbiased scores (0.5, 0.953)
// renormalized and times 2.5.
TEST(DeepSeekRouting, SigmoidGroupsAndBiasByHand) {
  ModelConfig c;
  c.dim = 1;
  c.n_experts = 4;
  c.experts_per_token = 2;
  c.router_scoring = RouterScoring::kSigmoid;
  c.expert_groups = 2;
  c.expert_groups_used = 1;
  c.group_score = GroupScore::kBestTwoSum;
  c.norm_expert_weights = true;
  c.routed_scale = 2.5f;
  LayerWeights lw;
  lw.router = {2, 1, 0, 3};
  lw.router_bias = {0, 0, 1, -0.5f};
  const float x[] = {1};
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  const ExpertRoutes r = RouteTokens(c, lw, x, 1);
  EXPECT_TRUE(r.rows[0].empty() && r.rows[1].empty());
  ASSERT_EQ(r.rows[2].size(), 1u);
  ASSERT_EQ(r.rows[3].size(), 1u);
  const double s2 = sigmoid(0), s3 = sigmoid(3);
  EXPECT_NEAR(r.weights[2][0], 2.5 * s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(r.weights[3][0], 2.5 * s3 / (s2 + s3), 1e-6);
  // V2's group-limited softmax: groups by their best expert, softmax probabilities as the weights.
  c.router_scoring = RouterScoring::kSoftmax;
  c.group_score = GroupScore::kBestExpert;
  c.norm_expert_weights = false;
  c.routed_scale = 1;
  lw.router_bias.clear();
  const ExpertRoutes v2 = RouteTokens(c, lw, x, 1);  // group {2, 3} holds the best (3): experts 3, 2
  const double z = std::exp(2.0) + std::exp(1.0) + std::exp(0.0) + std::exp(3.0);
  ASSERT_EQ(v2.rows[3].size(), 1u);
  ASSERT_EQ(v2.rows[2].size(), 1u);
  EXPECT_NEAR(v2.weights[3][0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(v2.weights[2][0], std::exp(0.0) / z, 1e-6);
}

// Decoding one token at a time over the cached latents gives the logits of one prefill pass; a KV
// cache of int8 latents stays close, and holds 2 x (16 + 8) codes a token per layer (K and V rows).
TEST(LatentAttention, DecodeStepsMatchPrefill) {
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    const Model model = LoadModel((kFixtures / name).string());
    const std::vector<int32_t> tokens = {1, 5, 17, 42, 9, 88, 3, 60, 60, 14, 95, 0};
    const size_t vocab = model.config.vocab_size;
    for (const char* dtype : {"fp32", "int8", "bf16", "fp8_e4m3", "int4"}) {
      KvCacheOptions kv;
      kv.dtype = ParseKvDtype(dtype);
      Engine engine(model, 2, kv);
      KvCache whole = engine.NewCache(tokens.size()), steps = engine.NewCache(tokens.size());
      const std::vector<float> all = engine.Forward(whole, tokens, true);
      double worst = 0, scale = 0;
      for (size_t t = 0; t < tokens.size(); ++t) {
        const std::vector<float> one = engine.Forward(steps, std::span(&tokens[t], 1), false);
        for (size_t v = 0; v < vocab; ++v) {
          worst = std::max(worst, std::abs(double(one[v]) - all[t * vocab + v]));
          scale = std::max(scale, std::abs(double(all[t * vocab + v])));
        }
      }
      EXPECT_LT(worst / scale, 1e-5) << name << " " << dtype;
    }
    // The latent (16 + 8 wide) is cached once per layer as K, which V reads: 2 layers x 24 fp32 values. KIVI
    // quantizes K per channel and V per token, so it keeps both.
    EXPECT_DOUBLE_EQ(Engine(model, 1).NewCache(32).BytesPerToken(), 2.0 * (16 + 8) * 4) << name;
    KvCacheOptions kivi;
    kivi.dtype = KvDtype::kInt4;
    const KvCache int4 = Engine(model, 1, kivi).NewCache(32);
    KvCacheOptions eight;
    eight.dtype = KvDtype::kInt8;
    EXPECT_DOUBLE_EQ(Engine(model, 1, eight).NewCache(32).BytesPerToken(), 2.0 * (24 + 4)) << name;  // codes, scale
    EXPECT_GE(int4.BytesPerToken(), 2.0 * (12 + 12)) << name;  // K and V codes, 4 bits each
  }
}

// A checkpoint with DeepSeek-V3's multi-token-prediction block (model.layers.N, N = num_hidden_layers)
// loads without it, as transformers does; a block past it is still the depth mismatch it was.
TEST(LatentAttention, MultiTokenPredictionBlockIsNotRun) {
  testing_util::ScratchDir dir("lowbit-mtp");
  const fs::path source = kFixtures / "deepseek_v3";
  const auto write = [&](const fs::path& out, int nextn, const std::string& extra) {
    fs::create_directories(out);
    nlohmann::json config = ReadJsonFile(source / "config.json");
    config["num_nextn_predict_layers"] = nextn;
    WriteFileAtomic(out / "config.json", config.dump(2));
    const SafetensorsFile st = SafetensorsFile::Open(source / "model.safetensors");
    std::vector<TensorToWrite> tensors;
    for (const TensorView& t : st.tensors()) tensors.push_back({t.name, t.dtype, t.shape, t.data});
    const TensorView& norm = *st.Find("model.layers.0.input_layernorm.weight");
    tensors.push_back({extra, norm.dtype, norm.shape, norm.data});
    WriteSafetensors(out / "model.safetensors", tensors);
  };
  write(dir / "mtp", 1, "model.layers.2.enorm.weight");
  const Model with = LoadModel((dir / "mtp").string()), plain = LoadModel(source.string());
  Engine a(with, 1), b(plain, 1);
  KvCache ca = a.NewCache(4), cb = b.NewCache(4);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(a.Forward(ca, tokens, true), b.Forward(cb, tokens, true));
  write(dir / "deeper", 1, "model.layers.3.enorm.weight");
  ExpectError([&] { (void)LoadModel((dir / "deeper").string()); },
              {"model.layers.3.enorm.weight' belongs to block 3", "num_hidden_layers is 2"});
}

// Calibration's three latent stages end where the whole attention stage does: o's input, equal; their
// intermediate inputs have the widths of the linears that read them.
TEST(LatentAttention, CalibrationStagesEndWhereTheWholeStageDoes) {
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    const Model model = LoadModel((kFixtures / name).string());
    const ModelConfig& c = model.config;
    Engine engine(model, 2);
    const std::vector<int32_t> tokens = {1, 5, 17, 42, 9, 88, 3, 60};
    KvCache cache = engine.NewCache(tokens.size());
    BatchItem item{&cache, tokens, false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    const std::vector<float> hidden = engine.Embed(batch);
    std::vector<float> x = hidden, whole, staged;
    engine.BeginLayer(0, x, whole);
    engine.AdvanceLayer(0, LinearInput::kQkv, batch, x, whole);
    engine.BeginLayer(0, x, staged);
    engine.AdvanceLayer(0, LinearInput::kLatentIn, batch, x, staged);
    if (c.q_lora_rank > 0) {
      EXPECT_EQ(staged.size(), tokens.size() * c.q_lora_rank) << name;
      engine.AdvanceLayer(0, LinearInput::kLatentQ, batch, x, staged);
    }
    EXPECT_EQ(staged.size(), tokens.size() * c.kv_lora_rank) << name;
    engine.AdvanceLayer(0, LinearInput::kLatentKv, batch, x, staged);
    EXPECT_EQ(x, hidden) << name;  // the residual untouched until o
    EXPECT_EQ(staged, whole) << name;
    EXPECT_EQ(whole.size(), tokens.size() * c.attn_out_dim()) << name;
  }
}

// What the latent observer hands out (imatrix's attn_k_b / attn_v_b inputs) is what GGUF's split kv_b reads:
// each head's nope query is q_b's (V2: q's) output rows for that head, and its latent output taken through
// the head's value rows of kv_b is o_proj's input.
TEST(LatentAttention, ObserverSeesWhatTheSplitKvBReads) {
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    const Model model = LoadModel((kFixtures / name).string());
    const ModelConfig& c = model.config;
    const LayerWeights& lw = model.weights.layers[0];
    Engine engine(model, 2);
    std::vector<float> nope, latent;
    size_t calls = 0;
    engine.ObserveLatentAttention([&](size_t layer, const float* q, const float* out, size_t n) {
      EXPECT_EQ(layer, 0u);
      ++calls;
      nope.assign(q, q + n * c.n_heads * c.qk_nope_dim);
      latent.assign(out, out + n * c.n_heads * c.kv_lora_rank);
    });
    const std::vector<int32_t> tokens = {1, 5, 17, 42, 9, 88, 3, 60};
    const size_t n = tokens.size(), qk = c.qk_head_dim(), kv_rows = c.qk_nope_dim + c.v_head_dim;
    KvCache cache = engine.NewCache(n);
    BatchItem item{&cache, tokens, false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    std::vector<float> x = engine.Embed(batch), input, query_input;
    engine.BeginLayer(0, x, input);
    if (c.q_lora_rank > 0) engine.AdvanceLayer(0, LinearInput::kLatentIn, batch, x, input);
    query_input = input;  // q_b's input (V3), or the normed hidden state q reads (V2)
    if (c.q_lora_rank == 0) engine.AdvanceLayer(0, LinearInput::kLatentIn, batch, x, input);
    else engine.AdvanceLayer(0, LinearInput::kLatentQ, batch, x, input);
    engine.AdvanceLayer(0, LinearInput::kLatentKv, batch, x, input);  // o's input
    ASSERT_EQ(calls, 1u) << name;
    const DenseMatrix& wq = std::get<DenseMatrix>(lw.wq.weight);
    const DenseMatrix& kv_b = std::get<DenseMatrix>(lw.wkv_b.weight);
    double worst_q = 0, worst_o = 0;
    for (size_t t = 0; t < n; ++t)
      for (size_t h = 0; h < c.n_heads; ++h) {
        for (size_t i = 0; i < c.qk_nope_dim; ++i) {
          double q = 0;
          for (size_t j = 0; j < wq.cols(); ++j)
            q += double(wq.values[(h * qk + i) * wq.cols() + j]) * query_input[t * wq.cols() + j];
          worst_q = std::max(worst_q, std::fabs(q - nope[(t * c.n_heads + h) * c.qk_nope_dim + i]));
        }
        for (size_t j = 0; j < c.v_head_dim; ++j) {
          double o = 0;
          for (size_t m = 0; m < c.kv_lora_rank; ++m)
            o += double(kv_b.values[(h * kv_rows + c.qk_nope_dim + j) * c.kv_lora_rank + m]) *
                 latent[(t * c.n_heads + h) * c.kv_lora_rank + m];
          worst_o = std::max(worst_o, std::fabs(o - input[(t * c.n_heads + h) * c.v_head_dim + j]));
        }
      }
    EXPECT_LT(worst_q, 1e-4) << name;
    EXPECT_LT(worst_o, 1e-4) << name;
  }
}

// Windows of the 96-token fixture vocabulary.
std::vector<std::vector<int32_t>> Windows(size_t count, size_t length, uint64_t seed) {
  return testing_util::RandomWindows(count, length, 96, seed);
}
using testing_util::LogitError;

// Scales folded into latent attention's three inputs (the input norm into q_a / kv_a, q_a's norm into q_b,
// the latent's norm into kv_b, which both the scores and the values read through) leave the model's
// logits as they were; AWQ and SmoothQuant then quantize through them.
TEST(LatentAttention, FoldedScalesLeaveTheModelUnchanged) {
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    const Model fp = LoadModel((kFixtures / name).string());
    const ModelConfig& c = fp.config;
    Model folded = fp;
    for (size_t l = 0; l < c.n_layers; ++l)
      for (const auto& [group, width] : {std::pair{LinearInput::kLatentIn, c.dim}, {LinearInput::kLatentQ, c.q_lora_rank},
                                         {LinearInput::kLatentKv, c.kv_lora_rank}}) {
        if (width == 0) continue;
        std::vector<float> s(width);
        for (size_t i = 0; i < width; ++i) s[i] = 0.5f + 0.1f * static_cast<float>((i * 7 + l) % 11);
        FoldInputScales(c, folded.weights.layers[l], group, s);
      }
    EXPECT_LT(LogitError(fp, folded, Windows(2, 16, 5)), 1e-9) << name;
    EXPECT_NE(folded.weights.layers[0].kv_a_norm, fp.weights.layers[0].kv_a_norm) << name;
  }
  // Each against RTN at the same weight (and input) scheme, on held-out windows.
  const Model fp = LoadModel((kFixtures / "deepseek_v3").string());
  for (const char* method : {"awq", "smoothquant"}) {
    const bool awq = std::string(method) == "awq";
    QuantizeRequest req;
    req.scheme = ParseScheme(awq ? "int3:g8" : "int8:channel");
    if (!awq) req.act_scheme = ParseScheme("int8:token");
    req.calibration = Windows(16, 32, 3);
    Model rtn = fp, scaled = fp;
    QuantizeModel(rtn, req);
    req.method = method;
    const QuantizeReport report = QuantizeModel(scaled, req);
    const double e_rtn = LogitError(fp, rtn, Windows(4, 32, 777)), e = LogitError(fp, scaled, Windows(4, 32, 777));
    std::cout << method << ": logit MSE rtn " << e_rtn << ", " << method << " " << e << "\n";
    EXPECT_LT(e, e_rtn) << method;
    if (awq) {
      EXPECT_EQ(report.awq_alphas[0].first, "model.layers.0.self_attn.q_a_proj+self_attn.kv_a_proj_with_mqa");
    }
  }
}

// RTN quantizes every linear (kv_b too: the absorbed attention widens its rows once) and the saved folder
// loads back to the same logits. GPTQ calibrates latent attention in three stages (q_a and kv_a on the
// normed hidden state, q_b on q_a's normed output, kv_b on the normed latents, each computed with the
// linears already quantized) and, at 3 bits, is closer to the full-precision model than RTN on held-out
// windows. Rotation is refused by name.
TEST(LatentAttention, QuantizesSavesAndCalibratesWithGptq) {
  testing_util::ScratchDir dir("lowbit-mla-quant");
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    const fs::path source = kFixtures / name;
    const Model fp = LoadModel(source.string());
    Model rtn = fp, gptq = fp;
    QuantizeRequest req;
    req.scheme = ParseScheme("int3:g8");
    req.threads = 2;
    req.calibration = Windows(16, 32, 12345);
    const QuantizeReport report = QuantizeModel(rtn, req);
    const size_t attention = std::string(name) == "deepseek_v3" ? 5 : 4;
    EXPECT_EQ(report.tensors.size(), 2 * attention + 3 + 3 * 5) << name;  // dense MLP, 4 experts + shared
    ASSERT_TRUE(rtn.weights.layers[1].wkv_b.quantized());
    SaveQuantizedModel(rtn, dir / name, source, nlohmann::json::object());
    const auto held_out = Windows(4, 32, 777);
    EXPECT_EQ(LogitError(rtn, LoadModel((dir / name).string()), held_out), 0.0) << name;

    req.method = "gptq";
    const QuantizeReport calibrated = QuantizeModel(gptq, req);
    EXPECT_EQ(calibrated.uncalibrated_linears, 0u) << name;  // 512 tokens reach every expert
    const double e_rtn = LogitError(fp, rtn, held_out), e_gptq = LogitError(fp, gptq, held_out);
    std::cout << name << ": logit MSE rtn " << e_rtn << ", gptq " << e_gptq << "\n";
    EXPECT_LT(e_gptq, e_rtn) << name;
  }
}

// --rotate on latent attention: q_a (V3) or q (V2) and kv_a read the rotated residual, o_proj and every
// down_proj write it; the rotated fixtures give the same logits, and GPTQ on them saves and reloads.
TEST(LatentAttention, RotationIsExactAndSurvivesGptqAndSaving) {
  testing_util::ScratchDir dir("lowbit-mla-rotate");
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    const fs::path source = kFixtures / name;
    const Model fp = LoadModel(source.string());
    Model rotated = fp;
    const RotationInfo info = RotateModel(rotated, 4);
    EXPECT_EQ(info.down_block, 8u) << name;  // experts 24 wide
    const LayerWeights &before = fp.weights.layers[1], &after = rotated.weights.layers[1];
    const Linear& query = fp.config.q_lora_rank > 0 ? after.wq_a : after.wq;
    EXPECT_NE(std::get<DenseMatrix>(query.weight).values,
              std::get<DenseMatrix>((fp.config.q_lora_rank > 0 ? before.wq_a : before.wq).weight).values) << name;
    EXPECT_EQ(std::get<DenseMatrix>(after.wkv_b.weight).values, std::get<DenseMatrix>(before.wkv_b.weight).values)
        << name;  // inside the attention: untouched
    EXPECT_EQ(after.kv_a_norm, before.kv_a_norm) << name;
    EXPECT_EQ(after.w_down.input_hadamard, LargestPowerOfTwoDivisor(fp.config.shared_expert_ffn_dim))
        << name;  // the shared experts' down_proj (V2: two of 24)
    const auto held_out = Windows(4, 32, 777);
    EXPECT_LT(LogitError(fp, rotated, held_out), 1e-9) << name;

    Model quantized = fp;
    QuantizeRequest req;
    req.scheme = ParseScheme("int4:g8");
    req.method = "gptq";
    req.rotate = true;
    req.calibration = Windows(8, 32, 12345);
    req.threads = 2;
    EXPECT_TRUE(QuantizeModel(quantized, req).rotated) << name;
    EXPECT_LT(LogitError(fp, quantized, held_out), 1.0) << name;
    SaveQuantizedModel(quantized, dir / name, source, nlohmann::json::object());
    EXPECT_EQ(LogitError(quantized, LoadModel((dir / name).string()), held_out), 0.0) << name;
  }
}

}  // namespace
}  // namespace lowbit
