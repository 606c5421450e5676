// GGUF block encoders (io/gguf_quantize.h) against independent truth: the bytes ggml's reference
// quantizers give for formats.md 2.9's test vector, hand-computed ternary blocks, the decoder
// (error bounds, stability of re-encoding), the effect of importance weights, llama.cpp's bytes for
// the K-quants; and the K-quant grid's three phases (io/gguf_kquant_grid.h) against the encoder.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "formats/minifloat.h"
#include "io/gguf.h"
#include "io/gguf_kquant_grid.h"
#include "io/gguf_quantize.h"

namespace lowbit {
namespace {

constexpr uint32_t kAllTypes[] = {kGgmlQ4_0, kGgmlQ4_1, kGgmlQ5_0, kGgmlQ5_1,   kGgmlQ8_0,   kGgmlQ2_K,
                                  kGgmlQ3_K, kGgmlQ4_K, kGgmlQ5_K, kGgmlQ6_K,   kGgmlIQ4_NL, kGgmlIQ4_XS,
                                  kGgmlMXFP4, kGgmlTQ1_0, kGgmlTQ2_0, kGgmlF32, kGgmlF16,    kGgmlBF16};

std::vector<std::byte> Encode(uint32_t type, const std::vector<float>& x, std::span<const float> importance = {}) {
  const GgmlTypeInfo& info = *FindGgmlType(type);
  std::vector<std::byte> out(x.size() / info.block_elems * info.block_bytes);
  QuantizeGgufRow(type, x.data(), static_cast<int64_t>(x.size()), importance, out.data());
  return out;
}

std::vector<float> Decode(uint32_t type, const std::vector<std::byte>& bytes, size_t n) {
  std::vector<float> y(n);
  DequantizeGgufRow(type, bytes.data(), n, y.data());
  return y;
}

std::vector<uint8_t> Bytes(const std::vector<std::byte>& b) {
  std::vector<uint8_t> v(b.size());
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng) * scale;
  return x;
}

double RelativeRms(const std::vector<float>& x, const std::vector<float>& y) {
  double e2 = 0, x2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e2 += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    x2 += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e2 / x2);
}

// ---- formats.md 2.9: x_i = (i - 16) * 0.25, bytes from ggml's reference quantizers.

std::vector<float> TestVector() {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.25f;
  return x;
}

TEST(GgufQuantize, TestVectorsOfFormatsDoc) {
  const std::vector<float> x = TestVector();
  EXPECT_EQ(Bytes(Encode(kGgmlQ4_0, x)),
            (std::vector<uint8_t>{0x00, 0x38, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4, 0xc4, 0xd5, 0xd5, 0xe6,
                                  0xe6, 0xf7, 0xf7, 0xf8}));
  EXPECT_EQ(Bytes(Encode(kGgmlQ8_0, x)),
            (std::vector<uint8_t>{0x08, 0x28, 0x81, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xb9, 0xc0, 0xc8,
                                  0xd0, 0xd8, 0xe0, 0xe8, 0xf0, 0xf8, 0x00, 0x08, 0x10, 0x18, 0x20, 0x28,
                                  0x30, 0x38, 0x40, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77}));
  EXPECT_EQ(Bytes(Encode(kGgmlQ4_1, x)),
            (std::vector<uint8_t>{0x22, 0x38, 0x00, 0xc4, 0x80, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4, 0xc4,
                                  0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7}));
  EXPECT_EQ(Bytes(Encode(kGgmlMXFP4, x)),
            (std::vector<uint8_t>{0x7f, 0x0e, 0x0e, 0x1d, 0x1d, 0x2d, 0x2d, 0x3c, 0x3c, 0x4c, 0x4b, 0x4b, 0x5a, 0x5a,
                                  0x59, 0x59, 0x60}));
  // IQ4_NL: formats.md lists quantize_row_iq4_nl_ref's bytes (ntry = -1: the scale from +max, no
  // search), ending f6 f7 f7. ggml_quantize_chunk runs quantize_iq4_nl (ntry = 7: the scale from
  // -max, then the search), which picks index 6 instead of 7 for x_14 = -0.5: ... f6 f6 f7, the
  // bytes of llama-cpp-python 0.3.36's libggml-base for this input.
  EXPECT_EQ(Bytes(Encode(kGgmlIQ4_NL, x)),
            (std::vector<uint8_t>{0xfa, 0x27, 0x80, 0x90, 0x91, 0xa1, 0xb1, 0xb2, 0xc2, 0xc3, 0xd3, 0xd4, 0xe4, 0xe5,
                                  0xe5, 0xf6, 0xf6, 0xf7}));
  // The Q4_0 vector decodes as the document says: -4, -3.5, -3.5, -3, ..., 3.5, 3.5.
  const std::vector<float> y = Decode(kGgmlQ4_0, Encode(kGgmlQ4_0, x), 32);
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[1], -3.5f);
  EXPECT_EQ(y[31], 3.5f);
}

