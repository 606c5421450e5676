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
#include "eval/speed.h"
#include "gguf_writer_for_tests.h"
#include "io/gguf_blocks.h"
#include "io/gguf_model.h"
#include "kernels/qmatmul.h"
#include "kernels/qgemm_int8.h"
#include "kernels/qmatmul_int8.h"
#include "model/forward.h"
#include "quant/scheme.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using gguf_testing::TinyModel;

struct Case {
  uint32_t type;
  std::string scheme;  // what it repacks into
  double extra_bits;   // our bits/weight minus ggml's: sub-scales and mins take a byte each
};

const Case kCases[] = {
    {kGgmlQ4_0, "int4:g32:scale=f16", 0},
    {kGgmlQ4_1, "int4:g32:asym:scale=f16:zero=bias_f16", 0},
    {kGgmlQ5_0, "int5:g32:scale=f16", 0},
    {kGgmlQ5_1, "int5:g32:asym:scale=f16:zero=bias_f16", 0},
    {kGgmlQ8_0, "int8:g32:scale=f16", 0},
    {kGgmlQ8_1, "int8:g32:scale=f16", -0.5},  // its block sums are not kept
    {kGgmlQ2_K, "int2:g16:asym:scale=i8:zero=min8:super256", 0.5},
    {kGgmlQ3_K, "int3:g16:scale=i8:super256", 0.125},
    {kGgmlQ4_K, "int4:g32:asym:scale=i8:zero=min8:super256", 0.125},
    {kGgmlQ5_K, "int5:g32:asym:scale=i8:zero=min8:super256", 0.125},
    {kGgmlQ6_K, "int6:g16:scale=i8:super256", 0},
    {kGgmlIQ4_XS, "iq4_nl:g32:scale=i8:super256", 0.0625},
    {kGgmlMXFP4, "fp4_e2m1:g32:scale=e8m0", 0},
    {kGgmlIQ4_NL, "iq4_nl:g32:scale=f16", 0},
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
    EXPECT_EQ(q->scheme().ToString(), c.scheme);
    const GgmlTypeInfo& info = *FindGgmlType(c.type);
    EXPECT_EQ(q->bits_per_weight(), 8.0 * info.block_bytes / info.block_elems + c.extra_bits);

    // scale * code + bias with the file's scale and bias: ggml's values, up to whether the
    // multiply-add is fused (one rounding of values below 1).
    const std::vector<float> want = DequantizeGgufTensor(t), got = q->Dequantize();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (!q->scheme().asymmetric()) ASSERT_EQ(got[i], want[i]) << i;
      else ASSERT_NEAR(got[i], want[i], 1.2e-7f) << i;
    }

    // Rows reordered (and one repeated) with their codes, sub-scales, super-block scales and mins, as
    // converting llama.cpp's permuted Q/K rows back does: each row decodes exactly as its source row.
    const std::vector<uint64_t> from = {3, 0, 4, 1, 2, 3};
    const QuantizedTensor gathered = GatherRows(*q, from);
    ASSERT_EQ(gathered.rows(), from.size());
    std::vector<float> row(kCols), source(kCols);
    for (size_t r = 0; r < from.size(); ++r) {
      gathered.DequantizeRow(r, row.data());
      q->DequantizeRow(from[r], source.data());
      ASSERT_EQ(row, source) << r;
    }
  }
  // A scale cell over several rows cannot follow one row.
  const QuantizedTensor block(ParseScheme("fp8_e4m3:block128x128:scale=f32"), 256, 128);
  testing_util::ExpectError([&] { (void)GatherRows(block, std::vector<uint64_t>{1, 0}); },
                            {"block128x128", "several rows"});
}

