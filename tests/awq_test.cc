// AWQ: folding scales is exact in full precision; the clip search and the whole method beat RTN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/file_util.h"
#include "eval/scoring.h"
#include "io/hf_model.h"
#include "model/awq_scales.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "quant/awq.h"
#include "quant/rtn.h"
#include "model_test_util.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

using testing_util::KjvCalibration;
using testing_util::MeanKl;

const std::string kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

std::vector<float> Logits(const Model& m, const std::vector<int32_t>& ids) {
  Engine e(m, 2);
  KvCache cache = e.NewCache(ids.size());
  return e.Forward(cache, ids, true);
}

TEST(Awq, FoldingScalesIsExactInFullPrecision) {
  const Model base = LoadHfModel(kModelDir);
  Model scaled = LoadHfModel(kModelDir);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.25f, 4.0f);
  for (LayerWeights& lw : scaled.weights.layers) {
    std::vector<float> s_dim(base.config.dim), s_ffn(base.config.ffn_dim);
    for (float& v : s_dim) v = u(rng);
    for (float& v : s_ffn) v = u(rng);
    FoldInputScales(scaled.config, lw, LinearInput::kQkv, s_dim);
    for (float& v : s_dim) v = u(rng);
    FoldInputScales(scaled.config, lw, LinearInput::kGateUp, s_dim);
    FoldInputScales(scaled.config, lw, LinearInput::kDown, s_ffn);
  }
  const std::vector<int32_t> ids = {1, 1040, 261, 2108, 391, 3554, 261, 736, 270, 261};
  const auto a = Logits(base, ids), b = Logits(scaled, ids);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
  // o_proj folding needs one v row per o column: this model has grouped-query attention.
  EXPECT_THROW(FoldInputScales(scaled.config, scaled.weights.layers[0], LinearInput::kO,
                               std::vector<float>(base.config.q_dim(), 1.0f)),
               std::logic_error);
}

TEST(Awq, ClipSearchNeverLosesToRoundToNearest) {
  std::mt19937 rng(2);
  const size_t rows = 16, cols = 128, tokens = 512;
  std::vector<float> w(rows * cols), x(tokens * cols);
  for (auto& v : w) v = std::normal_distribution<float>(0, 0.05f)(rng);
  w[5] = 0.6f;  // an outlier weight: clipping its group can pay off
  for (auto& v : x) v = std::normal_distribution<float>(0, 1)(rng);
  std::vector<double> h(cols * cols, 0.0);
  for (size_t t = 0; t < tokens; ++t)
    for (size_t i = 0; i < cols; ++i)
      for (size_t j = 0; j < cols; ++j) h[i * cols + j] += static_cast<double>(x[t * cols + i]) * x[t * cols + j];
  auto err = [&](const QuantizedTensor& q) {
    const auto d = q.Dequantize();
    double e = 0;
    for (size_t r = 0; r < rows; ++r)
      for (size_t i = 0; i < cols; ++i)
        for (size_t j = 0; j < cols; ++j)
          e += (w[r * cols + i] - d[r * cols + i]) * h[i * cols + j] * (w[r * cols + j] - d[r * cols + j]);
    return e;
  };
  for (const char* spec : {"int4:g32:asym", "int3:g64:asym", "int4:g32", "nvfp4"}) {
    const QuantScheme s = ParseScheme(spec);
    const double rtn = err(QuantizeRtn(w, rows, cols, s));
    const double clipped = err(QuantizeAwqClip(w, rows, cols, s, h, {}));
    EXPECT_LE(clipped, rtn * (1 + 1e-9)) << spec;
  }
  EXPECT_LT(err(QuantizeAwqClip(w, rows, cols, ParseScheme("int3:g64:asym"), h, {})),
            0.99 * err(QuantizeRtn(w, rows, cols, ParseScheme("int3:g64:asym"))));
}

TEST(Awq, WholeModelBeatsAsymmetricRtnOnHeldOutText) {
  const Model base = LoadHfModel(kModelDir);
  Model rtn_model = LoadHfModel(kModelDir), awq_model = LoadHfModel(kModelDir);
  const auto tok = LoadTokenizer(kModelDir);
  QuantizeRequest req;
  req.scheme = ParseScheme("int3:g128:asym");
  req.calibration = KjvCalibration(*tok, 16, 128);
  req.threads = 2;
  QuantizeModel(rtn_model, req);
  req.method = "awq";
  req.method_config = {{"scale_grid", 10}, {"clip_grid", 10}};
  const QuantizeReport report = QuantizeModel(awq_model, req);
  EXPECT_EQ(report.awq_alphas.size(), 18u);  // qkv, gate/up and down of six layers
  std::vector<int32_t> held_out = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 3000), true);
  held_out.resize(192);
  const double kl_rtn = MeanKl(base, rtn_model, held_out), kl_awq = MeanKl(base, awq_model, held_out);
  EXPECT_LT(kl_awq, kl_rtn) << "awq " << kl_awq << " rtn " << kl_rtn;
}

}  // namespace
}  // namespace lowbit
