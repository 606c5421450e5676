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
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "kernels/matmul.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "model/rotation.h"
#include "model_test_util.h"
#include "test_util.h"
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
}

// Paley's matrices are Hadamard (H H^T = order I, entries +-1); orders no construction reaches are refused.
TEST(Hadamard, PaleyConstructionsAreHadamard) {
  for (const size_t order : {4u, 8u, 12u, 20u, 24u, 28u, 36u, 44u, 60u, 76u, 84u, 200u}) {
    const std::vector<float> h = PaleyHadamard(order);
    ASSERT_EQ(h.size(), order * order) << order;
    for (const float v : h) ASSERT_EQ(std::fabs(v), 1.0f) << order;
    for (size_t i = 0; i < order; ++i)
      for (size_t j = 0; j < order; ++j) {
        float dot = 0;
        for (size_t k = 0; k < order; ++k) dot += h[i * order + k] * h[j * order + k];
        ASSERT_EQ(dot, i == j ? static_cast<float>(order) : 0.0f) << order << " rows " << i << ", " << j;
      }
  }
  for (const size_t order : {3u, 6u, 16u, 52u, 92u}) EXPECT_TRUE(PaleyHadamard(order).empty()) << order;
}

// Q for widths that are not powers of two (QuaRot's 12 / 20 / 28 x 2^j) is orthogonal with every entry
// +-1/sqrt(n): a Hadamard rotation, which spreads any one channel evenly over all of them.
TEST(Hadamard, RandomRotationOfEveryKnownWidthIsAHadamardRotation) {
  for (const size_t n : {12u, 40u, 56u, 96u, 144u, 896u}) {
    const RandomHadamard q = RandomHadamard::Make(n, 3);
    std::vector<float> rows(n * n, 0.0f);  // row i = e_i Q
    for (size_t i = 0; i < n; ++i) {
      rows[i * n + i] = 1;
      q.ApplyRow(std::span(rows).subspan(i * n, n));
    }
    const float entry = 1.0f / std::sqrt(static_cast<float>(n));
    for (const float v : rows) ASSERT_NEAR(std::fabs(v), entry, 1e-5f) << n;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (size_t k = 0; k < n; ++k) dot += static_cast<double>(rows[i * n + k]) * rows[j * n + k];
        ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << n << " rows " << i << ", " << j;
      }
  }
  EXPECT_EQ(RandomHadamard::Make(96, 0).small_order(), 12u);   // 12 x 8
  EXPECT_EQ(RandomHadamard::Make(896, 0).small_order(), 28u);  // Qwen2.5-0.5B: 28 x 32
  EXPECT_EQ(RandomHadamard::Make(5120, 0).small_order(), 20u);
  EXPECT_EQ(RandomHadamard::Make(7168, 0).small_order(), 28u);  // DeepSeek-V3
  EXPECT_EQ(RandomHadamard::Make(4096, 0).small_order(), 1u);
  testing_util::ExpectError([] { (void)RandomHadamard::Make(14, 0); },
                            {"Hadamard rotation of size 14: 14 is not k x 2^j for k 1 or a Paley order"});
  EXPECT_EQ(RandomHadamard::Make(52 * 64, 0).small_order(), 104u);  // no Paley matrix of order 52: 104 x 32
  EXPECT_THROW(RandomHadamard::Make(22, 0), Error);                  // neither 11, 22 nor 44 x 2^j
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

// The Llama fixture with its residual widened to `dim` (the new rows and columns random): a model whose
// hidden size is not a power of two.
Model WidenResidual(Model m, size_t dim) {
  std::mt19937 rng(static_cast<uint32_t>(dim));
  std::normal_distribution<float> noise(0.0f, 0.2f);
  const size_t old = m.config.dim;
  const auto columns = [&](std::vector<float>& v, size_t rows) {  // [rows x old] -> [rows x dim]
    std::vector<float> out(rows * dim);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < dim; ++c) out[r * dim + c] = c < old ? v[r * old + c] : noise(rng);
    v = std::move(out);
  };
  const auto norm = [&](std::vector<float>& w) {
    while (w.size() < dim) w.push_back(1.0f + noise(rng));
  };
  const auto reader = [&](Linear& l) {
    DenseMatrix& d = std::get<DenseMatrix>(l.weight);
    columns(d.values, d.rows());
    d.col_count = dim;
  };
  const auto writer = [&](Linear& l) {
    DenseMatrix& d = std::get<DenseMatrix>(l.weight);
    while (d.values.size() < dim * d.cols()) d.values.push_back(noise(rng));
    d.row_count = dim;
  };
  columns(m.weights.embed.MakeDense(), m.config.vocab_size);
  reader(m.weights.lm_head);
  norm(m.weights.final_norm);
  for (LayerWeights& l : m.weights.layers) {
    norm(l.attn_norm);
    norm(l.ffn_norm);
    for (Linear* r : {&l.wq, &l.wk, &l.wv, &l.w_gate, &l.w_up}) reader(*r);
    for (Linear* w : {&l.wo, &l.w_down}) writer(*w);
  }
  m.config.dim = static_cast<uint32_t>(dim);
  m.config.tie_embeddings = false;
  return m;
}

TEST(Rotation, HiddenSizesThatAreNotPowersOfTwoRotateExactly) {
  const Model fixture = LoadModel(LOWBIT_SOURCE_DIR "/tests/data/architectures/llama");
  for (const size_t dim : {40u, 48u, 56u}) {  // 20 x 2, 12 x 4, 28 x 2
    const Model base = WidenResidual(fixture, dim);
    Model rotated = base;
    EXPECT_EQ(RotateModel(rotated, 9).residual_size, dim);
    double moved = 0;
    for (size_t i = 0; i < dim; ++i) moved += std::fabs(rotated.weights.embed.values[i] - base.weights.embed.values[i]);
    EXPECT_GT(moved, 0.1) << dim;
    const auto windows = testing_util::RandomWindows(2, 16, base.config.vocab_size);
    EXPECT_LT(testing_util::LogitError(base, rotated, windows), 1e-9) << dim;
  }
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
