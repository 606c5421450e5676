// The SIMD row codecs against their scalar references, on every SIMD target this CPU supports,
// including ragged groups, odd lengths and all bit widths; bit packing round trips.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "formats/codec.h"
#include "formats/element.h"
#include "test_util.h"

namespace lowbit {
namespace {

using testing_util::ForEachTarget;

TEST(Packing, RoundTripsEveryWidthAndPutsElement0InTheLowBits) {
  std::mt19937 rng(3);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {1u, 7u, 8u, 33u, 100u}) {
      std::vector<uint8_t> codes(n), back(n), packed(PackedBytes(n, bits));
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
      PackCodes(codes.data(), n, bits, packed.data());
      UnpackCodes(packed.data(), n, bits, back.data());
      EXPECT_EQ(codes, back) << bits << " bits, n=" << n;
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(ReadCode(packed.data(), i, bits), codes[i]);
    }
  }
  const uint8_t two[2] = {0x3, 0xA};
  uint8_t byte = 0;
  PackCodes(two, 2, 4, &byte);
  EXPECT_EQ(byte, 0xA3);  // element 0 in the low nibble
  uint8_t three[3] = {0, 0, 0};
  WriteCode(three, 2, 6, 0x3F);  // bits 12..17 straddle bytes 1 and 2
  EXPECT_EQ(three[1], 0xF0);
  EXPECT_EQ(three[2], 0x03);
}

// A random table (decoded by lookup) and an integer one (codes converted), every width.
TEST(DecodeRow, MatchesReferenceOnEveryTargetWidthAndGroup) {
  std::mt19937 rng(5);
  std::vector<float> random_table(256), integer_table(256);
  for (auto& v : random_table) v = std::uniform_real_distribution<float>(-8, 8)(rng);
  for (int bits = 2; bits <= 8; ++bits) {
    for (const bool integer : {false, true}) {
      std::vector<float>& table = integer ? integer_table : random_table;
      for (uint32_t c = 0; integer && c < 256; ++c) table[c] = static_cast<float>(static_cast<int>(c) - (1 << (bits - 1)));
      ASSERT_EQ(IsAffineTable(table, bits), integer);
      for (size_t n : {5u, 64u, 96u, 1000u, 4096u, 10000u}) {
        for (size_t group : {5u, 16u, 32u, 100u, 128u, 601u, 5000u}) {
          const size_t groups = (n + group - 1) / group;
          std::vector<float> scales(groups), biases(groups);
          for (size_t g = 0; g < groups; ++g) {
            scales[g] = std::uniform_real_distribution<float>(0.01f, 1)(rng);
            biases[g] = std::uniform_real_distribution<float>(-1, 1)(rng);
          }
          std::vector<uint8_t> codes(n), packed(PackedBytes(n, bits));
          for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
          PackCodes(codes.data(), n, bits, packed.data());
          const GroupedRow row{n, group, scales.data(), biases.data()};
          std::vector<float> want(n);
          DecodeRowRef(packed.data(), bits, table.data(), row, want.data());
          ForEachTarget([&](const std::string& target) {
            std::vector<float> got(n, NAN);
            DecodeRow(packed.data(), bits, table.data(), integer, row, got.data());
            for (size_t i = 0; i < n; ++i) {
              // Within float rounding: targets without FMA round the product separately.
              ASSERT_NEAR(got[i], want[i], 1e-6f * (std::fabs(want[i]) + 1))
                  << target << " bits=" << bits << (integer ? " integer" : " random") << " n=" << n
                  << " group=" << group << " i=" << i;
            }
          });
        }
      }
    }
  }
}

TEST(EncodeIntRow, MatchesReferenceBitForBitOnEveryTarget) {
  std::mt19937 rng(9);
  for (int bits : {2, 3, 4, 8}) {
    const size_t n = 777, group = 64, groups = (n + group - 1) / group;
    std::vector<float> x(n), scales(groups), pre(groups), post(groups);
    for (auto& v : x) v = std::normal_distribution<float>(0, 1)(rng);
    x[10] = 0.5f * 0.25f;  // an exact tie once divided by 0.25
    for (size_t g = 0; g < groups; ++g) {
      scales[g] = 0.25f;
      pre[g] = g % 2 ? 0.3f : 0.0f;
      post[g] = static_cast<float>(1 << (bits - 1));
    }
    const GroupedRow row{n, group, scales.data(), nullptr};
    const IntEncodeParams p{(1 << bits) - 1, pre.data(), post.data()};
    std::vector<uint8_t> want(n);
    EncodeIntRowRef(x.data(), row, p, want.data());
    ForEachTarget([&](const std::string& target) {
      std::vector<uint8_t> got(n, 0xEE);
      EncodeIntRow(x.data(), row, p, got.data());
      EXPECT_EQ(got, want) << target << " bits=" << bits;
    });
  }
}

