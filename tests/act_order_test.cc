// Act-order with groups in processing order (GPTQ desc_act, compressed-tensors actorder "group"): the
// stored column order against group indices worked out by hand, the matmul's input gather against the
// dense product in input order, and GPTQ's group act-order on the bundled model carried unchanged through
// the lowbit folder and a GPTQ export, undone for GGUF, refused where a format has no g_idx.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/engine_export.h"
#include "io/gguf_export.h"
#include "io/hf_model.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "kernels/matmul.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "model/quantize_weights.h"
#include "model_test_util.h"
#include "plan/inspect.h"
#include "quant/column_order.h"
#include "quant/rtn.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

TEST(ColumnOrder, GroupIndexToStoredOrderAndBack) {
  // In order: nothing to store.
  EXPECT_TRUE(OrderFromGroupIndex(std::vector<uint32_t>{0, 0, 1, 1, 2}, 2, "g").empty());
  // 10 columns in groups of 4 (the last holds 2): group 2 = {0, 5}, group 0 = {1, 3, 7, 9}, group 1 = {2, 4, 6, 8}.
  const std::vector<uint32_t> g_idx = {2, 0, 1, 0, 1, 2, 1, 0, 1, 0};
  const std::vector<uint32_t> order = OrderFromGroupIndex(g_idx, 4, "g");
  EXPECT_EQ(order, (std::vector<uint32_t>{1, 3, 7, 9, 2, 4, 6, 8, 0, 5}));
  const std::vector<int32_t> back = GroupIndexOf(order, 10, 4);
  EXPECT_TRUE(std::ranges::equal(back, g_idx));
  EXPECT_TRUE(IsColumnOrder(order, 10));
  EXPECT_FALSE(IsColumnOrder(std::vector<uint32_t>{0, 1, 1}, 3));
  EXPECT_FALSE(IsColumnOrder(std::vector<uint32_t>{0, 1}, 3));
  // Group 2 may hold 2 columns, not 3.
  EXPECT_THROW(OrderFromGroupIndex(std::vector<uint32_t>{2, 0, 1, 0, 1, 2, 1, 0, 2, 0}, 4, "g"), Error);
}

// Input-order values of a stored tensor.
std::vector<float> InInputOrder(const OrderedTensor& t) {
  const std::vector<float> stored = t.tensor.Dequantize();
  std::vector<float> out(stored.size());
  const uint64_t cols = t.tensor.cols();
  for (uint64_t r = 0; r < t.tensor.rows(); ++r)
    for (uint64_t j = 0; j < cols; ++j) out[r * cols + (t.order.empty() ? j : t.order[j])] = stored[r * cols + j];
  return out;
}

TEST(ColumnOrder, CanonicalGroupOrderSortsWithinGroupsAndKeepsTheValues) {
  std::vector<float> w(2 * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i * i % 11) - 5.0f;
  const std::vector<uint32_t> order = {5, 1, 7, 3, 0, 6, 2, 4};  // groups {1, 3, 5, 7} and {0, 2, 4, 6}
  OrderedTensor t{QuantizeRtn(GatherColumns(w, 8, order), 2, 8, ParseScheme("int4:g4:asym")), order};
  const std::vector<float> before = InInputOrder(t);
  CanonicalGroupOrder(t);
  EXPECT_EQ(t.order, (std::vector<uint32_t>{1, 3, 5, 7, 0, 2, 4, 6}));
  EXPECT_EQ(InInputOrder(t), before);
  // Groups that are the input's own: no order left.
  OrderedTensor in_groups{QuantizeRtn(GatherColumns(w, 8, std::vector<uint32_t>{3, 2, 1, 0, 7, 6, 5, 4}), 2, 8,
                                      ParseScheme("int4:g4")),
                          {3, 2, 1, 0, 7, 6, 5, 4}};
  const std::vector<float> plain = InInputOrder(in_groups);
  CanonicalGroupOrder(in_groups);
  EXPECT_TRUE(in_groups.order.empty());
  EXPECT_EQ(InInputOrder(in_groups), plain);
}

TEST(ColumnOrder, MatMulGathersTheInputIntoTheStoredOrder) {
  const size_t rows = 24, cols = 128, tokens = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> w(rows * cols), x(tokens * cols);
  for (float& v : w) v = n(rng);
  for (float& v : x) v = n(rng);
  std::vector<uint32_t> order(cols);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  Linear l;
  const QuantizedTensor q = QuantizeRtn(GatherColumns(w, cols, order), rows, cols, ParseScheme("int4:g32"));
  const std::vector<float> stored = q.Dequantize();
  l.weight = q;
  l.input_order = order;
  ThreadPool pool(2);
  for (const Activations a : {Activations::kExact, Activations::kFast}) {
    std::vector<float> y(tokens * rows, 0.0f);
    MatMul(l, x.data(), tokens, y.data(), pool, a);
    for (size_t t = 0; t < tokens; ++t)
      for (size_t r = 0; r < rows; ++r) {
        double want = 0, norm = 0;  // stored column j multiplies input column order[j]
        for (size_t j = 0; j < cols; ++j) {
          want += static_cast<double>(stored[r * cols + j]) * x[t * cols + order[j]];
          norm += std::abs(stored[r * cols + j] * x[t * cols + order[j]]);
        }
        EXPECT_NEAR(y[t * rows + r], want, (a == Activations::kExact ? 1e-5 : 1e-2) * norm) << t << " " << r;
      }
  }
}

