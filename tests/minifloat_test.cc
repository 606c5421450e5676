// Every code of every <= 8-bit float format against the spec formula and the spec tables of
// docs/formats.md; RNE ties, saturation, NaN and subnormals on hand-picked values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "formats/minifloat.h"

namespace lowbit {
namespace {

// The notation of formats.md 1.1, written independently of the codec: normal
// (-1)^s 2^(e-B) (1 + m/2^M), subnormal (-1)^s 2^(1-B) m/2^M.
double SpecValue(int E, int M, int B, bool sign_bit, uint32_t code) {
  const bool neg = sign_bit && ((code >> (E + M)) & 1);
  const uint32_t e = (code >> M) & ((1u << E) - 1);
  const uint32_t m = code & ((1u << M) - 1);
  const double v = e == 0 ? std::ldexp(m / std::ldexp(1.0, M), 1 - B)
                          : std::ldexp(1.0 + m / std::ldexp(1.0, M), static_cast<int>(e) - B);
  return neg ? -v : v;
}

struct Case {
  const MiniFloat* f;
  int E, M, B;
};

TEST(MiniFloat, EveryCodeDecodesToTheSpecValueAndReencodesToItself) {
  for (const Case& c : {Case{&kE4M3, 4, 3, 7}, Case{&kE5M2, 5, 2, 15}, Case{&kE2M3, 2, 3, 1},
                        Case{&kE3M2, 3, 2, 3}, Case{&kE2M1, 2, 1, 1}}) {
    for (uint32_t code = 0; code < c.f->code_count(); ++code) {
      SCOPED_TRACE(testing::Message() << c.f->name << " code 0x" << std::hex << code);
      const float v = DecodeMiniFloat(*c.f, code);
      if (IsNanCode(*c.f, code)) {
        EXPECT_TRUE(std::isnan(v));
        continue;
      }
      if (c.f->has_inf && ((code >> c.M) & ((1u << c.E) - 1)) == (1u << c.E) - 1) {
        EXPECT_TRUE(std::isinf(v));
        EXPECT_EQ(EncodeMiniFloat(*c.f, v, Overflow::kInfOrNan), code);
        continue;
      }
      EXPECT_EQ(v, SpecValue(c.E, c.M, c.B, true, code));
      EXPECT_EQ(EncodeMiniFloat(*c.f, v), code);
    }
  }
}

TEST(MiniFloat, SpecTableFacts) {
  EXPECT_EQ(MaxFinite(kE4M3), 448);
  EXPECT_EQ(MinNormal(kE4M3), std::ldexp(1.0, -6));
  EXPECT_EQ(MinSubnormal(kE4M3), std::ldexp(1.0, -9));
  EXPECT_EQ(MaxFinite(kE5M2), 57344);
  EXPECT_EQ(MinSubnormal(kE5M2), std::ldexp(1.0, -16));
  EXPECT_EQ(MaxFinite(kE2M3), 7.5);
  EXPECT_EQ(MinSubnormal(kE2M3), 0.125);
  EXPECT_EQ(MaxFinite(kE3M2), 28);
  EXPECT_EQ(MinNormal(kE3M2), 0.25);
  EXPECT_EQ(MinSubnormal(kE3M2), 0.0625);
  EXPECT_EQ(MaxFinite(kE2M1), 6);
  EXPECT_EQ(MaxFinite(kFp16), 65504);
  EXPECT_EQ(MaxExponent(kE4M3), 8);
  EXPECT_EQ(MaxExponent(kE5M2), 15);
  EXPECT_EQ(MaxExponent(kE2M3), 2);
  EXPECT_EQ(MaxExponent(kE3M2), 4);
  EXPECT_EQ(MaxExponent(kE2M1), 2);
  // FP4 E2M1 code table (formats.md 1.5).
  const float fp4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 8; ++c) {
    EXPECT_EQ(DecodeMiniFloat(kE2M1, c), fp4[c]);
    EXPECT_EQ(DecodeMiniFloat(kE2M1, c | 8), -fp4[c]);
  }
}

TEST(MiniFloat, E4M3SpecExamples) {
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 1.0f), 0x38u);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 2.0f), 0x40u);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 3.5f), 0x46u);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 0.25f), 0x28u);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, -1.5f), 0xBCu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 448.0f), 0x7Eu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, std::ldexp(1.0f, -9)), 0x01u);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, std::ldexp(1.0f, -10)), 0x00u);      // tie to even
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 3 * std::ldexp(1.0f, -10)), 0x02u);  // tie to even
  EXPECT_EQ(EncodeMiniFloat(kE4M3, std::ldexp(1.0f, -6)), 0x08u);
  // Saturating (default) vs non-saturating (PyTorch) overflow.
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 460.0f), 0x7Eu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 1000.0f), 0x7Eu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, -1000.0f), 0xFEu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, INFINITY), 0x7Eu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 464.0f, Overflow::kInfOrNan), 0x7Eu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, 465.0f, Overflow::kInfOrNan), 0x7Fu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, INFINITY, Overflow::kInfOrNan), 0x7Fu);
  EXPECT_EQ(EncodeMiniFloat(kE4M3, NAN) & 0x7F, 0x7Fu);
  EXPECT_TRUE(std::isnan(DecodeMiniFloat(kE4M3, 0xFF)));
  EXPECT_EQ(DecodeMiniFloat(kE4M3, 0x80), 0.0f);
  EXPECT_TRUE(std::signbit(DecodeMiniFloat(kE4M3, 0x80)));
}

