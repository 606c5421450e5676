// GPTQ against RTN on problems with a known answer, the fake-quant helper against the real
// encoder, and the whole-model pipeline on the bundled model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/file_util.h"
#include "core/thread_pool.h"
#include "eval/scoring.h"
#include "model_test_util.h"
#include "tokenizer/tokenizer.h"
#include "io/hf_model.h"
#include "model/calibration.h"
#include "model/ptq.h"
#include "quant/fake_quant.h"
#include "quant/gptq.h"
#include "quant/linalg.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

using testing_util::KjvCalibration;
using testing_util::MeanKl;

// Output error of a quantized weight on inputs with second moment H: trace(dW H dW^T).
double OutputError(const std::vector<float>& w, const QuantizedTensor& q, const std::vector<double>& h, size_t rows,
                   size_t cols) {
  const std::vector<float> d = q.Dequantize();
  double total = 0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < cols; ++i) {
      const double di = w[r * cols + i] - d[r * cols + i];
      for (size_t j = 0; j < cols; ++j) total += di * h[i * cols + j] * (w[r * cols + j] - d[r * cols + j]);
    }
  return total;
}

struct Problem {
  size_t rows = 32, cols = 128;
  std::vector<float> w;
  std::vector<double> h;
};

// Correlated inputs (a few strong directions), as real activations have.
Problem MakeProblem(uint64_t seed) {
  Problem p;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0, 1);
  p.w.resize(p.rows * p.cols);
  for (auto& v : p.w) v = n(rng) * 0.05f;
  const size_t tokens = 1024;
  std::vector<float> x(tokens * p.cols);
  std::vector<float> basis(4 * p.cols);
  for (auto& v : basis) v = n(rng);
  for (size_t t = 0; t < tokens; ++t)
    for (size_t c = 0; c < p.cols; ++c) {
      float v = 0.1f * n(rng);
      for (size_t k = 0; k < 4; ++k) v += basis[k * p.cols + c] * ((t * 7 + k * 13) % 11 - 5) * 0.3f;
      x[t * p.cols + c] = v * (c % 16 == 0 ? 5.0f : 1.0f);  // some outlier channels
    }
  p.h.assign(p.cols * p.cols, 0.0);
  for (size_t t = 0; t < tokens; ++t)
    for (size_t i = 0; i < p.cols; ++i)
      for (size_t j = 0; j < p.cols; ++j) p.h[i * p.cols + j] += static_cast<double>(x[t * p.cols + i]) * x[t * p.cols + j];
  return p;
}

TEST(HessianAccumulator, EqualsSumOfOuterProductsAcrossChunksAndCalls) {
  // 37 features (not a multiple of the row block), 700 + 90 tokens (past the 512-token chunk).
  const size_t cols = 37;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(700 * cols), b(90 * cols);
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  ThreadPool pool(2);
  HessianAccumulator h(cols);
  h.Add(a.data(), 700, pool);
  h.Add(b.data(), 90, pool);
  EXPECT_EQ(h.tokens(), 790u);
  for (size_t r = 0; r < cols; ++r)
    for (size_t c = 0; c < cols; ++c) {
      double want = 0;
      for (size_t t = 0; t < 700; ++t) want += static_cast<double>(a[t * cols + r]) * a[t * cols + c];
      for (size_t t = 0; t < 90; ++t) want += static_cast<double>(b[t * cols + r]) * b[t * cols + c];
      ASSERT_NEAR(h.sum()[r * cols + c], want, 1e-3 * (std::fabs(want) + 10)) << r << "," << c;
    }
}

TEST(Gptq, BeatsRtnOnCorrelatedInputsForEveryFamily) {
  const Problem p = MakeProblem(1);
  for (const char* spec : {"int4:g32", "int3:g128", "int4:channel", "int4:g32:asym", "fp4_e2m1:g32", "mxfp4", "nvfp4",
                           "nf4:g64", "fp8_e4m3:channel"}) {
    const QuantScheme s = ParseScheme(spec);
    const double rtn = OutputError(p.w, QuantizeRtn(p.w, p.rows, p.cols, s), p.h, p.rows, p.cols);
    for (bool act_order : {false, true}) {
      const double gptq =
          OutputError(p.w, QuantizeGptq(p.w, p.rows, p.cols, s, p.h, {0.01, 32, act_order}), p.h, p.rows, p.cols);
      EXPECT_LT(gptq, 0.8 * rtn) << spec << (act_order ? " act-order" : "");
    }
  }
}

