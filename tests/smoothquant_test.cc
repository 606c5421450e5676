// Activation quantization (simulated W8A8) and SmoothQuant.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/file_util.h"
#include "core/json_util.h"
#include "eval/scoring.h"
#include "io/hf_model.h"
#include "io/quantized_checkpoint.h"
#include "kernels/matmul.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

using testing_util::Int8ChannelW8A8Request;
using testing_util::ExpectError;
using testing_util::MeanKl;

const std::string kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

TEST(InputQuant, DynamicPerTokenAndStaticPerTensorHandComputed) {
  const std::vector<float> x = {1.0f, -0.5f, 0.25f, 0.0f, /* row 2 */ 100.0f, 1.0f, -2.0f, 0.5f};
  // Per token: row 1 scale 1/127.5 (the symmetric grid [-128, 127] centred on the range, so
  // +amax = 127.5 steps clips to 127), row 2 scale 100/127.5.
  const auto dyn = FakeQuantizeInput({ParseScheme("int8:token:scale=f32"), 0}, x.data(), 2, 4);
  EXPECT_NEAR(dyn[0], 127.0f / 127.5f, 1e-6);
  EXPECT_NEAR(dyn[1], -64.0f / 127.5f, 1e-6);  // -63.75 steps -> -64
  EXPECT_NEAR(dyn[5], std::nearbyint(1.0f / (100.0f / 127.5f)) * (100.0f / 127.5f), 1e-6);
  // Static per tensor with scale 0.01: 100 saturates at 127 * 0.01, -2 at -128 * 0.01 is not reached.
  const auto st = FakeQuantizeInput({ParseScheme("int8:tensor:scale=f32"), 0.01f}, x.data(), 2, 4);
  EXPECT_NEAR(st[4], 1.27f, 1e-6);
  EXPECT_NEAR(st[6], -1.28f, 1e-6);
  EXPECT_NEAR(st[2], 0.25f, 1e-6);
}

TEST(InputQuant, AsymmetricPerTokenAndStaticHandComputed) {
  // Row 1 spans [-64, 191]: scale 255 / 255 = 1, zero-point 64, so 10.3 -> 10. Row 2 is all positive:
  // the range starts at 0 (zero-point 0), scale 2 / 255, and 1.1 is 140.25 steps -> 140.
  const std::vector<float> x = {191.0f, -64.0f, 10.3f, 0.0f, /* row 2 */ 0.5f, 1.1f, 2.0f, 0.25f};
  const auto dyn = FakeQuantizeInput({ParseScheme("int8:token:asym:scale=f32")}, x.data(), 2, 4);
  EXPECT_EQ(dyn[0], 191.0f);
  EXPECT_EQ(dyn[1], -64.0f);
  EXPECT_EQ(dyn[2], 10.0f);
  EXPECT_EQ(dyn[3], 0.0f);
  EXPECT_NEAR(dyn[5], 140.0f * 2.0f / 255.0f, 1e-6);
  EXPECT_NEAR(dyn[6], 2.0f, 1e-6);
  // Static: scale 0.5 and zero-point code 100 hold [-50, 77.5]; past either end the codes saturate.
  const auto st = FakeQuantizeInput({ParseScheme("int8:tensor:asym:scale=f32"), 0.5f, 100.0f}, x.data(), 2, 4);
  EXPECT_EQ(st[0], 77.5f);
  EXPECT_EQ(st[1], -50.0f);
  EXPECT_EQ(st[2], 10.5f);  // 20.6 steps -> 21
  EXPECT_EQ(st[3], 0.0f);
  EXPECT_EQ(st[5], 1.0f);  // 2.2 steps -> 2
}