TEST(MiniFloat, E5M2SpecExamples) {
  EXPECT_EQ(EncodeMiniFloat(kE5M2, 1.0f), 0x3Cu);
  EXPECT_EQ(EncodeMiniFloat(kE5M2, 57344.0f), 0x7Bu);
  EXPECT_EQ(EncodeMiniFloat(kE5M2, 61439.0f, Overflow::kInfOrNan), 0x7Bu);
  EXPECT_EQ(EncodeMiniFloat(kE5M2, 61440.0f, Overflow::kInfOrNan), 0x7Cu);  // tie goes to even = inf
  EXPECT_EQ(EncodeMiniFloat(kE5M2, 61440.0f), 0x7Bu);                        // saturating default
  EXPECT_EQ(EncodeMiniFloat(kE5M2, std::ldexp(1.0f, -16)), 0x01u);
  EXPECT_EQ(EncodeMiniFloat(kE5M2, std::ldexp(1.0f, -17)), 0x00u);
  EXPECT_TRUE(std::isinf(DecodeMiniFloat(kE5M2, 0xFC)));
  EXPECT_TRUE(std::isnan(DecodeMiniFloat(kE5M2, 0x7D)));
}

TEST(MiniFloat, Fp4RoundsHalfToEvenAndSaturates) {
  // formats.md 1.5: |x| <= 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4, > 5 -> 6.
  const std::pair<float, float> cases[] = {{0.25f, 0}, {0.26f, 0.5f}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2},
                                           {2.5f, 2},  {3.5f, 4},     {5.0f, 4},  {5.01f, 6}, {100.0f, 6}};
  for (const auto& [in, out] : cases) {
    EXPECT_EQ(DecodeMiniFloat(kE2M1, EncodeMiniFloat(kE2M1, in)), out) << in;
    EXPECT_EQ(DecodeMiniFloat(kE2M1, EncodeMiniFloat(kE2M1, -in)), -out) << -in;
  }
}

TEST(MiniFloat, Fp6SaturatesAndKeepsSubnormals) {
  EXPECT_EQ(DecodeMiniFloat(kE2M3, EncodeMiniFloat(kE2M3, 100.0f)), 7.5f);
  EXPECT_EQ(DecodeMiniFloat(kE3M2, EncodeMiniFloat(kE3M2, -100.0f)), -28.0f);
  EXPECT_EQ(DecodeMiniFloat(kE2M3, EncodeMiniFloat(kE2M3, 0.125f)), 0.125f);
  EXPECT_EQ(DecodeMiniFloat(kE2M3, EncodeMiniFloat(kE2M3, 0.0625f)), 0.0f);   // tie to even (0)
  EXPECT_EQ(DecodeMiniFloat(kE2M3, EncodeMiniFloat(kE2M3, 0.1875f)), 0.25f);  // tie to even (2/8)
}

TEST(MiniFloat, E8M0AndUE4M3Scales) {
  EXPECT_EQ(DecodeMiniFloat(kE8M0, 127), 1.0f);
  EXPECT_EQ(DecodeMiniFloat(kE8M0, 0), std::ldexp(1.0f, -127));
  EXPECT_EQ(DecodeMiniFloat(kE8M0, 254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(DecodeMiniFloat(kE8M0, 0xFF)));
  for (uint32_t code = 0; code < 255; ++code) EXPECT_EQ(EncodeMiniFloat(kE8M0, DecodeMiniFloat(kE8M0, code)), code);
  // Ties between 2^k and 2^(k+1) lie at 1.5 * 2^k and go to the even exponent.
  EXPECT_EQ(EncodeMiniFloat(kE8M0, 0.75f), 127u);   // 2^-1 or 2^0 -> 2^0
  EXPECT_EQ(EncodeMiniFloat(kE8M0, 1.5f), 127u);    // 2^0 or 2^1 -> 2^0
  EXPECT_EQ(EncodeMiniFloat(kE8M0, 3.0f), 129u);    // 2^1 or 2^2 -> 2^2
  EXPECT_EQ(EncodeMiniFloat(kE8M0, 1.4f), 127u);
  EXPECT_EQ(EncodeMiniFloat(kUE4M3, -3.0f), 0u);
  EXPECT_EQ(EncodeMiniFloat(kUE4M3, 1000.0f), 0x7Eu);
  for (uint32_t code = 0; code < 0x7F; ++code) EXPECT_EQ(EncodeMiniFloat(kUE4M3, DecodeMiniFloat(kUE4M3, code)), code);
}

TEST(MiniFloat, Fp16AllCodesRoundTripAndMatchReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = Fp16ToFp32(static_cast<uint16_t>(h));
    const float ref = DecodeMiniFloat(kFp16, h);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(v)) << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(v), std::bit_cast<uint32_t>(ref)) << h;
    ASSERT_EQ(Fp32ToFp16(v), h) << h;
  }
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);  // tie rounds up to inf
  EXPECT_EQ(Fp32ToFp16(1e-8f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(NAN) & 0x7FFF, 0x7E00);
}

TEST(MiniFloat, Fp16AndBf16FastPathsMatchTheReferenceOnRandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(Fp32ToFp16(x), EncodeMiniFloat(kFp16, x)) << x;
    ASSERT_EQ(Fp32ToBf16(x), EncodeMiniFloat(kBf16, x)) << x;
  }
  // bf16 ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1.0); 1 + 3*2^-8 -> up.
  EXPECT_EQ(Fp32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(Fp32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
}

}  // namespace
}  // namespace lowbit
