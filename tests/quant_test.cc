// QuantScheme arithmetic, RTN on hand-computed tensors (including the MX and NVFP4 scale rules),
// and the error report.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "formats/codec.h"
#include "quant/error_report.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

TEST(Scheme, BitsPerWeightCountsMetadata) {
  EXPECT_DOUBLE_EQ(ParseScheme("int4:g128:asym").BitsPerWeight(4096, 4096), 4.15625);  // fp16 scale + 4-bit zero
  EXPECT_DOUBLE_EQ(ParseScheme("int4:g128:asym:zero=f16").BitsPerWeight(4096, 4096), 4.25);
  EXPECT_DOUBLE_EQ(ParseScheme("int4:g128").BitsPerWeight(4096, 4096), 4.125);
  EXPECT_DOUBLE_EQ(ParseScheme("mxfp4").BitsPerWeight(4096, 4096), 4.25);
  EXPECT_DOUBLE_EQ(ParseScheme("nvfp4").BitsPerWeight(64, 64), 4.5 + 32.0 / (64 * 64));
  EXPECT_DOUBLE_EQ(ParseScheme("fp8_e4m3:block128x128").BitsPerWeight(256, 256), 8 + 32.0 / (128 * 128));
  EXPECT_DOUBLE_EQ(ParseScheme("bf16").BitsPerWeight(10, 10), 16);
  // The stored tensor agrees with the formula.
  std::vector<float> w(256 * 512, 0.5f);
  EXPECT_DOUBLE_EQ(QuantizeRtn(w, 256, 512, ParseScheme("int4:g128:asym")).bits_per_weight(), 4.15625);
  EXPECT_DOUBLE_EQ(QuantizeRtn(w, 256, 512, ParseScheme("nvfp4")).bits_per_weight(), 4.5 + 32.0 / w.size());
  // Packed zero-points are padded to whole bytes per row of groups: 3 groups x 4 bits = 2 bytes.
  w.resize(256 * 384);
  EXPECT_DOUBLE_EQ(QuantizeRtn(w, 256, 384, ParseScheme("int4:g128:asym")).bits_per_weight(), 4.125 + 16.0 / 384);
}

TEST(Scheme, ParsesCanonicalSpellingsAndRejectsNonsense) {
  for (const char* spec : {"int4:g128:scale=f16", "int3:g64:asym:scale=bf16", "fp8_e4m3:block128x128:scale=f32",
                           "fp4_e2m1:g16:scale=ue4m3:tscale", "int8:token:scale=f32", "nf4:g64:scale=f32"}) {
    EXPECT_EQ(ParseScheme(spec).ToString(), spec);
  }
  EXPECT_EQ(ParseScheme("mxfp4").ToString(), "fp4_e2m1:g32:scale=e8m0");
  EXPECT_EQ(ParseScheme("mxfp4:e8m0=round").ToString(), "fp4_e2m1:g32:scale=e8m0:e8m0=round");
  EXPECT_EQ(ParseScheme("mxfp4:e8m0=floor").ToString(), "fp4_e2m1:g32:scale=e8m0");
  EXPECT_THROW(ParseScheme("mxfp4:e8m0=ceil"), Error);
  EXPECT_THROW(ParseScheme("int4:g32:e8m0=round"), Error);     // no E8M0 scales
  EXPECT_THROW(ParseScheme("mxfp6_e3m2:e8m0=round"), Error);  // compressed-tensors defines no E3M2 rule
  EXPECT_EQ(ParseScheme("int4:g-1").granularity.kind, GranularityKind::kChannel);
  EXPECT_THROW(ParseScheme("int9"), Error);
  EXPECT_THROW(ParseScheme("int4:g0"), Error);
  EXPECT_THROW(ParseScheme("int4:gabc"), Error);
  EXPECT_THROW(ParseScheme("fp8_e4m3:asym"), Error);
  EXPECT_THROW(ParseScheme("fp16:g128"), Error);
  EXPECT_THROW(ParseScheme("int4:bogus"), Error);
  try {
    ParseScheme("int9");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nvfp4"), std::string::npos) << "lists the known formats";
  }
}