TEST(GgufQuantize, FloatConversionsOfFormatsDoc) {
  const std::vector<float> x = {1.0f, 65504.0f, 65520.0f, 1.00390625f, 1.01171875f, -0.0f};
  EXPECT_EQ(Bytes(Encode(kGgmlF16, x)),
            (std::vector<uint8_t>{0x00, 0x3c, 0xff, 0x7b, 0x00, 0x7c, 0x04, 0x3c, 0x0c, 0x3c, 0x00, 0x80}));
  const std::vector<uint8_t> bf16 = Bytes(Encode(kGgmlBF16, x));
  EXPECT_EQ(bf16[0] | bf16[1] << 8, 0x3f80);
  EXPECT_EQ(bf16[6] | bf16[7] << 8, 0x3f80);  // 1.00390625: a tie, to even
  EXPECT_EQ(bf16[8] | bf16[9] << 8, 0x3f82);  // 1.01171875: a tie, to even (up)
  // NaN stays NaN (quieted), as ggml_compute_fp32_to_bf16.
  const std::vector<uint8_t> nan = Bytes(Encode(kGgmlBF16, {std::bit_cast<float>(0x7f800001u)}));
  EXPECT_EQ(nan[0] | nan[1] << 8, 0x7fc0);
  const std::vector<float> f32 = {1.5f, -2.25f};
  EXPECT_EQ(Decode(kGgmlF32, Encode(kGgmlF32, f32), 2), f32);
}

// ---- Ternary blocks computed by hand from formats.md 2.8 (d = 0.5 -> fp16 0x3800).

std::vector<float> TernaryPattern(int (*trit)(int)) {
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = 0.5f * static_cast<float>(trit(e) - 1);
  return x;
}

TEST(GgufQuantize, Tq2_0HandComputed) {
  // All +1: every 2-bit field holds 2 -> 0b10101010; all -1: 0; all zero: fields 1, d = 0.
  std::vector<uint8_t> expect(66, 0xAA);
  expect[64] = 0x00, expect[65] = 0x38;
  EXPECT_EQ(Bytes(Encode(kGgmlTQ2_0, TernaryPattern([](int) { return 2; }))), expect);
  std::fill_n(expect.begin(), 64, 0x00);
  EXPECT_EQ(Bytes(Encode(kGgmlTQ2_0, TernaryPattern([](int) { return 0; }))), expect);
  std::fill_n(expect.begin(), 64, 0x55);
  expect[64] = expect[65] = 0;
  EXPECT_EQ(Bytes(Encode(kGgmlTQ2_0, std::vector<float>(256, 0.0f))), expect);

  // Trit e % 3: qs[0] holds elements 0, 32, 64, 96 (trits 0, 2, 1, 0) = 0 | 2 << 2 | 1 << 4 | 0 << 6;
  // qs[1] elements 1, 33, 65, 97 (1, 0, 2, 1) = 0x61; qs[32] elements 128, 160, 192, 224 (2, 1, 0, 2).
  const std::vector<float> x = TernaryPattern([](int e) { return e % 3; });
  const std::vector<uint8_t> b = Bytes(Encode(kGgmlTQ2_0, x));
  EXPECT_EQ(b[0], 0x18);
  EXPECT_EQ(b[1], 0x61);
  EXPECT_EQ(b[32], 2 | 1 << 2 | 0 << 4 | 2 << 6);
  EXPECT_EQ(b[64] | b[65] << 8, 0x3800);
  EXPECT_EQ(Decode(kGgmlTQ2_0, Encode(kGgmlTQ2_0, x), 256), x);
}