// Static asymmetric inputs calibrate a zero-point beside the scale: inputs of a SiLU-gated product
// (down_proj) reach further below zero than above or the reverse, so their zero-point is not the
// middle code; it survives saving and loading.
TEST(InputQuant, AsymmetricStaticInputsCalibrateAZeroPoint) {
  Model m = LoadHfModel(kModelDir);
  const auto tok = LoadTokenizer(kModelDir);
  const QuantizeRequest req = Int8ChannelW8A8Request(*tok, "int8:tensor:asym:scale=f32", 4, 64);
  QuantizeModel(m, req);
  for (const LayerWeights& l : m.weights.layers) {
    ASSERT_TRUE(l.w_down.input_quant.has_value());
    const InputQuant& iq = *l.w_down.input_quant;
    EXPECT_GT(iq.static_scale, 0.0f);
    EXPECT_EQ(iq.static_zero, std::nearbyint(iq.static_zero));
    EXPECT_GT(iq.static_zero, 0.0f);
    EXPECT_LT(iq.static_zero, 255.0f);
    EXPECT_NE(iq.static_zero, 128.0f);
  }
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_asym_" + std::to_string(::getpid()));
  SaveQuantizedModel(m, dir, kModelDir, nlohmann::json::object());
  const Model loaded = LoadHfModel(dir);
  for (size_t i = 0; i < m.weights.layers.size(); ++i)
    EXPECT_EQ(loaded.weights.layers[i].w_down.input_quant, m.weights.layers[i].w_down.input_quant);
  // A zero-point outside the codes, or on symmetric inputs, is refused naming the key.
  nlohmann::json config = ReadJsonFile(dir / "config.json");
  nlohmann::json& entry = config["quantization_config"]["lowbit"]["input_quant"]["model.layers.0.mlp.down_proj"];
  entry["static_zero"] = 300;
  WriteFileAtomic(dir / "config.json", config.dump());
  ExpectError([&] { (void)LoadHfModel(dir); }, {"config.json", "static_zero", "[0, 255]"});
  entry["static_zero"] = 3;
  entry["scheme"] = "int8:tensor:scale=f32";
  WriteFileAtomic(dir / "config.json", config.dump());
  ExpectError([&] { (void)LoadHfModel(dir); }, {"config.json", "static_zero", "asymmetric per-tensor"});
  std::filesystem::remove_all(dir);
}

TEST(InputQuant, Nvfp4BlocksUnderTheStaticTensorScaleHandComputed) {
  // Tensor scale 0.5. Block 1 (amax 6): E4M3 scale 6 / 6 / 0.5 = 2, elements in steps of 2 * 0.5 = 1.
  // Block 2 (amax 1000, past the calibrated range): 333.3 rounds to the E4M3 320, step 160; 1000
  // saturates at 6 steps. Block 3 (amax 5000): the E4M3 scale saturates at 448, step 224.
  std::vector<float> x(48, 0.0f);
  x[0] = 6.0f, x[1] = 2.6f, x[2] = -1.2f, x[3] = 0.3f, x[4] = 0.2f, x[5] = 1.25f;
  x[16] = 1000.0f, x[17] = -250.0f;
  x[32] = 5000.0f, x[33] = 600.0f;
  const auto q = FakeQuantizeInput({ParseScheme("nvfp4"), 0.5f}, x.data(), 1, 48);
  EXPECT_EQ(q[0], 6.0f);
  EXPECT_EQ(q[1], 3.0f);
  EXPECT_EQ(q[2], -1.0f);
  EXPECT_EQ(q[3], 0.5f);
  EXPECT_EQ(q[4], 0.0f);
  EXPECT_EQ(q[5], 1.0f);  // a tie: to the even level
  EXPECT_EQ(q[16], 960.0f);
  EXPECT_EQ(q[17], -240.0f);  // 1.5625 steps -> 1.5
  EXPECT_EQ(q[32], 1344.0f);
  EXPECT_EQ(q[33], 672.0f);  // 2.68 steps -> 3
}

TEST(SmoothQuant, W8A8StaticBeatsNaiveAndSurvivesSaveAndLoad) {
  const Model base = LoadHfModel(kModelDir);
  Model naive = LoadHfModel(kModelDir), smooth = LoadHfModel(kModelDir);
  const auto tok = LoadTokenizer(kModelDir);
  QuantizeRequest req = Int8ChannelW8A8Request(*tok, "int8:tensor:scale=f32", 8, 128);
  QuantizeModel(naive, req);
  req.method = "smoothquant";
  const QuantizeReport r = QuantizeModel(smooth, req);
  EXPECT_EQ(r.smoothed_inputs, 18u);  // qkv, gate/up and down of six layers
  ASSERT_TRUE(smooth.weights.layers[0].wo.input_quant.has_value());
  EXPECT_GT(smooth.weights.layers[0].wo.input_quant->static_scale, 0.0f);
  auto held_out = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 3000), true);
  held_out.resize(160);
  const double kl_naive = MeanKl(base, naive, held_out), kl_smooth = MeanKl(base, smooth, held_out);
  EXPECT_LT(kl_smooth, kl_naive) << "smooth " << kl_smooth << " naive " << kl_naive;

  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_sq_" + std::to_string(::getpid()));
  SaveQuantizedModel(smooth, dir, kModelDir, nlohmann::json::object());
  const Model loaded = LoadHfModel(dir);
  ASSERT_TRUE(loaded.weights.layers[3].w_down.input_quant.has_value());
  EXPECT_EQ(loaded.weights.layers[3].w_down.input_quant->static_scale,
            smooth.weights.layers[3].w_down.input_quant->static_scale);
  EXPECT_EQ(MeanKl(base, loaded, held_out), kl_smooth);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lowbit