// GGUF storage: read through ParseGgufStorageScheme (the GGUF block table), refused by
// ParseScheme (no quantizer writes it), counted with its fp16 super-block scales and mins.
TEST(Scheme, GgufStorageIsCountedAndRefusedToQuantizers) {
  const QuantScheme q4_k = ParseGgufStorageScheme("int4:g32:asym:scale=i8:zero=min8:super256");
  EXPECT_EQ(q4_k.ToString(), "int4:g32:asym:scale=i8:zero=min8:super256");
  EXPECT_EQ(q4_k.super_groups(), 8u);
  // 4 + (8 + 8) / 32 + (16 + 16) / 256; one super-block of a ragged row of 300 columns: 10 groups, 2 super-blocks.
  EXPECT_DOUBLE_EQ(q4_k.BitsPerWeight(4096, 4096), 4.625);
  EXPECT_EQ(q4_k.StorageBytes(3, 300), 3 * 150 + 3 * 10 * 2 + 3 * 2 * 4u);
  EXPECT_DOUBLE_EQ(ParseGgufStorageScheme("int6:g16:scale=i8:super256").BitsPerWeight(8, 512), 6.5625);  // Q6_K's 210 / 256 bytes
  EXPECT_DOUBLE_EQ(ParseGgufStorageScheme("int4:g32:asym:scale=f16:zero=bias_f16").BitsPerWeight(8, 512), 5.0);  // Q4_1's
  for (const char* spec : {"int4:g32:asym:scale=i8:zero=min8:super256", "int4:g32:asym:zero=bias_f16"}) {
    try {
      ParseScheme(spec);
      ADD_FAILURE() << spec << " parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("GGUF"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ParseGgufStorageScheme("int4:g32:scale=i8"), Error);           // sub-scales without a super-block
  EXPECT_THROW(ParseGgufStorageScheme("int4:g48:scale=i8:super256"), Error);  // groups must divide it
  EXPECT_THROW(ParseGgufStorageScheme("int4:g32:super256"), Error);           // fp16 sub-scales
  EXPECT_THROW(ParseGgufStorageScheme("fp8_e4m3:g32:scale=i8:super256:asym"), Error);
}

TEST(Scheme, GridsForEveryGranularity) {
  const ScaleGrid group = ParseScheme("int4:g128").Grid(10, 300);  // ragged last group of 44
  EXPECT_EQ(group.grid_rows, 10u);
  EXPECT_EQ(group.grid_cols, 3u);
  const ScaleGrid block = ParseScheme("fp8_e4m3:block128x128").Grid(300, 256);
  EXPECT_EQ(block.grid_rows, 3u);
  EXPECT_EQ(block.grid_cols, 2u);
  EXPECT_EQ(ParseScheme("int8:tensor").Grid(7, 9).cells(), 1u);
  EXPECT_EQ(ParseScheme("int8:token").Grid(7, 9).cells(), 7u);
}

TEST(Rtn, Int4SymmetricHandComputed) {
  // amax 3 -> scale 3 / 7.5 = 0.4 (fp32 scale). Codes round(x / 0.4) clamped to [-8, 7].
  const std::vector<float> w = {3.0f, -3.0f, 0.2f, 0.61f, -1.0f, 0.0f, 1.4f, -0.2f};
  const QuantizedTensor q = QuantizeRtn(w, 1, 8, ParseScheme("int4:tensor:scale=f32"));
  EXPECT_FLOAT_EQ(q.Scale(0), 0.4f);
  const std::vector<float> back = q.Dequantize();
  const float want[] = {7 * 0.4f, -8 * 0.4f, 0.0f, 2 * 0.4f, -2 * 0.4f, 0.0f, 4 * 0.4f, 0.0f};  // 0.5 ties to even
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(back[i], want[i]) << i;
  // Stored codes are offset binary: 3.0 -> 7 + 8 = 15 in the low nibble of byte 0.
  EXPECT_EQ(q.codes()[0] & 0xF, 15);
  EXPECT_EQ(q.codes()[0] >> 4, 0);
}

TEST(Rtn, Int4AsymmetricHandComputed) {
  // min 0 (range includes 0), max 1.5: scale 1.5 / 15 = 0.1, zero 0.
  // A shifted group [-1, 2]: scale 3/15 = 0.2, zero round(1/0.2) = 5.
  const std::vector<float> w = {0.0f, 1.5f, 0.75f, 0.3f, -1.0f, 2.0f, 0.5f, 0.0f};
  const QuantizedTensor q = QuantizeRtn(w, 1, 8, ParseScheme("int4:g4:asym:scale=f32"));
  EXPECT_FLOAT_EQ(q.Scale(0), 0.1f);
  EXPECT_EQ(q.Zero(0), 0);
  EXPECT_FLOAT_EQ(q.Scale(1), 0.2f);
  EXPECT_EQ(q.Zero(1), 5);
  const std::vector<float> back = q.Dequantize();
  const float want[] = {0.0f, 1.5f, 0.8f, 0.3f, -1.0f, 2.0f, 0.4f, 0.0f};  // 7.5 -> 8 (even); 2.5 -> 2 (even)
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(back[i], want[i], 1e-6) << i;
}

TEST(Rtn, MxScaleFollowsTheOcpRule) {
  // Block amax 5.0: floor(log2 5) = 2, minus emax_elem 2 (FP4) -> X = 2^0 = 1. 5.0 -> 4 (RNE tie
  // between 4 and 6 goes to the even mantissa), 6 would saturate.
  std::vector<float> block(32, 0.0f);
  block[0] = 5.0f;
  block[1] = -0.25f;  // tie between 0 and 0.5 -> 0
  block[2] = 1.75f;   // tie between 1.5 and 2 -> 2
  block[3] = 2.9f;
  const QuantizedTensor q = QuantizeRtn(block, 1, 32, ParseScheme("mxfp4"));
  EXPECT_EQ(q.scale_bytes()[0], 127);
  const auto back = q.Dequantize();
  EXPECT_EQ(back[0], 4.0f);
  EXPECT_EQ(back[1], 0.0f);
  EXPECT_EQ(back[2], 2.0f);
  EXPECT_EQ(back[3], 3.0f);
  // MXFP8 E4M3: amax 1000 -> floor(log2 1000) = 9, emax 8 -> X = 2, 1000/2 = 500 saturates to 448.
  block.assign(32, 0.0f);
  block[5] = 1000.0f;
  block[6] = 0.004f;  // 0.002 on the subnormal grid of 2^-9 (0.00195) -> one step
  const QuantizedTensor q8 = QuantizeRtn(block, 1, 32, ParseScheme("mxfp8_e4m3"));
  EXPECT_EQ(q8.scale_bytes()[0], 128);
  EXPECT_EQ(q8.Dequantize()[5], 896.0f);
  EXPECT_EQ(q8.Dequantize()[6], 2 * std::ldexp(1.0f, -9));
  // An all-zero block uses FP32's min normal: shared exponent -126 - 2 clamps to -127 (code 0).
  const QuantizedTensor zero = QuantizeRtn(std::vector<float>(32, 0.0f), 1, 32, ParseScheme("mxfp4"));
  EXPECT_EQ(zero.scale_bytes()[0], 0);
  for (float v : zero.Dequantize()) EXPECT_EQ(v, 0.0f);
  // MXINT8: emax 0; amax 3 -> X = 2^1; 3/2 = 1.5 -> code 96.
  block.assign(32, 0.0f);
  block[0] = 3.0f;
  const QuantizedTensor qi = QuantizeRtn(block, 1, 32, ParseScheme("mxint8"));
  EXPECT_EQ(qi.scale_bytes()[0], 128);
  EXPECT_EQ(qi.codes()[0], 96);
  EXPECT_EQ(qi.Dequantize()[0], 3.0f);
}

// e8m0=round, compressed-tensors' and vLLM's MX reference rule: the amax is first rounded half up
// to 1 mantissa bit (E2M1, E4M3) or 3 (E2M3), so the exponent goes up one where the OCP floor rule
// would push the block's largest value past the element's top binade.
TEST(Rtn, MxRoundRuleRoundsTheAmaxAtTheElementsPrecision) {
  const auto scale_byte = [](float amax, const char* format) {
    std::vector<float> block(32, 0.0f);
    block[7] = -amax;
    return static_cast<int>(QuantizeRtn(block, 1, 32, ParseScheme(format)).scale_bytes()[0]);
  };
  // FP4: 1.75 = 1.11b x 2^0 rounds to 2^1: exponent 1 - 2 (emax) = -1, byte 126; the OCP rule 0 - 2, byte 125.
  EXPECT_EQ(scale_byte(1.75f, "mxfp4:e8m0=round"), 126);
  EXPECT_EQ(scale_byte(1.75f, "mxfp4"), 125);
  EXPECT_EQ(scale_byte(1.7499f, "mxfp4:e8m0=round"), 125);  // below half a step of 1 bit: down
  EXPECT_EQ(scale_byte(7.0f, "mxfp4:e8m0=round"), 128);     // 1.75 x 2^2 -> 2^3: 3 - 2
  // E2M3 rounds at 3 bits: 1.9375 (1.1111b) goes up, 1.875 (its top value 7.5 / 4) does not.
  EXPECT_EQ(scale_byte(1.9375f, "mxfp6_e2m3:e8m0=round"), 126);
  EXPECT_EQ(scale_byte(1.875f, "mxfp6_e2m3:e8m0=round"), 125);
  // E4M3 at 1 bit, as compressed-tensors does: 448 = 1.75 x 2^8 -> 2^9, exponent 9 - 8 = 1, byte 128.
  EXPECT_EQ(scale_byte(448.0f, "mxfp8_e4m3:e8m0=round"), 128);
  EXPECT_EQ(scale_byte(448.0f, "mxfp8_e4m3"), 127);
  // The block's values then quantize on that scale: 1.75 / 0.5 = 3.5 -> 4 (tie to even) -> 2.0;
  // under the OCP scale 0.25 it was 7 -> 6 (saturated) -> 1.5.
  std::vector<float> block(32, 0.0f);
  block[0] = 1.75f;
  EXPECT_EQ(QuantizeRtn(block, 1, 32, ParseScheme("mxfp4:e8m0=round")).Dequantize()[0], 2.0f);
  EXPECT_EQ(QuantizeRtn(block, 1, 32, ParseScheme("mxfp4")).Dequantize()[0], 1.5f);
}

TEST(Rtn, Nvfp4TwoLevelScalesHandComputed) {
  // Tensor amax 2688 -> tensor scale 2688 / (6 * 448) = 1. Block 0 amax 2688 -> block scale
  // E4M3(2688 / 6) = E4M3(448) = 448; block 1 amax 3 -> E4M3(0.5) = 0.5.
  std::vector<float> w(32, 0.0f);
  w[0] = 2688.0f;
  w[1] = 1000.0f;  // 1000 / 448 = 2.23 -> 2 -> 896
  w[16] = 3.0f;
  w[17] = -0.75f;  // 0.75 / 0.5 = 1.5 exactly
  const QuantizedTensor q = QuantizeRtn(w, 1, 32, ParseScheme("nvfp4"));
  EXPECT_FLOAT_EQ(q.tensor_scale(), 1.0f);
  EXPECT_FLOAT_EQ(q.Scale(0), 448.0f);
  EXPECT_FLOAT_EQ(q.Scale(1), 0.5f);
  const auto back = q.Dequantize();
  EXPECT_FLOAT_EQ(back[0], 2688.0f);
  EXPECT_FLOAT_EQ(back[1], 896.0f);
  EXPECT_FLOAT_EQ(back[16], 3.0f);
  EXPECT_FLOAT_EQ(back[17], -0.75f);
}

TEST(Rtn, TernaryUsesAbsmeanAndNf4UsesAbsmax) {
  const std::vector<float> w = {1.0f, -1.0f, 0.1f, 2.0f};  // mean |w| = 1.025
  const QuantizedTensor t = QuantizeRtn(w, 1, 4, ParseScheme("ternary"));
  EXPECT_FLOAT_EQ(t.Scale(0), 1.025f);
  const auto tb = t.Dequantize();
  EXPECT_FLOAT_EQ(tb[0], 1.025f);
  EXPECT_FLOAT_EQ(tb[1], -1.025f);
  EXPECT_FLOAT_EQ(tb[2], 0.0f);
  EXPECT_FLOAT_EQ(tb[3], 1.025f);
  const std::vector<float> v = {-4.0f, 2.0f, 0.1f, 4.0f};
  const QuantizedTensor n = QuantizeRtn(v, 1, 4, ParseScheme("nf4:g4"));
  EXPECT_FLOAT_EQ(n.Scale(0), 4.0f);
  const auto nb = n.Dequantize();
  EXPECT_FLOAT_EQ(nb[0], -4.0f);
  EXPECT_FLOAT_EQ(nb[1], 4.0f * kNF4Levels[12]);  // 0.5 is nearest to 0.4407
  EXPECT_FLOAT_EQ(nb[2], 0.0f);
  EXPECT_FLOAT_EQ(nb[3], 4.0f);
}

TEST(Rtn, EveryPresetStaysWithinHalfAStepOnRandomWeights) {
  std::mt19937 rng(1);
  std::vector<float> w(64 * 300);
  for (auto& v : w) v = std::normal_distribution<float>(0, 0.05f)(rng);
  for (const SchemePreset& p : SchemePresets()) {
    const QuantScheme s = ParseScheme(p.name);
    const QuantizedTensor q = QuantizeRtn(w, 64, 300, s);  // 300 cols: ragged groups
    const ErrorReport e = MeasureError(w, q.Dequantize(), 64, 300);
    // Looser formats lose more, but every one must keep a positive signal-to-noise ratio, and
    // more bits must not be worse than fewer within a family.
    EXPECT_GT(e.sqnr_db, p.name == "ternary" || p.name == "int2" ? 3.0 : 8.0) << p.name;
    EXPECT_EQ(q.storage_bytes(), s.StorageBytes(64, 300)) << p.name;
  }
  auto sqnr = [&](const char* spec) {
    return MeasureError(w, QuantizeRtn(w, 64, 300, ParseScheme(spec)).Dequantize(), 64, 300).sqnr_db;
  };
  EXPECT_GT(sqnr("int8:g128"), sqnr("int4:g128"));
  EXPECT_GT(sqnr("int4:g32"), sqnr("int4:g128"));
  EXPECT_GT(sqnr("int4:g128"), sqnr("int3:g128"));
  EXPECT_GT(sqnr("int3:g128"), sqnr("int2:g128"));
  // Uniform int8 over [-amax, amax] with amax ~ 3 sigma (300 Gaussian draws per row): step
  // 3 sigma / 127.5, noise step^2 / 12, so SQNR = 10 log10(12 * 127.5^2 / 9) ~ 43.4 dB.
  EXPECT_NEAR(sqnr("int8"), 43.4, 1.5);
}

TEST(Rtn, RejectsNonFiniteInputNamingTheTensor) {
  std::vector<float> w = {1.0f, NAN, 2.0f, 3.0f};
  try {
    QuantizeRtn(w, 2, 2, ParseScheme("int8"), "layers.0.q_proj.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.q_proj.weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("row 0, column 1"), std::string::npos);
  }
  EXPECT_THROW(QuantizeRtn(std::vector<float>(3), 2, 2, ParseScheme("int8")), Error);
}

// Several rows at once (one long row of per-row groups when each row is one scale cell, as KV cache
// blocks are) decode exactly as row by row, with and without that fast path.
TEST(QuantizedTensor, DequantizeRowsEqualsRowByRow) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [spec, cols] : std::vector<std::pair<std::string, size_t>>{
           {"int4:channel:asym", 32}, {"int2:channel:asym", 32}, {"int4:g128:asym", 128}, {"int8:g64:scale=f32", 64},
           {"int4:g32:asym:zero=f16", 32}, {"fp8_e4m3:tensor", 48}, {"int4:g16", 64}, {"int3:channel", 40},
           {"fp16", 24}}) {
    const size_t rows = 40;
    std::vector<float> w(rows * cols);
    for (float& x : w) x = normal(rng);
    const QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
    std::vector<float> one(cols), many(17 * cols);
    q.DequantizeRows(9, 17, many.data());
    for (size_t r = 0; r < 17; ++r) {
      q.DequantizeRow(9 + r, one.data());
      for (size_t i = 0; i < cols; ++i) ASSERT_EQ(many[r * cols + i], one[i]) << spec << " row " << 9 + r << " col " << i;
    }
  }
}

// A KV cache reads KIVI's blocks through AffineRows (value = code x scale + bias, the decode table's
// offset folded in): the map of each row, applied to its codes, gives what Dequantize gives, for the
// fp16-scale / integer-zero blocks' one-pass path and the others. Rows split into groups do not
// qualify.
TEST(QuantizedTensor, AffineRowsMapCodesToTheDequantizedValues) {
  std::mt19937 rng(22);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [spec, cols] : std::vector<std::pair<std::string, size_t>>{
           {"int4:channel:asym", 32}, {"int2:channel:asym", 32}, {"int4:g128:asym", 128},
           {"int4:channel:asym:zero=f16", 32}, {"int4:channel", 40}, {"int8:channel:scale=f32", 24}}) {
    const size_t rows = 40, first = 9, n = 17;
    std::vector<float> w(rows * cols);
    for (float& x : w) x = normal(rng);
    const QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
    std::vector<float> scales(n), biases(n), row(cols);
    ASSERT_TRUE(q.AffineRows(first, n, scales.data(), biases.data())) << spec;
    for (size_t r = 0; r < n; ++r) {
      q.DequantizeRow(first + r, row.data());
      for (size_t i = 0; i < cols; ++i) {
        const uint32_t code = ReadCode(q.codes().data() + (first + r) * q.row_bytes(), i, q.scheme().element->bits);
        ASSERT_NEAR(static_cast<float>(code) * scales[r] + biases[r], row[i], 1e-6f * (1 + std::fabs(row[i])))
            << spec << " row " << first + r << " col " << i;
      }
    }
  }
  const QuantizedTensor grouped = QuantizeRtn(std::vector<float>(4 * 64, 1.0f), 4, 64, ParseScheme("int4:g16"), "w");
  float scale = 0, bias = 0;
  EXPECT_FALSE(grouped.AffineRows(0, 1, &scale, &bias));
}

TEST(ErrorReport, HandComputed) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {1, 2, 3, 2};
  const ErrorReport e = MeasureError(a, b, 2, 2);
  EXPECT_DOUBLE_EQ(e.mse, 1.0);
  EXPECT_DOUBLE_EQ(e.max_abs_error, 2.0);
  EXPECT_EQ(e.worst_channel, 1u);
  EXPECT_DOUBLE_EQ(e.worst_channel_mse, 2.0);
  EXPECT_NEAR(e.sqnr_db, 10 * std::log10(30.0 / 4.0), 1e-12);
  EXPECT_TRUE(std::isinf(MeasureError(a, a, 2, 2).sqnr_db));
}

}  // namespace
}  // namespace lowbit
