// GGUF block types repacked into our QuantizedTensor layout: each type dequantizes to exactly
// what the block reader decodes (formats.md 2.8; Q4_1/Q5_1 within one rounding of the min), runs
// through a fused kernel, and a model holding such weights gives the logits of its dequantized
// copy.
#include "io/gguf_repack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf_writer_for_tests.h"
#include "io/gguf_blocks.h"
#include "io/gguf_model.h"
#include "kernels/qmatmul.h"
#include "model/forward.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using gguf_testing::TinyModel;

struct Case {
  uint32_t type;
  std::string scheme;  // what it repacks into
  bool exact;          // bit-exact values (no float zero-point)
  bool same_size;      // our bits/weight equal ggml's
};

const Case kCases[] = {
    {kGgmlQ4_0, "int4:g32:scale=f16", true, true},
    {kGgmlQ4_1, "int4:g32:asym:scale=f16:zero=f32", false, false},
    {kGgmlQ5_0, "int5:g32:scale=f16", true, true},
    {kGgmlQ5_1, "int5:g32:asym:scale=f16:zero=f32", false, false},
    {kGgmlQ8_0, "int8:g32:scale=f16", true, true},
    {kGgmlQ8_1, "int8:g32:scale=f16", true, false},
    {kGgmlQ2_K, "int2:g16:asym:scale=f32:zero=f32", false, false},
    {kGgmlQ3_K, "int3:g16:scale=f32", true, false},
    {kGgmlQ4_K, "int4:g32:asym:scale=f32:zero=f32", false, false},
    {kGgmlQ5_K, "int5:g32:asym:scale=f32:zero=f32", false, false},
    {kGgmlQ6_K, "int6:g16:scale=f32", true, false},
    {kGgmlMXFP4, "fp4_e2m1:g32:scale=e8m0", true, true},
    {kGgmlIQ4_NL, "iq4_nl:g32:scale=f16", true, true},
};

GgufTensorInfo Info(uint32_t type, uint64_t rows, uint64_t cols, const std::vector<std::byte>& bytes) {
  return GgufTensorInfo{"blk.0.ffn_down.weight", type, {cols, rows}, 0, rows * cols, bytes};
}

TEST(GgufRepack, EveryBlockTypeDequantizesToTheReaderValues) {
  constexpr uint64_t kRows = 5, kCols = 512;
  for (const Case& c : kCases) {
    SCOPED_TRACE(GgmlTypeName(c.type));
    const std::vector<std::byte> bytes = TinyModel::RandomBlocks(c.type, kRows * kCols, c.type);
    const GgufTensorInfo t = Info(c.type, kRows, kCols, bytes);
    ASSERT_NE(FindGgmlBlockFormat(c.type), nullptr);
    const std::optional<QuantizedTensor> q = RepackGgufMatrix(t, kRows, kCols);
    ASSERT_TRUE(q.has_value());
    EXPECT_EQ(q->scheme().ToString(), ParseScheme(c.scheme).ToString());
    const GgmlTypeInfo& info = *FindGgmlType(c.type);
    if (c.same_size) {
      EXPECT_EQ(q->bits_per_weight(), 8.0 * info.block_bytes / info.block_elems);
    }

    const std::vector<float> want = DequantizeGgufTensor(t), got = q->Dequantize();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (c.exact) {
        ASSERT_EQ(got[i], want[i]) << i;
      } else {  // (q + m/d) * d against q * d + m: a few roundings of values below 1
        ASSERT_NEAR(got[i], want[i], 4e-7f) << i;
      }
    }
  }
}

// A zero scale with a non-zero min makes every value of the block the min: the block becomes
// codes 0, scale 1, zero -min, and still decodes exactly.
TEST(GgufRepack, ZeroScaleBlocksKeepTheirMinAndBadBlocksAreErrors) {
  std::vector<std::byte> q4_1 = TinyModel::RandomBlocks(kGgmlQ4_1, 64, 1);
  q4_1[20] = q4_1[21] = std::byte{0};  // second block: d = 0, min kept
  const GgufTensorInfo t = Info(kGgmlQ4_1, 1, 64, q4_1);
  const std::optional<QuantizedTensor> q = RepackGgufMatrix(t, 1, 64);
  ASSERT_TRUE(q.has_value());
  const std::vector<float> want = DequantizeGgufTensor(t), got = q->Dequantize();
  ASSERT_NE(want[32], 0.0f);
  for (size_t i = 32; i < 64; ++i) EXPECT_EQ(got[i], want[32]) << i;

  std::vector<std::byte> mx = TinyModel::RandomBlocks(kGgmlMXFP4, 64, 2);
  mx[17] = std::byte{0xFF};
  for (const bool repack : {true, false}) {
    try {
      if (repack) RepackGgufMatrix(Info(kGgmlMXFP4, 1, 64, mx), 1, 64);
      else DequantizeGgufTensor(Info(kGgmlMXFP4, 1, 64, mx));
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("blk.0.ffn_down.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("0xFF"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(FindGgmlBlockFormat(kGgmlF16), nullptr);
  EXPECT_FALSE(RepackGgufMatrix(Info(kGgmlF32, 1, 64, std::vector<std::byte>(256)), 1, 64).has_value());
}

// blk.0.ffn_down (the tiny llama's only matrix whose rows can hold whole blocks) in each block
// type: the model keeps it quantized and its logits match the same model with that weight
// dequantized.
TEST(GgufRepack, QuantizedModelMatchesItsDequantizedCopy) {
  const fs::path dir = fs::temp_directory_path() / ("lowbit_repack_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<int32_t> tokens = {3, 7, 1, 12, 5, 9};
  for (const Case& c : kCases) {
    SCOPED_TRACE(GgmlTypeName(c.type));
    TinyModel tm = gguf_testing::MakeTinyLlama({.ffn = 256});
    auto& tensors = tm.writer.tensors;
    std::erase_if(tensors, [](const auto& t) { return t.name == "blk.0.ffn_down.weight"; });
    tm.Blocks("blk.0.ffn_down.weight", {256, gguf_testing::kDim}, c.type, 7);
    const fs::path path = dir / "m.gguf";
    tm.writer.Write(path);

    const Model quantized = LoadGgufModel(path);
    const Linear& down = quantized.weights.layers[0].w_down;
    ASSERT_TRUE(down.quantized());
    Model dense = LoadGgufModel(path);
    dense.weights.layers[0].w_down.weight =
        DenseMatrix{down.rows(), down.cols(), std::get<QuantizedTensor>(down.weight).Dequantize()};

    Engine a(quantized, 1), b(dense, 1);
    KvCache ca = a.NewCache(16), cb = b.NewCache(16);
    const std::vector<float> la = a.Forward(ca, tokens, true), lb = b.Forward(cb, tokens, true);
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-4f * (1 + std::abs(lb[i]))) << i;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lowbit