TEST(Gptq, WithAnIdentityHessianItIsRoundToNearest) {
  // No correlations: the error feedback is zero and every column rounds on its own.
  const Problem p = MakeProblem(2);
  std::vector<double> identity(p.cols * p.cols, 0.0);
  for (size_t i = 0; i < p.cols; ++i) identity[i * p.cols + i] = 1.0;
  for (const char* spec : {"int4:g32", "int8:channel", "mxfp4"}) {
    const QuantScheme s = ParseScheme(spec);
    const QuantizedTensor g = QuantizeGptq(p.w, p.rows, p.cols, s, identity, {0.0, 128, false});
    const QuantizedTensor r = QuantizeRtn(p.w, p.rows, p.cols, s);
    // Values, not codes: FP4's -0 and +0 codes both decode to zero.
    EXPECT_EQ(g.Dequantize(), r.Dequantize()) << spec;
    EXPECT_TRUE(std::equal(g.scale_bytes().begin(), g.scale_bytes().end(), r.scale_bytes().begin())) << spec;
  }
}

TEST(Gptq, ThreadPoolGivesTheSameTensorBitForBit) {
  const Problem p = MakeProblem(11);
  ThreadPool pool(2);
  for (const char* spec : {"int4:g64", "int3:g128:asym", "int4:block16x64", "nvfp4"})
    for (const bool act_order : {false, true}) {
      const QuantizedTensor serial = QuantizeGptq(p.w, p.rows, p.cols, ParseScheme(spec), p.h, {0.01, 32, act_order});
      const QuantizedTensor pooled =
          QuantizeGptq(p.w, p.rows, p.cols, ParseScheme(spec), p.h, {0.01, 32, act_order}, "w", &pool);
      EXPECT_TRUE(std::ranges::equal(serial.codes(), pooled.codes())) << spec << " act_order " << act_order;
      EXPECT_TRUE(std::ranges::equal(serial.scale_bytes(), pooled.scale_bytes())) << spec;
      EXPECT_TRUE(std::ranges::equal(serial.zero_bytes(), pooled.zero_bytes())) << spec;
    }
}

TEST(Gptq, RejectsBadInput) {
  const Problem p = MakeProblem(3);
  EXPECT_THROW(QuantizeGptq(p.w, p.rows, p.cols, ParseScheme("int4:g32"), std::vector<double>(5), {}), Error);
  std::vector<double> negative(p.cols * p.cols, 0.0);
  for (size_t i = 0; i < p.cols; ++i) negative[i * p.cols + i] = -1.0;
  EXPECT_THROW(QuantizeGptq(p.w, p.rows, p.cols, ParseScheme("int4:g32"), negative, {0.0, 128, false}), Error);
}

// The solver kernels against their scalar references: every row tile (8, 4, 1 rows), vector tails on
// both ends of the column range, and columns outside it untouched.
TEST(Linalg, KernelsMatchTheirReferences) {
  std::mt19937 rng(9);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> a(1003), b(1003);
  for (double& v : a) v = n(rng);
  for (double& v : b) v = n(rng);
  double magnitude = 0;
  for (size_t i = 0; i < a.size(); ++i) magnitude += std::abs(a[i] * b[i]);
  EXPECT_NEAR(DotF64(a.data(), b.data(), a.size()), DotF64Ref(a.data(), b.data(), a.size()), 1e-14 * magnitude);
  EXPECT_EQ(DotF64(a.data(), b.data(), 0), 0.0);
  std::vector<double> four(4 * 1003);
  for (double& v : four) v = n(rng);
  for (const size_t len : {size_t{1003}, size_t{5}}) {
    double got[4], want[4];
    DotF64Rows4(a.data(), four.data(), 1003, len, got);
    DotF64Rows4Ref(a.data(), four.data(), 1003, len, want);
    for (size_t c = 0; c < 4; ++c) EXPECT_NEAR(got[c], want[c], 1e-14 * magnitude * 4) << len << " " << c;
  }
  std::vector<double> four_a(4 * 1003);
  for (double& v : four_a) v = n(rng);
  for (const size_t len : {size_t{1003}, size_t{5}}) {
    double got[16], want[16];
    DotF64Rows4x4(four_a.data(), 1003, four.data(), 1003, len, got);
    DotF64Rows4x4Ref(four_a.data(), 1003, four.data(), 1003, len, want);
    for (size_t rc = 0; rc < 16; ++rc) EXPECT_NEAR(got[rc], want[rc], 1e-13 * len) << len << " " << rc;
  }

  const size_t rows = 13, cols = 90, k = 5, stride = 7;
  std::vector<float> w(rows * cols), coef(rows * stride), u(k * cols);
  for (float& v : w) v = static_cast<float>(n(rng));
  for (float& v : coef) v = static_cast<float>(n(rng));
  for (float& v : u) v = static_cast<float>(n(rng));
  std::vector<float> fast = w, ref = w;
  SubtractProducts(fast.data(), rows, cols, coef.data(), stride, u.data(), cols, k, 3, 77);
  SubtractProductsRef(ref.data(), rows, cols, coef.data(), stride, u.data(), cols, k, 3, 77);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < cols; ++j) {
      if (j < 3 || j >= 77) {
        EXPECT_EQ(fast[r * cols + j], w[r * cols + j]) << r << " " << j;
        continue;
      }
      double scale = std::abs(w[r * cols + j]);
      for (size_t i = 0; i < k; ++i) scale += std::abs(coef[r * stride + i] * u[i * cols + j]);
      EXPECT_NEAR(fast[r * cols + j], ref[r * cols + j], 1e-6 * scale) << r << " " << j;
    }
}