TEST(GgufQuantize, Tq1_0HandComputed) {
  // All +1: N = 242 -> ceil(256 * 242 / 243) = 255; qh N = (2*27 + 2*9 + 2*3 + 2) * 3 = 240 -> 253.
  std::vector<uint8_t> expect(54, 0xFF);
  std::fill_n(expect.begin() + 48, 4, 0xFD);
  expect[52] = 0x00, expect[53] = 0x38;
  EXPECT_EQ(Bytes(Encode(kGgmlTQ1_0, TernaryPattern([](int) { return 2; }))), expect);
  // All zero: trits 1, N = 121 -> 128 (0x80); qh N = 40 * 3 = 120 -> 127 (0x7F); d = 0.
  std::fill_n(expect.begin(), 48, 0x80);
  std::fill_n(expect.begin() + 48, 4, 0x7F);
  expect[52] = expect[53] = 0;
  EXPECT_EQ(Bytes(Encode(kGgmlTQ1_0, std::vector<float>(256, 0.0f))), expect);

  const std::vector<float> x = TernaryPattern([](int e) { return e % 3; });
  const std::vector<uint8_t> b = Bytes(Encode(kGgmlTQ1_0, x));
  // qs[0]: elements 0, 32, 64, 96, 128 -> trits 0, 2, 1, 0, 2: N = 54 + 9 + 2 = 65 -> ceil(68.48) = 69.
  EXPECT_EQ(b[0], 69);
  // qs[32]: elements 160, 176, 192, 208, 224 -> 1, 2, 0, 1, 2: N = 81 + 54 + 3 + 2 = 140 -> 148.
  EXPECT_EQ(b[32], 148);
  // qh[0]: elements 240, 244, 248, 252 -> 0, 1, 2, 0: N = (9 + 6) * 3 = 45 -> ceil(47.41) = 48.
  EXPECT_EQ(b[48], 48);
  EXPECT_EQ(b[52] | b[53] << 8, 0x3800);
  EXPECT_EQ(Decode(kGgmlTQ1_0, Encode(kGgmlTQ1_0, x), 256), x);

  // Every byte, from the document's formula (five trits, the first most significant).
  const auto byte_of = [&](std::initializer_list<int> elements, bool four) {
    int n = 0;
    for (int e : elements) n = 3 * n + (e % 3);
    if (four) n *= 3;
    return (256 * n + 242) / 243;
  };
  for (int m = 0; m < 32; ++m) EXPECT_EQ(b[m], byte_of({m, m + 32, m + 64, m + 96, m + 128}, false)) << m;
  for (int m = 0; m < 16; ++m)
    EXPECT_EQ(b[32 + m], byte_of({160 + m, 176 + m, 192 + m, 208 + m, 224 + m}, false)) << m;
  for (int j = 0; j < 4; ++j) EXPECT_EQ(b[48 + j], byte_of({240 + j, 244 + j, 248 + j, 252 + j}, true)) << j;
}

// ---- Special blocks whose bytes ggml fixes.

TEST(GgufQuantize, AllZeroBlocks) {
  const std::vector<float> zeros(256, 0.0f);
  for (uint32_t type : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    const std::vector<float> y = Decode(type, Encode(type, zeros), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f);
  }
  // Q6_K: an all-zero block is all zero bytes.
  EXPECT_EQ(Bytes(Encode(kGgmlQ6_K, zeros)), std::vector<uint8_t>(210, 0));
  // IQ4_XS: d = -0/32 = -0 (0x8000), every block scale l = 0 stored as 32 (scales_l 0, scales_h
  // 0b10 per block), every index that of level 1, the nearest to 0 (8).
  std::vector<uint8_t> iq4xs(136, 0x88);
  iq4xs[0] = 0x00, iq4xs[1] = 0x80, iq4xs[2] = 0xAA, iq4xs[3] = 0xAA;
  std::fill_n(iq4xs.begin() + 4, 4, 0x00);
  EXPECT_EQ(Bytes(Encode(kGgmlIQ4_XS, zeros)), iq4xs);
}

