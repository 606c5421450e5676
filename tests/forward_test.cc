// The fp32 forward pass against reference logits computed by independent implementations:
// Hugging Face transformers for kjv-llama-7m, llama2.c's run.c for stories260K.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/cpu.h"
#include "io/hf_model.h"
#include "io/llama2c.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "quant/scheme.h"
#include "test_util.h"

namespace lowbit {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<int32_t> Top5(const float* logits, size_t vocab) {
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  idx.resize(5);
  return idx;
}

void ExpectMatchesReference(const Model& model, const std::vector<int32_t>& ids, const nlohmann::json& positions,
                            size_t threads) {
  Engine engine(model, threads);
  KvCache cache = engine.NewCache(ids.size());
  const std::vector<float> logits = engine.Forward(cache, ids, /*all_logits=*/true);
  const size_t vocab = model.config.vocab_size;
  ASSERT_EQ(logits.size(), ids.size() * vocab);
  for (const auto& p : positions) {
    const size_t pos = p["pos"];
    const float* row = &logits[pos * vocab];
    EXPECT_EQ(Top5(row, vocab), p["top5"].get<std::vector<int32_t>>()) << "position " << pos;
    const auto head = p["logits_head"].get<std::vector<float>>();
    for (size_t i = 0; i < head.size(); ++i) EXPECT_NEAR(row[i], head[i], 1e-4) << "position " << pos << " logit " << i;
  }
}

TEST(Forward, KjvLlamaMatchesTransformersReference) {
  const std::string dir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
  const Model model = LoadHfModel(dir);
  const auto ref = ReadJson(dir + "/reference.json");
  for (size_t threads : {1, 2}) ExpectMatchesReference(model, ref["ids"].get<std::vector<int32_t>>(), ref["positions"], threads);
}

// LOWBIT_CPU's lower levels take other kernels (AVX2 integer dots, Highway's AVX2 and SSE4 targets, no
// AVX-512 fp32 GEMM): the fp32 model still matches transformers at each, and quantized models give
// the same logits as at the CPU's own level.
std::vector<float> QuantizedLogits(const std::string& dir, const char* scheme, const std::vector<int32_t>& ids) {
  Model model = LoadHfModel(dir);
  QuantizeRequest request;
  request.scheme = ParseScheme(scheme);
  request.threads = 2;
  QuantizeModel(model, request);
  Engine engine(model, 2);
  KvCache cache = engine.NewCache(ids.size());
  return engine.Forward(cache, ids, /*all_logits=*/true);
}

TEST(Forward, EveryCpuLevelMatchesTheReference) {
  const std::string dir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
  const auto ref = ReadJson(dir + "/reference.json");
  const auto ids = ref["ids"].get<std::vector<int32_t>>();
  const char* schemes[] = {"int8", "int4:g32", "bf16"};
  std::vector<std::vector<float>> native;
  for (const char* scheme : schemes) native.push_back(QuantizedLogits(dir, scheme, ids));
  for (CpuLevel level : {CpuLevel::kAvx2, CpuLevel::kSse4}) {
    if (level >= CpuLevelCap()) continue;  // this CPU (or LOWBIT_CPU) is at that level already
    testing_util::AtCpuLevel at(level);
    ExpectMatchesReference(LoadHfModel(dir), ids, ref["positions"], 2);
    for (size_t k = 0; k < std::size(schemes); ++k) {
      const std::vector<float> capped = QuantizedLogits(dir, schemes[k], ids);
      ASSERT_EQ(capped.size(), native[k].size());
      float largest = 0;
      for (size_t i = 0; i < capped.size(); ++i) largest = std::max(largest, std::abs(capped[i] - native[k][i]));
      EXPECT_LT(largest, 2e-3) << schemes[k] << " at " << CpuLevelName(level);
    }
  }
}

TEST(Forward, Stories260KMatchesLlama2cReference) {
  const std::string dir = LOWBIT_SOURCE_DIR "/../shared/models/stories260K";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "../shared is not available";
  const Model model = LoadLlama2cModel(dir + "/stories260K.bin");
  EXPECT_EQ(model.config.dim, 64u);
  EXPECT_EQ(model.config.n_kv_heads, 4u);
  const auto ref = ReadJson(dir + "/reference.json");
  ExpectMatchesReference(model, ref["token_ids"].get<std::vector<int32_t>>(), ref["positions"], 2);
}

TEST(Forward, IncrementalDecodeAndBatchesMatchOneShotPrefill) {
  const Model model = LoadHfModel(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  Engine engine(model, 2);
  const std::vector<int32_t> a = {1, 1040, 261, 2108, 391, 3554, 261, 736}, b = {1, 50, 60, 70, 80};
  KvCache full = engine.NewCache(16);
  const auto all = engine.Forward(full, a, true);
  const size_t vocab = model.config.vocab_size;
  // Token by token through the cache.
  KvCache step = engine.NewCache(16);
  for (size_t t = 0; t < a.size(); ++t) {
    const auto last = engine.Forward(step, std::span(&a[t], 1), false);
    for (size_t i = 0; i < vocab; i += 97) ASSERT_NEAR(last[i], all[t * vocab + i], 2e-4) << t;
  }
  // Two sequences of different lengths in one batch.
  KvCache ca = engine.NewCache(16), cb = engine.NewCache(16);
  std::vector<float> la, lb;
  BatchItem batch[2] = {{&ca, a, true, &la}, {&cb, b, false, &lb}};
  engine.Forward(batch);
  KvCache alone = engine.NewCache(16);
  const auto lb_alone = engine.Forward(alone, b, false);
  for (size_t i = 0; i < la.size(); i += 31) ASSERT_NEAR(la[i], all[i], 2e-4);
  for (size_t i = 0; i < vocab; ++i) ASSERT_NEAR(lb[i], lb_alone[i], 2e-4);
  EXPECT_EQ(ca.size(), a.size());
  EXPECT_EQ(cb.size(), b.size());
}

}  // namespace
}  // namespace lowbit