TEST(ColumnOrder, AnOrderThatIsNotAPermutationIsRefused) {
  Model m = LoadHfModel(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  QuantizeLinears(m.weights, ParseScheme("int4:g64"));
  std::vector<uint32_t>& order = m.weights.layers[1].wk.input_order;
  order.resize(m.config.dim);
  std::iota(order.begin(), order.end(), 0u);
  std::swap(order[0], order[5]);
  ValidateWeights(m.config, m.weights, "m");
  order[0] = order[1];
  try {
    ValidateWeights(m.config, m.weights, "m");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 self_attn.k_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("permutation"), std::string::npos) << e.what();
  }
}

std::vector<float> Logits(const Model& m, const std::vector<int32_t>& ids) {
  Engine e(m, 2);
  KvCache cache = e.NewCache(ids.size());
  return e.Forward(cache, ids, true);
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
  return d;
}

TEST(ActOrder, GroupOrderGptqSurvivesTheFormatsThatCarryIt) {
  const fs::path dir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
  const Model base = LoadHfModel(dir);
  Model grouped = LoadHfModel(dir);
  const auto tok = LoadTokenizer(dir);
  QuantizeRequest req;
  req.method = "gptq";
  req.method_config = {{"act_order", "group"}};
  req.scheme = ParseScheme("int4:g64");
  req.calibration = testing_util::KjvCalibration(*tok, 8, 128);
  req.threads = 2;
  const QuantizeReport report = QuantizeModel(grouped, req);
  // Every block linear is stored in descending-Hessian order (none of them happens to be in input order).
  size_t ordered = 0;
  for (const LayerWeights& lw : grouped.weights.layers)
    for (const ConstBlockLinear& bl : BlockLinears(lw)) {
      ordered += !bl.linear->input_order.empty();
      EXPECT_TRUE(IsColumnOrder(bl.linear->input_order, bl.linear->cols()));
    }
  EXPECT_EQ(ordered, 42u);
  for (const TensorReport& t : report.tensors) EXPECT_GT(t.output_mse, 0.0) << t.name;

  std::vector<int32_t> ids = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 1500), true);
  ids.resize(96);
  const std::vector<float> logits = Logits(grouped, ids);
  // Close to the base model: the gather puts every column back where its weight belongs.
  EXPECT_LT(testing_util::MeanKl(base, grouped, ids), 0.05);

  testing_util::ScratchDir scratch("lowbit-act-order");
  SaveQuantizedModel(grouped, scratch / "lowbit", dir, nlohmann::json::object());
  EXPECT_EQ(MaxAbsDiff(Logits(LoadHfModel(scratch / "lowbit"), ids), logits), 0.0) << "lowbit folder";
  const CheckpointInfo info = InspectCheckpoint(scratch / "lowbit");
  for (const LayerInfo& l : info.layers)
    EXPECT_EQ(l.act_order, l.name.starts_with("model.layers.")) << l.name;  // P.input_order is a side tensor
  EXPECT_EQ(info.layers.size(), 44u);
  {
    const fs::path out = scratch / "gptq";
    StreamedModel s = OpenModel(scratch / "lowbit");
    EngineExportOptions o;
    o.format = EngineFormat::kGptq;
    testing::internal::CaptureStderr();
    ExportEngineCheckpoint(s, scratch / "lowbit", out, nullptr, o);
    // Written, with a warning: vLLM 0.32 refuses desc_act (make test-vllm checks that refusal).
    const std::string warning = testing::internal::GetCapturedStderr();
    EXPECT_NE(warning.find("vLLM 0.32 refuses it"), std::string::npos) << warning;
    EXPECT_NE(warning.find("--act-order=static"), std::string::npos) << warning;
    EXPECT_EQ(ReadJsonFile(out / "config.json")["quantization_config"]["desc_act"], true);
    const Model back = LoadHfModel(out);
    EXPECT_EQ(back.weights.layers[2].w_up.input_order, grouped.weights.layers[2].w_up.input_order);
    EXPECT_EQ(MaxAbsDiff(Logits(back, ids), logits), 0.0) << "GPTQ";
  }
  // AWQ has no g_idx, and compressed-tensors 0.20 removed actorder "group": named errors, nothing written.
  for (const EngineFormat f : {EngineFormat::kAwq, EngineFormat::kCompressedTensors}) {
    StreamedModel s = OpenModel(scratch / "lowbit");
    EngineExportOptions o;
    o.format = f;
    const fs::path out = scratch / std::string(EngineFormatName(f));
    try {
      ExportEngineCheckpoint(s, scratch / "lowbit", out, nullptr, o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("act-order"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--act-order=static"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
  }
  // GGUF has no column order: F32 holds the dequantized weights back in input order.
  StreamedModel g = OpenModel(scratch / "lowbit");
  GgufExportOptions f32;
  f32.type = "F32";
  ExportGguf(g, scratch / "model.gguf", f32);
  EXPECT_LT(MaxAbsDiff(Logits(LoadModel(scratch / "model.gguf"), ids), logits), 1e-3) << "GGUF F32";
}

}  // namespace
}  // namespace lowbit