// ---- Round trips through the decoder.

struct Bound {
  uint32_t type;
  double gaussian_rms;  // relative RMS error on N(0, 1) rows
};
constexpr Bound kBounds[] = {
    {kGgmlQ8_0, 0.008}, {kGgmlQ6_K, 0.025}, {kGgmlQ5_K, 0.05},   {kGgmlQ5_0, 0.055},   {kGgmlQ5_1, 0.05},
    {kGgmlQ4_K, 0.09},  {kGgmlQ4_0, 0.11},  {kGgmlQ4_1, 0.10},   {kGgmlIQ4_NL, 0.095}, {kGgmlIQ4_XS, 0.095},
    {kGgmlQ3_K, 0.19},  {kGgmlQ2_K, 0.37},  {kGgmlMXFP4, 0.15},  {kGgmlTQ1_0, 0.9},    {kGgmlTQ2_0, 0.9},
    {kGgmlF16, 0.0005}, {kGgmlBF16, 0.004}, {kGgmlF32, 0.0},
};

TEST(GgufQuantize, RoundTripErrorWithinTypeBound) {
  for (const Bound& bound : kBounds) {
    SCOPED_TRACE(GgmlTypeName(bound.type));
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      for (float scale : {0.01f, 1.0f, 30.0f}) {
        const std::vector<float> x = Gaussian(1024, seed, scale);
        const std::vector<float> y = Decode(bound.type, Encode(bound.type, x), x.size());
        EXPECT_LE(RelativeRms(x, y), bound.gaussian_rms) << "seed " << seed << " scale " << scale;
      }
    }
  }
}

TEST(GgufQuantize, RowWithOneHugeOutlier) {
  for (const Bound& bound : kBounds) {
    if (bound.type == kGgmlTQ1_0 || bound.type == kGgmlTQ2_0) continue;  // ternary cannot hold it
    SCOPED_TRACE(GgmlTypeName(bound.type));
    std::vector<float> x = Gaussian(1024, 7, 1.0f);
    x[300] = 1000.0f;
    const std::vector<float> y = Decode(bound.type, Encode(bound.type, x), x.size());
    // MXFP4's scale rule clips (6, 8) * 2^k to 6 * 2^k: 1000 -> 768.
    EXPECT_NEAR(y[300], 1000.0f, bound.type == kGgmlMXFP4 ? 240.0f : 1.0f);
    // Blocks away from the outlier are untouched by it.
    const std::vector<float> tail(x.begin() + 512, x.end()), tail_y(y.begin() + 512, y.end());
    EXPECT_LE(RelativeRms(tail, tail_y), bound.gaussian_rms);
  }
}

TEST(GgufQuantize, Q8_0ErrorIsHalfAStepPerElement) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const std::vector<float> x = Gaussian(512, seed, 0.1f * static_cast<float>(seed));
    const std::vector<std::byte> b = Encode(kGgmlQ8_0, x);
    const std::vector<float> y = Decode(kGgmlQ8_0, b, x.size());
    for (size_t blk = 0; blk < x.size() / 32; ++blk) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * blk + j]));
      const float d = amax / 127;  // the scale codes are rounded with; the stored one is fp16
      uint16_t h;
      std::memcpy(&h, &b[34 * blk], 2);
      const float d16 = Fp16ToFp32(h);
      for (int j = 0; j < 32; ++j) {
        const float err = std::fabs(x[32 * blk + j] - y[32 * blk + j]);
        ASSERT_LE(err, 0.5f * d * 1.0001f + 127.0f * std::fabs(d - d16)) << "block " << blk << " element " << j;
      }
    }
  }
}

