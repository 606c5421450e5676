// QuaRot-style rotation: Hadamard transforms, the rotated model's equivalence in full precision,
// rotation + GPTQ at W4A8, and the online Hadamard's round trip through the checkpoint.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "core/error.h"
#include "core/file_util.h"
#include "io/hf_model.h"
#include "io/quantized_checkpoint.h"
#include "kernels/matmul.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "model/rotation.h"
#include "model_test_util.h"
#include "quant/hadamard.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

using testing_util::KjvCalibration;
using testing_util::MeanKl;

const std::string kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

std::vector<int32_t> HeldOut(size_t n) {
  const auto tok = LoadTokenizer(kModelDir);
  auto ids = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 4000), true);
  ids.resize(n);
  return ids;
}

std::vector<std::vector<int32_t>> Calibration(size_t samples, size_t length) {
  const auto tok = LoadTokenizer(kModelDir);
  return KjvCalibration(*tok, samples, length);
}

TEST(Hadamard, MatchesSylvesterConstructionAndIsItsOwnInverse) {
  for (const size_t n : {1u, 2u, 8u, 64u}) {
    for (size_t i = 0; i < n; ++i) {  // row i of H = H applied to unit vector e_i (H symmetric)
      std::vector<float> e(n, 0.0f);
      e[i] = 1;
      HadamardBlocks(e, n);
      for (size_t j = 0; j < n; ++j) {
        const float sylvester = (std::popcount(i & j) % 2 ? -1.0f : 1.0f) / std::sqrt(static_cast<float>(n));
        EXPECT_NEAR(e[j], sylvester, 1e-6) << n << " " << i << " " << j;
      }
    }
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::vector<float> x(96), y;
  for (float& v : x) v = g(rng);
  y = x;
  HadamardBlocks(y, 32);  // three blocks of 32
  float norm_x = 0, norm_y = 0;
  for (size_t i = 0; i < x.size(); ++i) norm_x += x[i] * x[i], norm_y += y[i] * y[i];
  EXPECT_NEAR(norm_x, norm_y, 1e-3);
  HadamardBlocks(y, 32);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
  EXPECT_EQ(LargestPowerOfTwoDivisor(768), 256u);
  EXPECT_EQ(LargestPowerOfTwoDivisor(11008), 256u);
  EXPECT_THROW(RandomHadamard::Make(96, 0), Error);
}

TEST(Rotation, RotatedModelGivesTheSameLogits) {
  const Model base = LoadHfModel(kModelDir);
  Model rotated = LoadHfModel(kModelDir);
  const RotationInfo info = RotateModel(rotated, 7);
  EXPECT_EQ(info.residual_size, 256u);
  EXPECT_EQ(info.down_block, 256u);  // ffn 768 = 3 x 256
  EXPECT_FALSE(rotated.config.tie_embeddings);
  EXPECT_EQ(rotated.weights.layers[0].w_down.input_hadamard, 256u);
  for (const float v : rotated.weights.layers[2].attn_norm) ASSERT_EQ(v, 1.0f);
  // The weights really changed (not an identity rotation).
  double moved = 0;
  for (size_t i = 0; i < 256; ++i) moved += std::fabs(rotated.weights.embed.values[i] - base.weights.embed.values[i]);
  EXPECT_GT(moved, 1.0);

  const std::vector<int32_t> ids = HeldOut(12);
  Engine eb(base, 2), er(rotated, 2);
  KvCache cb = eb.NewCache(ids.size()), cr = er.NewCache(ids.size());
  const auto lb = eb.Forward(cb, ids, true), lr = er.Forward(cr, ids, true);
  ASSERT_EQ(lb.size(), lr.size());
  double worst = 0;
  for (size_t i = 0; i < lb.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(lb[i] - lr[i])));
  EXPECT_LT(worst, 1e-4);

  Model twice = LoadHfModel(kModelDir);
  RotateModel(twice, 0);
  EXPECT_THROW(RotateModel(twice, 0), Error);  // down_proj already carries its online Hadamard
}

