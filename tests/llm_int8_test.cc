// LLM.int8(): outlier input columns kept in full precision, the rest W8A8 (simulated).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/file_util.h"
#include "io/hf_model.h"
#include "io/quantized_checkpoint.h"
#include "kernels/matmul.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "model_test_util.h"
#include "quant/registry.h"
#include "quant/rtn.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

using testing_util::Int8ChannelW8A8Request;
using testing_util::MeanKl;

const std::string kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

double OutputError(const Linear& l, const std::vector<float>& x, size_t n, const std::vector<float>& truth) {
  ThreadPool pool(1);
  std::vector<float> y(truth.size());
  MatMul(l, x.data(), n, y.data(), pool);
  double e = 0;
  for (size_t i = 0; i < y.size(); ++i) e += (y[i] - truth[i]) * (y[i] - truth[i]);
  return e / static_cast<double>(y.size());
}

TEST(LlmInt8, PlantedOutlierColumnStaysExactAndErrorFallsFarBelowNaiveW8A8) {
  constexpr size_t rows = 16, cols = 64, n = 32, outlier = 5;
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  std::vector<float> w(rows * cols), x(n * cols);
  for (float& v : w) v = 0.1f * g(rng);
  for (float& v : x) v = g(rng);
  for (size_t t = 0; t < n; ++t) x[t * cols + outlier] = 60.0f + g(rng);  // a systematic outlier feature
  std::vector<float> truth(n * rows, 0.0f);
  for (size_t t = 0; t < n; ++t)
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) truth[t * rows + r] += x[t * cols + c] * w[r * cols + c];

  const QuantScheme w8 = ParseScheme("int8:channel"), a8 = ParseScheme("int8:token");
  Linear naive;
  naive.weight = QuantizeRtn(w, rows, cols, w8, "w");
  naive.input_quant = InputQuant{a8, 0};

  std::vector<float> amax(cols, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) amax[i % cols] = std::max(amax[i % cols], std::fabs(x[i]));
  std::vector<float> rest = w;
  std::optional<OutlierColumns> split = SplitOutlierColumns(rest, rows, cols, amax, 6.0);
  ASSERT_TRUE(split.has_value());
  ASSERT_EQ(split->columns, std::vector<uint32_t>{outlier});
  for (size_t r = 0; r < rows; ++r) {
    EXPECT_EQ(rest[r * cols + outlier], 0.0f);
    EXPECT_EQ(split->weight.values[r], w[r * cols + outlier]);
  }
  const auto method = BuiltinMethods().Create("llm_int8", nullptr, w8);
  EXPECT_EQ(method->outlier_threshold(), 6.0);
  Linear mixed;
  mixed.weight = method->Quantize({"w", rest, rows, cols}, w8);
  mixed.input_quant = InputQuant{a8, 0};
  mixed.outliers = split;

  const double e_naive = OutputError(naive, x, n, truth), e_mixed = OutputError(mixed, x, n, truth);
  EXPECT_LT(e_mixed * 20, e_naive) << "mixed " << e_mixed << " naive " << e_naive;
  EXPECT_THROW(BuiltinMethods().Create("llm_int8", {{"threshold", -1}}, w8), Error);
  EXPECT_THROW(BuiltinMethods().Create("llm_int8", nullptr, ParseScheme("fp8_e4m3:channel")), Error);
}

TEST(LlmInt8, BundledModelBeatsNaiveW8A8AndSurvivesSaveAndLoad) {
  const Model base = LoadHfModel(kModelDir);
  Model naive = LoadHfModel(kModelDir), mixed = LoadHfModel(kModelDir);
  const auto tok = LoadTokenizer(kModelDir);
  QuantizeRequest req = Int8ChannelW8A8Request(*tok, "int8:token", 8, 128);
  QuantizeModel(naive, req);
  req.method = "llm_int8";
  req.act_scheme.reset();  // llm_int8 defaults to int8 per-token activations
  const QuantizeReport r = QuantizeModel(mixed, req);
  EXPECT_GT(r.outlier_columns, 0u);
  ASSERT_TRUE(mixed.weights.layers[0].wq.input_quant.has_value());
  EXPECT_EQ(mixed.weights.layers[0].wq.input_quant->scheme.ToString(), naive.weights.layers[0].wq.input_quant->scheme.ToString());
  auto held_out = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 3000), true);
  held_out.resize(160);
  const double kl_naive = MeanKl(base, naive, held_out), kl_mixed = MeanKl(base, mixed, held_out);
  EXPECT_LT(kl_mixed, kl_naive) << "llm_int8 " << kl_mixed << " naive " << kl_naive;

  const auto out = std::filesystem::temp_directory_path() / ("lowbit_llmint8_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  SaveQuantizedModel(mixed, out, kModelDir, {{"recipe", "test"}});
  const Model loaded = LoadHfModel(out);
  std::filesystem::remove_all(out);
  size_t columns = 0;
  for (size_t l = 0; l < mixed.weights.layers.size(); ++l) {
    const LayerWeights& a = mixed.weights.layers[l];
    const LayerWeights& b = loaded.weights.layers[l];
    for (const auto& [x, y] : {std::pair{&a.wq, &b.wq}, {&a.w_up, &b.w_up}, {&a.w_down, &b.w_down}}) {
      ASSERT_EQ(x->outliers.has_value(), y->outliers.has_value());
      if (!x->outliers) continue;
      EXPECT_EQ(x->outliers->columns, y->outliers->columns);
      EXPECT_EQ(x->outliers->weight.values, y->outliers->weight.values);
      columns += x->outliers->columns.size();
    }
  }
  EXPECT_GT(columns, 0u);
  const std::vector<int32_t> few(held_out.begin(), held_out.begin() + 24);
  Engine em(mixed, 2), el(loaded, 2);
  KvCache cm = em.NewCache(few.size()), cl = el.NewCache(few.size());
  EXPECT_EQ(em.Forward(cm, few, true), el.Forward(cl, few, true));
}

}  // namespace
}  // namespace lowbit