TEST(GgufQuantize, ReencodingTheDecodedValuesIsStable) {
  // Types whose decoded values sit exactly on the grid their own scale rule picks again.
  for (uint32_t type : {kGgmlQ8_0, kGgmlQ4_0, kGgmlQ5_0, kGgmlMXFP4, kGgmlTQ1_0, kGgmlTQ2_0, kGgmlF16, kGgmlBF16}) {
    SCOPED_TRACE(GgmlTypeName(type));
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      const std::vector<float> x = Gaussian(1024, seed, 0.5f * static_cast<float>(seed));
      const std::vector<std::byte> b = Encode(type, x);
      EXPECT_EQ(Encode(type, Decode(type, b, x.size())), b) << "seed " << seed;
    }
  }
}

TEST(GgufQuantize, TernaryInputsAreExact) {
  for (uint32_t type : {kGgmlTQ1_0, kGgmlTQ2_0}) {
    std::mt19937 rng(5);
    std::vector<float> x(512);
    for (float& v : x) v = 0.375f * static_cast<float>(static_cast<int>(rng() % 3) - 1);
    x[0] = 0.375f;  // each block's amax is the ternary step
    x[256] = -0.375f;
    EXPECT_EQ(Decode(type, Encode(type, x), x.size()), x);
  }
}

// ---- Importance weights.

// Sum over rows of the squared error on the heavy columns.
double HeavyColumnError(uint32_t type, const std::vector<float>& x, int64_t row, const std::vector<float>& importance,
                        bool use_importance) {
  const std::vector<float> y =
      Decode(type, Encode(type, x, use_importance ? std::span<const float>(importance) : std::span<const float>()),
             x.size());
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (importance[i % row] > 1) e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  return e;
}

TEST(GgufQuantize, ImportanceLowersTheErrorOnHeavyColumns) {
  const int64_t row = 1024;
  std::vector<float> importance(row, 1.0f);
  for (int64_t c = 0; c < row; c += 8) importance[c] = 1000.0f;
  importance[5] = 0.0f;  // a zero weight is allowed
  for (uint32_t type : {kGgmlQ4_K, kGgmlQ3_K, kGgmlQ6_K, kGgmlIQ4_XS, kGgmlQ4_0, kGgmlQ2_K, kGgmlQ5_K, kGgmlQ4_1,
                        kGgmlQ5_0, kGgmlQ5_1, kGgmlIQ4_NL}) {
    SCOPED_TRACE(GgmlTypeName(type));
    const std::vector<float> x = Gaussian(4 * row, 11, 0.02f);
    const double plain = HeavyColumnError(type, x, row, importance, false);
    const double weighted = HeavyColumnError(type, x, row, importance, true);
    EXPECT_LT(weighted, plain);
  }
}

TEST(GgufQuantize, RowsAreQuantizedIndependently) {
  const int64_t row = 512;
  std::vector<float> importance(row);
  std::mt19937 rng(3);
  for (float& w : importance) w = static_cast<float>(rng() % 100) / 10.0f;
  const std::vector<float> x = Gaussian(3 * row, 4, 1.0f);
  for (uint32_t type : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    const GgmlTypeInfo& info = *FindGgmlType(type);
    const size_t row_bytes = row / info.block_elems * info.block_bytes;
    const std::vector<std::byte> all = Encode(type, x, importance);
    for (int r = 0; r < 3; ++r) {
      const std::vector<float> one(x.begin() + r * row, x.begin() + (r + 1) * row);
      const std::vector<std::byte> b = Encode(type, one, importance);
      EXPECT_TRUE(std::equal(b.begin(), b.end(), all.begin() + static_cast<ptrdiff_t>(r * row_bytes))) << "row " << r;
    }
  }
  // Types that ignore importance give the same bytes with and without it.
  for (uint32_t type : {kGgmlQ8_0, kGgmlMXFP4, kGgmlTQ1_0, kGgmlTQ2_0, kGgmlF16})
    EXPECT_EQ(Encode(type, x, importance), Encode(type, x)) << GgmlTypeName(type);
}

