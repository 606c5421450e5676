// K-quant blocks (formats.md 2.8) built by a writer that follows the documented packing (the
// inverse of the reader's formulas, including get_scale_min_k4's writer), then decoded: every
// element must equal the documented value d * sc * q - dmin * m, computed here in ggml's order.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "formats/minifloat.h"
#include "io/gguf.h"

namespace lowbit {
namespace {

struct KBlock {
  std::vector<int> q = std::vector<int>(256);  // the quant of each element, as the formula uses it
  std::vector<int> sc, m;                      // per sub-block
  uint16_t d = 0, dmin = 0;
};

KBlock RandomBlock(uint32_t seed, int q_lo, int q_hi, int subs, int sc_lo, int sc_hi, int m_hi) {
  std::mt19937 rng(seed);
  auto in = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  KBlock k;
  for (int& q : k.q) q = in(q_lo, q_hi);
  for (int s = 0; s < subs; ++s) {
    k.sc.push_back(in(sc_lo, sc_hi));
    k.m.push_back(in(0, m_hi));
  }
  k.d = Fp32ToFp16(0.001f + 0.0001f * static_cast<float>(seed));
  k.dmin = Fp32ToFp16(0.0005f * static_cast<float>(seed % 7 + 1));
  return k;
}

void Put(std::vector<std::byte>& b, size_t at, int bits, int shift) {
  b[at] |= static_cast<std::byte>(bits << shift);
}
void PutHalf(std::vector<std::byte>& b, size_t at, uint16_t h) { std::memcpy(&b[at], &h, 2); }

// get_scale_min_k4's writer: j < 4 direct; j >= 4 low nibbles in s[j + 4], high bits in s[j - 4], s[j].
void PutScaleMinK4(std::vector<std::byte>& b, size_t at, const KBlock& k) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      Put(b, at + j, k.sc[j], 0);
      Put(b, at + j + 4, k.m[j], 0);
    } else {
      Put(b, at + j + 4, (k.sc[j] & 0xF) | ((k.m[j] & 0xF) << 4), 0);
      Put(b, at + j - 4, k.sc[j] >> 4, 6);
      Put(b, at + j, k.m[j] >> 4, 6);
    }
  }
}

std::vector<float> Decoded(uint32_t type, const std::vector<std::byte>& block) {
  std::vector<float> y(256);
  DequantizeGgufRow(type, block.data(), 256, y.data());
  return y;
}

void ExpectValues(const std::vector<float>& got, const KBlock& k, int sub) {
  const float d = Fp16ToFp32(k.d), dmin = Fp16ToFp32(k.dmin);
  for (int e = 0; e < 256; ++e) {
    const float dl = d * static_cast<float>(k.sc[e / sub]), ml = dmin * static_cast<float>(k.m[e / sub]);
    ASSERT_EQ(got[e], dl * static_cast<float>(k.q[e]) - ml) << "element " << e;
  }
}

TEST(GgufKQuants, Q2_K) {
  const KBlock k = RandomBlock(3, 0, 3, 16, 0, 15, 15);
  std::vector<std::byte> b(84);
  for (int s = 0; s < 16; ++s) Put(b, s, k.sc[s] | k.m[s] << 4, 0);
  for (int e = 0; e < 256; ++e) Put(b, 16 + 32 * (e / 128) + e % 32, k.q[e], 2 * ((e % 128) / 32));
  PutHalf(b, 80, k.d);
  PutHalf(b, 82, k.dmin);
  ExpectValues(Decoded(kGgmlQ2_K, b), k, 16);
}

TEST(GgufKQuants, Q3_K) {
  KBlock k = RandomBlock(4, -4, 3, 16, -32, 31, 0);
  std::vector<std::byte> b(110);
  for (int e = 0; e < 256; ++e) {
    const int code = k.q[e] + 4;  // the high bit set means "no -4"
    Put(b, e % 32, code >> 2, e / 32);
    Put(b, 32 + 32 * (e / 128) + e % 32, code & 3, 2 * ((e % 128) / 32));
  }
  for (int s = 0; s < 16; ++s) {
    const int v = k.sc[s] + 32;
    Put(b, 96 + (s < 8 ? s : s - 8), v & 0xF, s < 8 ? 0 : 4);
    Put(b, 96 + 8 + s % 4, v >> 4, 2 * (s / 4));
  }
  PutHalf(b, 108, k.d);
  k.dmin = 0;
  ExpectValues(Decoded(kGgmlQ3_K, b), k, 16);
}

TEST(GgufKQuants, Q4_KAndQ5_K) {
  for (const bool five : {false, true}) {
    const KBlock k = RandomBlock(five ? 6 : 5, 0, five ? 31 : 15, 8, 0, 63, 63);
    std::vector<std::byte> b(five ? 176 : 144);
    PutHalf(b, 0, k.d);
    PutHalf(b, 2, k.dmin);
    PutScaleMinK4(b, 4, k);
    const size_t qs = five ? 48 : 16;
    for (int e = 0; e < 256; ++e) {
      Put(b, qs + 32 * (e / 64) + e % 32, k.q[e] & 0xF, e % 64 < 32 ? 0 : 4);
      if (five) Put(b, 16 + e % 32, k.q[e] >> 4, e / 32);
    }
    ExpectValues(Decoded(five ? kGgmlQ5_K : kGgmlQ4_K, b), k, 32);
  }
}

TEST(GgufKQuants, Q6_K) {
  KBlock k = RandomBlock(7, -32, 31, 16, -128, 127, 0);
  std::vector<std::byte> b(210);
  for (int e = 0; e < 256; ++e) {
    const int code = k.q[e] + 32, h = e / 128, g = (e % 128) / 32, l = e % 32;
    Put(b, 64 * h + 32 * (g & 1) + l, code & 0xF, g < 2 ? 0 : 4);
    Put(b, 128 + 32 * h + l, code >> 4, 2 * g);
  }
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<std::byte>(static_cast<int8_t>(k.sc[s]));
  PutHalf(b, 208, k.d);
  k.dmin = 0;
  ExpectValues(Decoded(kGgmlQ6_K, b), k, 16);
}

}  // namespace
}  // namespace lowbit