// W4A8 (int4 g128 weights, int8 per-token activations): GPTQ on the rotated model beats GPTQ
// alone, and the rotated checkpoint reloads with its online Hadamard and untied lm_head.
TEST(Rotation, RotateThenGptqBeatsGptqAtW4A8AndSurvivesSaveAndLoad) {
  const Model base = LoadHfModel(kModelDir);
  Model plain = LoadHfModel(kModelDir), rotated = LoadHfModel(kModelDir);
  QuantizeRequest req;
  req.method = "gptq";
  req.scheme = ParseScheme("int4:g128");
  req.act_scheme = ParseScheme("int8:token");
  req.calibration = Calibration(8, 128);
  req.threads = 2;
  QuantizeModel(plain, req);
  req.rotate = true;
  const QuantizeReport r = QuantizeModel(rotated, req);
  EXPECT_TRUE(r.rotated);
  const std::vector<int32_t> ids = HeldOut(160);
  const double kl_plain = MeanKl(base, plain, ids), kl_rot = MeanKl(base, rotated, ids);
  EXPECT_LT(kl_rot, kl_plain) << "rotated " << kl_rot << " plain " << kl_plain;

  const auto out = std::filesystem::temp_directory_path() / ("lowbit_rotation_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  SaveQuantizedModel(rotated, out, kModelDir, {{"recipe", "test"}});
  const Model loaded = LoadHfModel(out);
  std::filesystem::remove_all(out);
  EXPECT_FALSE(loaded.config.tie_embeddings);
  EXPECT_EQ(loaded.weights.layers[3].w_down.input_hadamard, 256u);
  EXPECT_EQ(loaded.weights.layers[3].wq.input_hadamard, 0u);
  const std::vector<int32_t> few(ids.begin(), ids.begin() + 24);
  Engine er(rotated, 2), el(loaded, 2);
  KvCache cr = er.NewCache(few.size()), cl = el.NewCache(few.size());
  EXPECT_EQ(er.Forward(cr, few, true), el.Forward(cl, few, true));  // the same bits, the same logits
}

// A streamed run (blocks read as the run reaches them, each rotated then) holds one block in full
// precision at a time and ends with the bits of a run over the whole model, rotated up front.
TEST(Rotation, StreamedRunHoldsOneBlockAndMatchesTheWholeModelRun) {
  QuantizeRequest req;
  req.method = "gptq";
  req.scheme = ParseScheme("int4:g128");
  req.calibration = Calibration(4, 64);
  req.threads = 2;
  Model whole = LoadHfModel(kModelDir);
  RotateModel(whole, 5);
  QuantizeModel(whole, req);

  StreamedModel streamed = OpenHfModel(kModelDir);
  Model& m = streamed.model;
  for (const LayerWeights& l : m.weights.layers) EXPECT_EQ(l.wq.rows(), 0u);  // nothing read yet
  size_t reads = 0;
  req.read_layer = [&](size_t i) {
    EXPECT_EQ(i, reads++);
    for (size_t j = 0; j < m.weights.layers.size(); ++j) {  // earlier blocks quantized, later ones unread
      const Linear& up = m.weights.layers[j].w_up;
      EXPECT_TRUE(j < i ? up.quantized() : up.rows() == 0) << "block " << j << " when reading " << i;
    }
    return streamed.read_layer(i);
  };
  req.rotate = true;
  req.rotate_seed = 5;
  QuantizeModel(m, req);
  EXPECT_EQ(reads, m.weights.layers.size());
  EXPECT_EQ(m.weights.embed.Widened(), whole.weights.embed.Widened());
  EXPECT_EQ(std::get<DenseMatrix>(m.weights.lm_head.weight).values,
            std::get<DenseMatrix>(whole.weights.lm_head.weight).values);
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    const LayerWeights &a = m.weights.layers[l], &b = whole.weights.layers[l];
    EXPECT_EQ(a.attn_norm, b.attn_norm);
    EXPECT_EQ(a.w_down.input_hadamard, b.w_down.input_hadamard);
    for (const auto& [x, y] : {std::pair{&a.wq, &b.wq}, {&a.wo, &b.wo}, {&a.w_up, &b.w_up}, {&a.w_down, &b.w_down}}) {
      const auto& qa = std::get<QuantizedTensor>(x->weight);
      const auto& qb = std::get<QuantizedTensor>(y->weight);
      EXPECT_TRUE(std::ranges::equal(qa.codes(), qb.codes())) << "layer " << l;
      EXPECT_TRUE(std::ranges::equal(qa.scale_bytes(), qb.scale_bytes())) << "layer " << l;
    }
  }
}

TEST(Rotation, OnlyWithMethodsThatDoNotRescaleInputs) {
  Model m = LoadHfModel(kModelDir);
  QuantizeRequest req;
  req.method = "awq";
  req.scheme = ParseScheme("int4:g128");
  req.calibration = Calibration(1, 16);
  req.rotate = true;
  EXPECT_THROW(QuantizeModel(m, req), Error);
}

}  // namespace
}  // namespace lowbit