// llama.cpp's bytes for the K-quants and IQ4_XS: FNV-1a 64 of what libggml-base 0.25.3's
// ggml_quantize_chunk (llama-cpp-python 0.3.36) writes for 4 rows of 512 from a portable
// generator (xorshift32, no libm), with and without importance weights.
std::vector<float> GoldenInput(std::vector<float>& importance) {
  uint32_t state = 12345;
  const auto next = [&] {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return static_cast<float>(state >> 8) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
  };
  std::vector<float> x(4 * 512);
  for (size_t i = 0; i < x.size(); ++i) {
    const float u = next(), v = next();
    x[i] = u * (0.25f + 4.0f * v * v * v * v) * (i % 512 < 256 ? 1.0f : 0.01f);
  }
  for (int i = 0; i < 32; ++i) x[512 + 64 + i] = 0.0f;  // zero sub-blocks
  x[1024 + 300] = 40.0f;                                // an outlier
  importance.resize(512);
  for (float& w : importance) {
    const float u = next();
    w = u < -0.8f ? 0.0f : (u + 1.0f) * (u + 1.0f) * 10.0f;
  }
  return x;
}

uint64_t Fnv1a(const std::vector<std::byte>& b) {
  uint64_t h = 14695981039346656037ull;
  for (std::byte c : b) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

TEST(GgufQuantize, KQuantBytesOfLlamaCpp) {
  struct Golden {
    uint32_t type;
    bool weighted;
    uint64_t fnv;
  };
  constexpr Golden kGolden[] = {
      {kGgmlQ2_K, false, 0x91d9f1aec301b4baull},   {kGgmlQ2_K, true, 0x635074d7dbda378bull},
      {kGgmlQ3_K, false, 0xe502315d0ede006full},   {kGgmlQ3_K, true, 0x7b21dc26c7579835ull},
      {kGgmlQ4_K, false, 0x16bb41ceba8e747cull},   {kGgmlQ4_K, true, 0x3520735a11a53a9dull},
      {kGgmlQ5_K, false, 0xf23472472a56fc5full},   {kGgmlQ5_K, true, 0x89bb7ae51ae8461aull},
      {kGgmlQ6_K, false, 0xd37d5d8e576dc56bull},   {kGgmlQ6_K, true, 0x7aa52cbe0c42c3beull},
      {kGgmlIQ4_XS, false, 0xb94a148713d37b75ull}, {kGgmlIQ4_XS, true, 0x4ba8e4bb5798c88full},
  };
  std::vector<float> importance;
  const std::vector<float> x = GoldenInput(importance);
  for (const Golden& g : kGolden) {
    EXPECT_EQ(Fnv1a(Encode(g.type, x, g.weighted ? std::span<const float>(importance) : std::span<const float>())),
              g.fnv)
        << GgmlTypeName(g.type) << (g.weighted ? " weighted" : "");
  }
}

// ---- The K-quant grid in three phases (io/gguf_kquant_grid.h).

constexpr uint32_t kGridTypes[] = {kGgmlQ2_K, kGgmlQ3_K, kGgmlQ4_K, kGgmlQ5_K, kGgmlQ6_K, kGgmlIQ4_XS};

// Rows of 1024 whose super-blocks cover what the encoders special-case: Gaussian rows at several
// scales, an all-zero super-block, zero sub-blocks among live ones, a huge outlier, one-signed
// and constant blocks, values around GROUP_MAX_EPS, heavy tails.
std::vector<float> GridTestRow(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const float scale = std::pow(10.0f, static_cast<float>(seed % 7) - 3);
  std::vector<float> x(1024);
  for (float& v : x) v = g(rng) * scale;
  const int variant = static_cast<int>(seed % 6);
  float* b = x.data() + 256 * (seed % 4);  // the super-block the variant rewrites
  switch (variant) {
    case 0: std::fill_n(b, 256, 0.0f); break;
    case 1:
      for (int i = 0; i < 256; ++i)
        if ((i / 16) % 3 == 1) b[i] = 0.0f;  // zero sub-blocks among live ones
      break;
    case 2: b[rng() % 256] = 1000.0f * scale; break;
    case 3:
      for (int i = 0; i < 256; ++i) b[i] = i < 128 ? -std::fabs(b[i]) : 0.75f * scale;  // one-signed, constant
      break;
    case 4:
      for (int i = 0; i < 256; ++i) b[i] = g(rng) * 3e-15f;  // amax around GROUP_MAX_EPS
      break;
    default:
      for (int i = 0; i < 256; ++i) b[i] = g(rng) * g(rng) * g(rng) * scale;
      break;
  }
  return x;
}

std::vector<float> GridImportance(uint32_t seed) {
  std::mt19937 rng(seed + 100);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(1024);
  for (float& v : w) v = rng() % 10 == 0 ? 0.0f : std::exp(2 * g(rng));
  return w;
}

// Phases 1 + 2 + 3 over each super-block of x (importance: a row of x.size() or empty).
std::vector<std::byte> EncodeByPhases(uint32_t type, const std::vector<float>& x, std::span<const float> importance) {
  const GgmlTypeInfo& info = *FindGgmlType(type);
  std::vector<std::byte> out(x.size() / 256 * info.block_bytes);
  for (size_t sb = 0; sb < x.size() / 256; ++sb) {
    const float* xb = x.data() + 256 * sb;
    const KQuantScales s = ChooseKQuantScales(type, xb, importance.empty() ? importance : importance.subspan(256 * sb, 256));
    int q[256];
    for (int i = 0; i < 256; ++i) q[i] = KQuantCode(s, i, xb[i]);
    PackKQuantBlock(s, q, out.data() + sb * info.block_bytes);
  }
  return out;
}

TEST(GgufKQuantGrid, PhasesGiveTheEncodersBytes) {
  for (uint32_t type : kGridTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    EXPECT_TRUE(HasKQuantGrid(type));
    for (uint32_t seed = 1; seed <= 60; ++seed) {
      const std::vector<float> x = GridTestRow(seed);
      const std::vector<float> importance = GridImportance(seed);
      EXPECT_EQ(EncodeByPhases(type, x, {}), Encode(type, x)) << "seed " << seed;
      EXPECT_EQ(EncodeByPhases(type, x, importance), Encode(type, x, importance)) << "seed " << seed << " weighted";
    }
  }
}

// value() is ggml's dequantize_row_* bit for bit (checked against libggml-base), -0 included;
// DequantizeGgufRow may give +0 for those, so the comparison is ==.
TEST(GgufKQuantGrid, ValueIsWhatTheDecoderGives) {
  for (uint32_t type : kGridTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    for (uint32_t seed = 1; seed <= 12; ++seed) {
      const std::vector<float> row = GridTestRow(seed);
      const std::vector<float> x(row.begin() + 256 * (seed % 4), row.begin() + 256 * (seed % 4) + 256);
      const std::vector<float> importance = GridImportance(seed);
      for (bool weighted : {false, true}) {
        const KQuantScales s = ChooseKQuantScales(
            type, x.data(), weighted ? std::span<const float>(importance.data(), 256) : std::span<const float>());
        int q[256];
        for (int i = 0; i < 256; ++i) q[i] = KQuantCode(s, i, x[i]);
        std::vector<std::byte> block(FindGgmlType(type)->block_bytes);
        PackKQuantBlock(s, q, block.data());
        const std::vector<float> y = Decode(type, block, 256);
        for (int i = 0; i < 256; ++i)
          ASSERT_EQ(s.value(i / s.sub(), q[i]), y[i]) << "seed " << seed << " element " << i;
      }
    }
  }
}

// GPTQ's use: the scales fixed from one set of values, then other values coded on that grid. The
// code is the grid point nearest x (up to the rounding of the division, and for IQ4_XS the fp32
// scale its indices are picked with), clamped to the code range.
TEST(GgufKQuantGrid, CodeIsTheNearestGridPointForChangedValues) {
  for (uint32_t type : kGridTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    int lo = 0, hi = 15;
    if (type == kGgmlQ2_K) hi = 3;
    if (type == kGgmlQ3_K) lo = -4, hi = 3;
    if (type == kGgmlQ5_K) hi = 31;
    if (type == kGgmlQ6_K) lo = -32, hi = 31;
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      const std::vector<float> x = Gaussian(256, seed, 1.0f);
      const KQuantScales s = ChooseKQuantScales(type, x.data(), {});
      const std::vector<float> moved = Gaussian(256, seed + 50, 1.2f);  // error feedback moved them
      for (int i = 0; i < 256; ++i) {
        const int j = i / s.sub();
        const int q = KQuantCode(s, i, moved[i]);
        ASSERT_GE(q, lo);
        ASSERT_LE(q, hi);
        if (s.scale(j) == 0) continue;
        const float err = std::fabs(s.value(j, q) - moved[i]);
        for (int other = lo; other <= hi; ++other)
          ASSERT_LE(err, std::fabs(s.value(j, other) - moved[i]) + 2e-3f * std::fabs(s.scale(j)) * 128)
              << "element " << i << " code " << q << " vs " << other;
      }
    }
  }
}