// A zero scale with a non-zero min makes every value of the block the min: kept as a stored bias,
// and, written with plain scales (WithFloatScales, as a lowbit folder stores them), as codes 0,
// scale 1, zero -min; both decode exactly.
TEST(GgufRepack, ZeroScaleBlocksKeepTheirMinAndBadBlocksAreErrors) {
  std::vector<std::byte> q4_1 = TinyModel::RandomBlocks(kGgmlQ4_1, 64, 1);
  q4_1[20] = q4_1[21] = std::byte{0};  // second block: d = 0, min kept
  const GgufTensorInfo t = Info(kGgmlQ4_1, 1, 64, q4_1);
  const std::optional<QuantizedTensor> q = RepackGgufMatrix(t, 1, 64);
  ASSERT_TRUE(q.has_value());
  const std::vector<float> want = DequantizeGgufTensor(t), got = q->Dequantize(),
                           plain = WithFloatScales(*q).Dequantize();
  ASSERT_NE(want[32], 0.0f);
  for (size_t i = 32; i < 64; ++i) {
    EXPECT_EQ(got[i], want[32]) << i;
    EXPECT_EQ(plain[i], want[32]) << i;
  }

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

// The loader releases a tensor's mapped pages as it is repacked: the pieces handed back tile the
// tensor's bytes in order, a few MiB each, so the load never holds a whole large tensor twice.
std::vector<std::span<const std::byte>> consumed_pieces;
void RecordPiece(std::span<const std::byte> piece) { consumed_pieces.push_back(piece); }

TEST(GgufRepack, HandsBackTheTensorBytesPieceByPiece) {
  constexpr uint64_t kRows = 80000, kCols = 256;  // 144 bytes a row: 11.5 MB, two pieces of at most 8 MiB
  const std::vector<std::byte> bytes = TinyModel::RandomBlocks(kGgmlQ4_K, kRows * kCols, 3);
  consumed_pieces.clear();
  const std::optional<QuantizedTensor> q = RepackGgufMatrix(Info(kGgmlQ4_K, kRows, kCols, bytes), kRows, kCols, RecordPiece);
  ASSERT_TRUE(q.has_value());
  ASSERT_EQ(consumed_pieces.size(), 2u);
  const std::byte* next = bytes.data();
  for (const std::span<const std::byte> piece : consumed_pieces) {
    EXPECT_EQ(piece.data(), next);
    EXPECT_LE(piece.size(), size_t{8} << 20);
    next = piece.data() + piece.size();
  }
  EXPECT_EQ(next, bytes.data() + bytes.size());
}

// Every block type in every kernel that takes it, against the dense product of its dequantized
// values: the fused fp32 kernel on each SIMD target, and the int8-dot kernel (the GGUF storage's
// scales decoded in registers: i8 sub-scales under fp16 super-block scales, u8 mins, fp16 biases).
// 768 columns: three super-blocks, so 16-group vectors span super-blocks and end masked.
TEST(GgufRepack, EveryBlockTypeRunsInTheKernelsAsItsDequantizedValues) {
  constexpr size_t kRows = 19, kCols = 768, kTokens = 5;
  std::vector<float> x(kTokens * kCols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (1 + (i % 7 == 0));
  for (const Case& c : kCases) {
    SCOPED_TRACE(GgmlTypeName(c.type));
    const std::vector<std::byte> bytes = TinyModel::RandomBlocks(c.type, kRows * kCols, c.type + 50);
    const QuantizedTensor q = *RepackGgufMatrix(Info(c.type, kRows, kCols, bytes), kRows, kCols);
    const std::vector<float> dense = q.Dequantize();
    std::vector<float> exact(kTokens * kRows), reference(kTokens * kRows);
    double magnitude = 0;
    for (size_t t = 0; t < kTokens; ++t)
      for (size_t r = 0; r < kRows; ++r) {
        double sum = 0;
        for (size_t i = 0; i < kCols; ++i) sum += static_cast<double>(dense[r * kCols + i]) * x[t * kCols + i];
        exact[t * kRows + r] = static_cast<float>(sum);
        magnitude = std::max(magnitude, std::fabs(sum));
      }
    ASSERT_GT(magnitude, 0);
    QuantDotRowsRef(q, x.data(), kTokens, 0, kRows, reference.data(), kRows);
    for (size_t i = 0; i < exact.size(); ++i) ASSERT_NEAR(reference[i], exact[i], 1e-5 * magnitude) << i;
    testing_util::ForEachTarget([&](const std::string& target) {
      if (!HasFusedKernel(q)) return;  // 3, 5 and 6-bit codes on 4-lane targets: rows are decoded
      std::vector<float> got(kTokens * kRows, NAN);
      QuantDotRows(q, PrepareQuantInput(q, x.data(), kTokens), 0, kRows, got.data(), kRows);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], exact[i], 1e-5 * magnitude) << target << " " << i;
    });

    ASSERT_TRUE(Int8DotKernelFits(q));
    const Int8Activations a = QuantizeActivationsInt8(q, x.data(), kTokens);
    std::vector<float> int8_reference(kTokens * kRows);
    Int8DotRowsRef(q, a, 0, kRows, int8_reference.data(), kRows);
    const Int8Activations a_ref = QuantizeActivationsInt8Ref(q, x.data(), kTokens);
    EXPECT_TRUE(a.values == a_ref.values && a.scales == a_ref.scales && a.group_sums == a_ref.group_sums);
    if (HasInt8DotKernelAvx2(q)) {
      const Int8Activations a_avx2 = QuantizeActivationsInt8Avx2(q, x.data(), kTokens);
      EXPECT_TRUE(a_avx2.values == a_ref.values && a_avx2.scales == a_ref.scales && a_avx2.group_sums == a_ref.group_sums);
    }
    // The K-quants (i8 sub-scales under a super-block value) share one activation scale per 256
    // inputs, as llama.cpp's Q8_K: max |x| / 127 of the super-block, in each sub-block's entry.
    const bool k_quant = q.scheme().scale_type == ScaleType::kI8;
    ASSERT_EQ(a.layout.shared_blocks * a.layout.block, k_quant ? 256 : a.layout.block);
    // int8 activations in blocks: each input off by at most half a step (its block's max / 254),
    // so each output by at most the sum over blocks of that step times the block's sum of |w|.
    const size_t block = a.layout.block * a.layout.shared_blocks;
    for (size_t t = 0; t < kTokens; ++t)
      for (size_t r = 0; r < kRows; ++r) {
        double bound = 1e-5 * magnitude;
        for (size_t b0 = 0; b0 < kCols; b0 += block) {
          double amax = 0, weight = 0;
          for (size_t i = b0; i < b0 + block; ++i) {
            amax = std::max(amax, std::fabs(static_cast<double>(x[t * kCols + i])));
            weight += std::fabs(dense[r * kCols + i]);
          }
          bound += amax / 254 * weight;
          for (size_t b = b0 / a.layout.block; b < (b0 + block) / a.layout.block; ++b)
            ASSERT_EQ(a.scales[t * kCols / a.layout.block + b], static_cast<float>(amax) / 127.0f) << t << " " << b;
        }
        ASSERT_NEAR(int8_reference[t * kRows + r], exact[t * kRows + r], bound) << t << " " << r;
      }
    if (!HasInt8DotKernel(q)) continue;  // no VNNI or AVX2 form here: the reference is all there is
    std::vector<float> got(kTokens * kRows, NAN);
    Int8DotRows(q, a, 0, kRows, got.data(), kRows);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], int8_reference[i], 1e-5 * magnitude) << i;
    if (HasInt8DotKernelAvx2(q)) {
      std::vector<float> avx2(kTokens * kRows, NAN);
      Int8DotRowsAvx2(q, a, 0, kRows, avx2.data(), kRows);
      for (size_t i = 0; i < avx2.size(); ++i) ASSERT_NEAR(avx2[i], int8_reference[i], 1e-5 * magnitude) << "AVX2 " << i;
    }
    // 37 tokens: the prefill GEMM's bands of two 16-token tiles and a padded third (VNNI), and the
    // AVX2 kernel's groups of 8, 4 and 1 tokens (also where VNNI would take the call).
    constexpr size_t kMany = 37;
    std::vector<float> xs(kMany * kCols);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.21f * static_cast<float>(i)) * (1 + 3 * (i % 11 == 0));
    const Int8Activations many = QuantizeActivationsInt8(q, xs.data(), kMany);
    std::vector<float> many_reference(kMany * kRows), gemm(kMany * kRows, NAN);
    Int8DotRowsRef(q, many, 0, kRows, many_reference.data(), kRows);
    double many_magnitude = 0;
    for (float v : many_reference) many_magnitude = std::max(many_magnitude, std::fabs(static_cast<double>(v)));
    if (HasInt8DotKernelAvx2(q)) {
      std::vector<float> avx2(kMany * kRows, NAN);
      Int8DotRowsAvx2(q, many, 0, kRows, avx2.data(), kRows);
      for (size_t i = 0; i < avx2.size(); ++i)
        ASSERT_NEAR(avx2[i], many_reference[i], 1e-5 * many_magnitude) << "AVX2 " << i;
    }
    if (!HasInt8GemmKernel(q)) continue;
    Int8TokenTiles tiles(many);
    tiles.Fill(many, 0, tiles.tiles());
    Int8GemmRows(q, tiles, 0, kRows, gemm.data(), kRows);
    for (size_t i = 0; i < gemm.size(); ++i) ASSERT_NEAR(gemm[i], many_reference[i], 1e-5 * many_magnitude) << "GEMM " << i;
  }
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

namespace lowbit {
namespace {

// `bench gemv --format` takes GGUF block types by name, held as a loaded file holds them; plain
// float names stay schemes (BF16 is a ggml type too, but a plain one).
TEST(GemvWeight, GgufBlockTypesLoadAsFromAFileAndFloatNamesStaySchemes) {
  std::string name;
  const Linear q6 = GemvWeight("q6_k", 4, 512, name);
  EXPECT_EQ(name, "Q6_K (int6:g16:scale=i8:super256)");
  EXPECT_EQ(q6.storage_bytes(), 4u * 2 * 210);  // Q6_K's 210 bytes per 256 weights
  const Linear bf16 = GemvWeight("bf16", 4, 512, name);
  EXPECT_EQ(name, "bf16");
  EXPECT_EQ(bf16.storage_bytes(), 4u * 512 * 2);
  (void)GemvWeight("fp32", 4, 512, name);
  EXPECT_EQ(name, "fp32");
  EXPECT_THROW(GemvWeight("Q4_K", 4, 300, name), Error);  // rows of whole 256-weight blocks only
}

}  // namespace
}  // namespace lowbit
