// Mixtures of experts: the router against hand-computed routes, per-expert calibration (GPTQ on the
// tokens routed to each expert beats RTN on the same experts), the quantized experts surviving
// lowbit's folder and the compressed-tensors export under their checkpoint names (Mixtral's w1/w2/w3),
// and GGUF export refusing what llama.cpp would run differently. (Logits against transformers and
// llama.cpp: architecture_fixture_test and tests/interop/hf_architectures.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/engine_export.h"
#include "io/gguf_export.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
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
const fs::path kFixtures = LOWBIT_SOURCE_DIR "/tests/data/architectures";

// Three experts over a 2-wide input, router rows (1, 0), (0, 1), (1, 1): for x = (1, 2) the logits
// are 1, 2, 3, softmax p = e^{1,2,3} / (e + e^2 + e^3) = 0.0900, 0.2447, 0.6652; top 2 = experts 2, 1.
TEST(MoeRouting, TopKOfSoftmaxByHand) {
  ModelConfig c;
  c.dim = 2;
  c.n_experts = 3;
  c.experts_per_token = 2;
  LayerWeights lw;
  lw.router = {1, 0, 0, 1, 1, 1};
  const float x[] = {1, 2, /* second token: logits -1, 0, -1 -> expert 1, then 0 (the lower index of a tie) */ -1, 0};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  ExpertRoutes r = RouteTokens(c, lw, x, 2);
  EXPECT_EQ(r.rows[2], std::vector<uint32_t>({0}));
  EXPECT_EQ(r.rows[1], std::vector<uint32_t>({0, 1}));
  EXPECT_EQ(r.rows[0], std::vector<uint32_t>({1}));
  EXPECT_NEAR(r.weights[2][0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(r.weights[1][0], std::exp(2.0) / z, 1e-6);
  const double z2 = 2 * std::exp(-1.0) + 1;
  EXPECT_NEAR(r.weights[1][1], 1 / z2, 1e-6);
  EXPECT_NEAR(r.weights[0][0], std::exp(-1.0) / z2, 1e-6);
  c.norm_expert_weights = true;  // Mixtral, norm_topk_prob: the chosen two sum to 1
  r = RouteTokens(c, lw, x, 2);
  EXPECT_NEAR(r.weights[2][0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(r.weights[1][1], 1 / (1 + std::exp(-1.0)), 1e-6);
}

// GPTQ calibrates every expert on its own routed tokens (and the shared expert on all of them): at 3
// bits its logits are closer to the full-precision model's than RTN's, on held-out windows.
TEST(MoeQuantize, GptqOnRoutedTokensBeatsRtn) {
  for (const char* name : {"qwen2_moe_dense", "mixtral"}) {
    const Model fp = LoadModel((kFixtures / name).string());
    QuantizeRequest req;
    req.scheme = ParseScheme("int3:g8");
    req.calibration = testing_util::RandomWindows(16, 32, fp.config.vocab_size);
    req.threads = 2;
    Model rtn = fp, gptq = fp;
    const QuantizeReport rtn_report = QuantizeModel(rtn, req);
    req.method = "gptq";
    const QuantizeReport report = QuantizeModel(gptq, req);
    const size_t linears = fp.config.architecture == "MixtralForCausalLM" ? 2 * (4 + 4 * 3) : (4 + 3 + 4 * 3) + (4 + 3);
    EXPECT_EQ(report.tensors.size(), linears) << name;
    EXPECT_EQ(rtn_report.tensors.size(), linears) << name;
    EXPECT_EQ(report.uncalibrated_linears, 0u) << name;  // 512 tokens reach every expert
    const auto held_out = testing_util::RandomWindows(4, 32, fp.config.vocab_size + 7);  // another stream (ids wrap below)
    std::vector<std::vector<int32_t>> eval;
    for (auto w : held_out) {
      for (int32_t& t : w) t %= static_cast<int32_t>(fp.config.vocab_size);
      eval.push_back(w);
    }
    const double e_rtn = testing_util::LogitError(fp, rtn, eval), e_gptq = testing_util::LogitError(fp, gptq, eval);
    std::cout << name << ": logit MSE rtn " << e_rtn << ", gptq " << e_gptq << "\n";
    EXPECT_LT(e_gptq, e_rtn) << name;
  }
}

// Input scales folded into a sparse layer leave the full-precision model's function as it was: the norm
// is divided by s, every expert's (and the shared expert's) gate/up columns, the router's columns and
// the shared expert's sigmoid gate multiplied by it; each expert's down scales go into its own up rows.
TEST(MoeQuantize, FoldedScalesLeaveTheModelUnchanged) {
  for (const char* name : {"mixtral", "qwen2_moe"}) {
    const Model fp = LoadModel((kFixtures / name).string());
    Model folded = fp;
    uint64_t state = 7;
    const auto next = [&] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return 0.25f + static_cast<float>((state >> 40) % 1000) / 250.0f;  // 0.25 .. 4.25
    };
    for (size_t l = 0; l < folded.config.n_layers; ++l) {
      LayerWeights& lw = folded.weights.layers[l];
      std::vector<float> s(folded.config.dim);
      for (float& v : s) v = next();
      FoldInputScales(folded.config, lw, LinearInput::kGateUp, s);
      for (Expert& e : lw.experts) {
        std::vector<float> d(e.up.rows());
        for (float& v : d) v = next();
        FoldDownScales(e.up, e.down, d);
      }
    }
    const auto windows = testing_util::RandomWindows(2, 16, fp.config.vocab_size);
    EXPECT_LT(testing_util::LogitError(fp, folded, windows), 1e-9) << name;
  }
}

// AWQ and SmoothQuant on experts: the shared input's scales are searched over every expert on the rows
// routed to it, each expert's down gets its own; at 3 bits AWQ's logits are closer to the full-precision
// model's than RTN's, and W8A8 SmoothQuant stays close.
TEST(MoeQuantize, AwqAndSmoothQuantScaleEveryExpert) {
  for (const char* name : {"mixtral", "qwen2_moe"}) {
    const Model fp = LoadModel((kFixtures / name).string());
    QuantizeRequest req;
    req.scheme = ParseScheme("int3:g8");
    req.calibration = testing_util::RandomWindows(16, 32, fp.config.vocab_size);
    req.threads = 2;
    Model rtn = fp, awq = fp;
    QuantizeModel(rtn, req);
    req.method = "awq";
    const QuantizeReport report = QuantizeModel(awq, req);
    size_t expert_downs = 0;
    for (const auto& [input, alpha] : report.awq_alphas) expert_downs += input.find(".mlp.experts.") != std::string::npos;
    EXPECT_EQ(expert_downs, fp.config.n_layers * fp.config.n_experts) << name;  // 512 tokens reach every expert
    const auto eval = testing_util::RandomWindows(4, 32, fp.config.vocab_size / 2);
    const double e_rtn = testing_util::LogitError(fp, rtn, eval), e_awq = testing_util::LogitError(fp, awq, eval);
    std::cout << name << ": logit MSE rtn " << e_rtn << ", awq " << e_awq << "\n";
    EXPECT_LT(e_awq, e_rtn) << name;

    Model smooth = fp;
    req.method = "smoothquant";
    req.scheme = ParseScheme("int8:channel");
    req.act_scheme = ParseScheme("int8:token");
    const QuantizeReport sq = QuantizeModel(smooth, req);
    const size_t units = fp.config.n_experts + (fp.config.shared_expert_ffn_dim ? 1 : 0);
    EXPECT_EQ(sq.smoothed_inputs, fp.config.n_layers * (2 + units)) << name;
    const double e_sq = testing_util::LogitError(fp, smooth, eval);
    std::cout << name << ": logit MSE smoothquant w8a8 " << e_sq << "\n";
    EXPECT_LT(e_sq, 0.1 * e_rtn) << name;
  }
}

// Quantized experts are saved under the checkpoint's names (Mixtral: block_sparse_moe.experts.E.w1/w3/w2)
// and load back to the same logits; the compressed-tensors export ignores the routers by name.
TEST(MoeQuantize, QuantizedExpertsRoundTrip) {
  testing_util::ScratchDir dir("lowbit-moe");
  for (const char* name : {"mixtral", "qwen2_moe"}) {
    Model m = LoadModel((kFixtures / name).string());
    QuantizeRequest req;
    req.scheme = ParseScheme("int4:g8");
    QuantizeModel(m, req);
    SaveQuantizedModel(m, dir / name, kFixtures / name, nlohmann::json::object());
    const Model back = LoadModel((dir / name).string());
    const auto windows = testing_util::RandomWindows(2, 16, m.config.vocab_size);
    EXPECT_EQ(testing_util::LogitError(m, back, windows), 0.0) << name;
    ASSERT_TRUE(back.weights.layers[0].experts[3].down.quantized());
  }
  const std::string header = ReadTextFile(dir / "mixtral" / "model.safetensors").substr(0, 1 << 16);
  EXPECT_NE(header.find("model.layers.1.block_sparse_moe.experts.3.w2.weight_packed"), std::string::npos);
  EXPECT_NE(header.find("model.layers.1.block_sparse_moe.gate.weight"), std::string::npos);

  StreamedModel s = OpenModel(kFixtures / "qwen2_moe_dense");
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  o.scheme = ParseScheme("int4:g8");
  (void)ExportEngineCheckpoint(s, kFixtures / "qwen2_moe_dense", dir / "ct", nlohmann::json{{"method", "rtn"}}, o);
  const nlohmann::json config = ReadJsonFile(dir / "ct" / "config.json");
  EXPECT_EQ(config["quantization_config"]["ignore"],
            nlohmann::json::array({"lm_head", "model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate"}));
  const Model ct = LoadModel((dir / "ct").string());
  EXPECT_TRUE(ct.weights.layers[0].experts[0].gate.quantized());
  EXPECT_TRUE(ct.weights.layers[0].w_down.quantized());  // the shared expert
  EXPECT_TRUE(ct.weights.layers[1].experts.empty());     // mlp_only_layers: a dense MLP
  EXPECT_TRUE(ct.weights.layers[1].w_gate.quantized());
}

// QuaRot on a mixture of experts: the router, the shared expert's gate, every expert and the shared
// expert take the rotation (each down_proj its own Hadamard block: experts 24 wide get 8), so the
// rotated model computes the same logits, dense layers of a mixed model included; rotated then GPTQ
// at 4 bits runs on the routed tokens, and the rotated checkpoint reloads to the same logits.
TEST(MoeQuantize, RotationKeepsEveryRouteAndSurvivesGptqAndSaving) {
  testing_util::ScratchDir dir("lowbit-moe-rotate");
  for (const char* name : {"mixtral", "qwen2_moe", "qwen2_moe_dense", "qwen3_moe"}) {
    const Model fp = LoadModel((kFixtures / name).string());
    Model rotated = fp;
    const RotationInfo info = RotateModel(rotated, 3);
    EXPECT_EQ(info.down_block, fp.config.architecture == "MixtralForCausalLM" ? 64u : 8u) << name;
    const LayerWeights& l0 = rotated.weights.layers[0];
    EXPECT_EQ(l0.experts[1].down.input_hadamard, LargestPowerOfTwoDivisor(fp.config.expert_ffn_dim)) << name;
    double moved = 0;
    for (size_t i = 0; i < fp.config.dim; ++i) moved += std::fabs(l0.router[i] - fp.weights.layers[0].router[i]);
    EXPECT_GT(moved, 0.1) << name;
    const auto windows = testing_util::RandomWindows(2, 16, fp.config.vocab_size);
    EXPECT_LT(testing_util::LogitError(fp, rotated, windows), 1e-9) << name;

    Model quantized = fp;
    QuantizeRequest req;
    req.scheme = ParseScheme("int4:g8");
    req.method = "gptq";
    req.rotate = true;
    req.calibration = testing_util::RandomWindows(8, 32, fp.config.vocab_size);
    req.threads = 2;
    const QuantizeReport report = QuantizeModel(quantized, req);
    EXPECT_TRUE(report.rotated) << name;
    EXPECT_LT(testing_util::LogitError(fp, quantized, windows), 1.0) << name;
    SaveQuantizedModel(quantized, dir / name, kFixtures / name, nlohmann::json::object());
    const Model back = LoadModel((dir / name).string());
    EXPECT_EQ(testing_util::LogitError(quantized, back, windows), 0.0) << name;
  }
}

// llama.cpp's MoE architectures run experts in every layer, and renormalize (llama, qwen3moe) or not
// (qwen2moe) by architecture: a model they would compute differently is refused, naming the field, and
// nothing is written.
TEST(MoeGguf, RefusesWhatLlamaCppWouldComputeDifferently) {
  testing_util::ScratchDir dir("lowbit-moe-gguf");
  const auto error_of = [&](StreamedModel s) {
    GgufExportOptions o;
    o.type = "Q8_0";
    try {
      ExportGguf(s, dir / "out.gguf", o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(OpenModel(kFixtures / "qwen2_moe_dense")).find("mlp_only_layers"), std::string::npos);
  StreamedModel unnormalized = OpenModel(kFixtures / "qwen3_moe");
  unnormalized.model.config.norm_expert_weights = false;
  EXPECT_NE(error_of(std::move(unnormalized)).find("norm_topk_prob is false"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out.gguf"));
}

}  // namespace
}  // namespace lowbit