TEST(GgufKQuantGrid, ZeroScaleSubBlocksKeepTheSearchCodes) {
  // Q6_K: an all-zero super-block is all zero bytes; its codes are -32 whatever the values.
  const std::vector<float> zeros(256, 0.0f);
  const KQuantScales s6 = ChooseKQuantScales(kGgmlQ6_K, zeros.data(), {});
  EXPECT_EQ(s6.d, 0);
  EXPECT_EQ(KQuantCode(s6, 17, 5.0f), -32);
  // Q3_K: a zero sub-block among live ones has scale 0; its code ignores x.
  std::vector<float> x = Gaussian(256, 9, 1.0f);
  std::fill_n(x.begin() + 32, 16, 0.0f);
  const KQuantScales s3 = ChooseKQuantScales(kGgmlQ3_K, x.data(), {});
  EXPECT_EQ(s3.scale(2), 0.0f);
  EXPECT_EQ(KQuantCode(s3, 40, 3.0f), s3.search_codes[40]);
  EXPECT_EQ(KQuantCode(s3, 40, -3.0f), s3.search_codes[40]);
}

TEST(GgufKQuantGrid, RejectsWhatItCannotDo) {
  const std::vector<float> x = Gaussian(256, 1, 1.0f);
  EXPECT_FALSE(HasKQuantGrid(kGgmlQ4_0));
  EXPECT_FALSE(HasKQuantGrid(kGgmlIQ4_NL));
  EXPECT_THROW(ChooseKQuantScales(kGgmlQ4_0, x.data(), {}), Error);
  const std::vector<float> importance(128, 1.0f);
  EXPECT_THROW(ChooseKQuantScales(kGgmlQ4_K, x.data(), importance), Error);
  const KQuantScales s = ChooseKQuantScales(kGgmlQ4_K, x.data(), {});
  std::vector<int> q(256, 0);
  q[7] = 16;
  std::vector<std::byte> block(144);
  EXPECT_THROW(PackKQuantBlock(s, q.data(), block.data()), Error);
}