TEST(EncodeMiniFloatRow, MatchesReferenceBitForBitOnEveryTarget) {
  std::mt19937 rng(11);
  for (const MiniFloat* f : {&kE4M3, &kE5M2, &kE2M3, &kE3M2, &kE2M1}) {
    // Every representable value, its negations, midpoints (ties), out-of-range and random values.
    std::vector<float> x;
    for (uint32_t c = 0; c < f->code_count(); ++c) {
      const float v = DecodeMiniFloat(*f, c);
      if (!std::isfinite(v)) continue;
      x.push_back(v);
      const float next = DecodeMiniFloat(*f, c + 1);
      if (std::isfinite(next) && (c + 1) < f->code_count()) x.push_back(0.5f * (v + next));
    }
    for (int i = 0; i < 3000; ++i) x.push_back(std::normal_distribution<float>(0, 100)(rng));
    x.push_back(1e30f);
    x.push_back(-1e30f);
    const float scale = 1.0f;
    const GroupedRow row{x.size(), x.size(), &scale, nullptr};
    std::vector<uint8_t> want(x.size());
    EncodeMiniFloatRowRef(*f, x.data(), row, want.data());
    ForEachTarget([&](const std::string& target) {
      std::vector<uint8_t> got(x.size(), 0xEE);
      EncodeMiniFloatRow(*f, x.data(), row, got.data());
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << target << " " << f->name << " x=" << x[i];
    });
  }
}

TEST(HalfConversions, RowsMatchScalarOnEveryTarget) {
  std::mt19937 rng(13);
  std::vector<float> x(10007);
  for (auto& v : x) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  x[0] = 65520.0f;
  x[1] = 1e-8f;
  x[2] = -0.0f;
  std::vector<uint16_t> want16(x.size()), want_bf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want16[i] = Fp32ToFp16(x[i]);
    want_bf[i] = Fp32ToBf16(x[i]);
  }
  ForEachTarget([&](const std::string& target) {
    std::vector<uint16_t> h(x.size()), b(x.size());
    Fp32ToFp16Row(x.data(), x.size(), h.data());
    Fp32ToBf16Row(x.data(), x.size(), b.data());
    EXPECT_EQ(h, want16) << target;
    EXPECT_EQ(b, want_bf) << target;
    std::vector<float> back(x.size());
    Fp16ToFp32Row(h.data(), h.size(), back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float ref = Fp16ToFp32(h[i]);
      ASSERT_TRUE(std::bit_cast<uint32_t>(back[i]) == std::bit_cast<uint32_t>(ref) ||
                  (std::isnan(back[i]) && std::isnan(ref)))
          << target << " " << h[i];
    }
    Bf16ToFp32Row(b.data(), b.size(), back.data());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), static_cast<uint32_t>(b[i]) << 16) << target;
  });
}

TEST(ElementCodecs, Nf4TernaryAndMxInt8) {
  // NF4: nearest level; the midpoint between levels 7 (0) and 8 goes to the lower index.
  EXPECT_EQ(EncodeElement(*FindElementFormat("nf4"), 0.0f, 0), 7u);
  EXPECT_EQ(EncodeElement(*FindElementFormat("nf4"), 0.5f * kNF4Levels[8], 0), 7u);
  EXPECT_EQ(EncodeElement(*FindElementFormat("nf4"), 0.9f, 0), 15u);
  EXPECT_EQ(EncodeElement(*FindElementFormat("nf4"), -5.0f, 0), 0u);
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(EncodeElement(*FindElementFormat("nf4"), kNF4Levels[c], 0), c);
  const ElementFormat& ternary = *FindElementFormat("ternary");
  EXPECT_EQ(EncodeElement(ternary, -3.0f, 0), 0u);
  EXPECT_EQ(EncodeElement(ternary, 0.5f, 0), 1u);  // round half to even -> 0
  EXPECT_EQ(EncodeElement(ternary, 0.51f, 0), 2u);
  const ElementFormat& mxint8 = *FindElementFormat("mxint8");
  EXPECT_EQ(EncodeElement(mxint8, 1.0f, 0), 64u);
  EXPECT_EQ(EncodeElement(mxint8, -5.0f, 0), static_cast<uint32_t>(static_cast<uint8_t>(-127)));
  std::array<float, 256> table{};
  BuildDecodeTable(mxint8, true, table);
  EXPECT_EQ(table[64], 1.0f);
  EXPECT_EQ(table[0x81], -127.0f / 64);
  BuildDecodeTable(IntElement(4), true, table);
  EXPECT_EQ(table[0], -8.0f);
  EXPECT_EQ(table[15], 7.0f);
  BuildDecodeTable(IntElement(4), false, table);
  EXPECT_EQ(table[15], 15.0f);
}

}  // namespace
}  // namespace lowbit