TEST(FakeQuant, MatchesEncodeThenDecodeForEveryPreset) {
  std::mt19937 rng(4);
  std::vector<float> w(8 * 96);
  for (auto& v : w) v = std::normal_distribution<float>(0, 0.1f)(rng);
  for (const SchemePreset& preset : SchemePresets()) {
    const QuantScheme s = ParseScheme(preset.name);
    if (s.granularity.kind == GranularityKind::kNone) continue;
    const QuantizedTensor q = QuantizeRtn(w, 8, 96, s);
    const std::vector<float> d = q.Dequantize();
    const ScaleGrid g = q.grid();
    for (size_t r = 0; r < 8; ++r)
      for (size_t c = 0; c < 96; ++c) {
        const CellFakeQuant fq(q, (r / g.cell_rows) * g.grid_cols + c / g.cell_cols);
        ASSERT_EQ(fq(w[r * 96 + c]), d[r * 96 + c]) << preset.name << " r" << r << " c" << c;
      }
  }
}

TEST(Pipeline, GptqOnTheBundledModelBeatsRtn) {
  const std::string dir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
  const Model base = LoadHfModel(dir);
  Model rtn_model = LoadHfModel(dir), gptq_model = LoadHfModel(dir);
  const auto tok = LoadTokenizer(dir);
  QuantizeRequest req;
  req.scheme = ParseScheme("int3:g64");
  req.calibration = KjvCalibration(*tok, 16, 128);
  req.threads = 2;
  QuantizeRequest uncalibrated = req;
  uncalibrated.method = "gptq";
  uncalibrated.calibration.clear();
  EXPECT_THROW(QuantizeModel(gptq_model, uncalibrated), Error);
  EXPECT_EQ(QuantizeModel(rtn_model, req).tensors.size(), 42u);
  req.method = "gptq";
  const QuantizeReport gptq = QuantizeModel(gptq_model, req);
  ASSERT_EQ(gptq.tensors.size(), 42u);
  EXPECT_EQ(gptq.layer_seconds.size(), 6u);
  for (const TensorReport& t : gptq.tensors) EXPECT_GT(t.output_mse, 0.0) << t.name;
  for (const LayerWeights& lw : gptq_model.weights.layers) EXPECT_TRUE(lw.w_down.quantized());
  // Held-out text (the test split): GPTQ's distributions stay closer to the base than RTN's.
  std::vector<int32_t> held_out = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 2000), true);
  held_out.resize(128);
  const double kl_rtn = MeanKl(base, rtn_model, held_out), kl_gptq = MeanKl(base, gptq_model, held_out);
  EXPECT_LT(kl_gptq, 0.6 * kl_rtn) << "rtn " << kl_rtn << " gptq " << kl_gptq;
}

// lm_head under a GPTQ recipe is calibrated too, on the final norm's outputs of the calibration
// tokens: with the blocks left in fp32 (ignore) and lm_head at int3 g64, its KL on held-out text
// falls well below the RTN lm_head's (about 10x on this model), and its report carries an output
// error (measured on calibration rows, which RTN's has none of).
TEST(Pipeline, GptqCalibratesLmHeadOnTheFinalNormsOutputs) {
  const std::string dir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
  const Model base = LoadHfModel(dir);
  const auto tok = LoadTokenizer(dir);
  QuantizeRequest req;
  req.scheme = ParseScheme("int4:g128");
  req.ignore = {"^model\\.layers\\."};
  req.lm_head = ParseScheme("int3:g64");
  req.calibration = KjvCalibration(*tok, 16, 128);
  req.threads = 2;
  Model rtn_model = LoadHfModel(dir), gptq_model = LoadHfModel(dir);
  const QuantizeReport rtn = QuantizeModel(rtn_model, req);
  req.method = "gptq";
  const QuantizeReport gptq = QuantizeModel(gptq_model, req);
  ASSERT_EQ(rtn.tensors.size(), 1u);
  ASSERT_EQ(gptq.tensors.size(), 1u);
  EXPECT_EQ(gptq.tensors[0].name, "lm_head");
  EXPECT_EQ(rtn.tensors[0].output_mse, 0.0);
  EXPECT_GT(gptq.tensors[0].output_mse, 0.0);
  EXPECT_TRUE(gptq_model.weights.lm_head.quantized());
  EXPECT_FALSE(gptq_model.weights.layers[0].w_down.quantized());
  std::vector<int32_t> held_out = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 2000), true);
  held_out.resize(128);
  const double kl_rtn = MeanKl(base, rtn_model, held_out), kl_gptq = MeanKl(base, gptq_model, held_out);
  EXPECT_LT(kl_gptq, 0.4 * kl_rtn) << "rtn " << kl_rtn << " gptq " << kl_gptq;
}

}  // namespace
}  // namespace lowbit