TEST(GgufQuantize, RejectsWhatItCannotEncode) {
  EXPECT_TRUE(CanQuantizeGguf(kGgmlQ4_K));
  EXPECT_FALSE(CanQuantizeGguf(kGgmlQ8_1));
  EXPECT_FALSE(CanQuantizeGguf(kGgmlIQ2_XXS));
  EXPECT_FALSE(CanQuantizeGguf(999));
  std::vector<float> x(256, 1.0f);
  std::vector<std::byte> out(1024);
  EXPECT_THROW(QuantizeGgufRow(kGgmlIQ2_XXS, x.data(), 256, {}, out.data()), Error);
  EXPECT_THROW(QuantizeGgufRow(kGgmlQ4_K, x.data(), 128, {}, out.data()), Error);  // not whole blocks
  const std::vector<float> importance(96, 1.0f);  // rows of 96 are not whole Q4_0 blocks
  EXPECT_THROW(QuantizeGgufRow(kGgmlQ4_0, x.data(), 256, importance, out.data()), Error);
  const std::vector<float> importance_k(512, 1.0f);  // 256 elements are not whole rows of 512
  EXPECT_THROW(QuantizeGgufRow(kGgmlQ4_K, x.data(), 256, importance_k, out.data()), Error);
}

}  // namespace
}  // namespace lowbit
