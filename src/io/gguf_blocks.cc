#include "io/gguf_blocks.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/element.h"
#include "formats/minifloat.h"
#include "io/gguf.h"
#include "quant/scheme.h"

namespace lowbit {
namespace {

// Loads use memcpy: blocks in the file are unaligned.
uint8_t Byte(const std::byte* p, size_t i) { return std::to_integer<uint8_t>(p[i]); }
float Half(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}
uint32_t U32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- 32-element types. Nibble types: element j (0..15) is the low nibble of qs[j], element
// j + 16 the high nibble; the 5-bit types add bit j of a u32 as the fifth bit.

void Nibbles(const std::byte* qs, uint32_t high_bits, uint8_t* codes) {
  for (int j = 0; j < 16; ++j) {
    codes[j] = static_cast<uint8_t>((Byte(qs, j) & 0xF) | ((high_bits >> j) & 1) << 4);
    codes[j + 16] = static_cast<uint8_t>((Byte(qs, j) >> 4) | ((high_bits >> (j + 16)) & 1) << 4);
  }
}

// Q4_0 and IQ4_NL: fp16 d, then nibbles (their tables differ: int4 offset 8, IQ4_NL levels).
void UnpackHalfAndNibbles(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  Nibbles(b + 2, 0, codes);
  scales[0] = Half(b);
  biases[0] = 0;
}
void UnpackQ4_1(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  Nibbles(b + 4, 0, codes);
  scales[0] = Half(b);
  biases[0] = Half(b + 2);
}
void UnpackQ5_0(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  Nibbles(b + 6, U32(b + 2), codes);
  scales[0] = Half(b);
  biases[0] = 0;
}
void UnpackQ5_1(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  Nibbles(b + 8, U32(b + 4), codes);
  scales[0] = Half(b);
  biases[0] = Half(b + 2);
}
// Q8_0 / Q8_1: int8 quants, stored offset-binary (q + 128) as our symmetric int8 codes are.
// Q8_1's second half is the block sum, which decoding does not need.
template <int kQuantsAt>
void UnpackQ8(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  for (int j = 0; j < 32; ++j) codes[j] = Byte(b, kQuantsAt + j) ^ 0x80;
  scales[0] = Half(b);
  biases[0] = 0;
}
// ggml's doubled E2M1 table times 2^(e - 128) is E2M1 times 2^(e - 127): an OCP E8M0 scale.
void UnpackMxfp4(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  const int e = Byte(b, 0);
  if (e == 0xFF) Fail("MXFP4 block with the reserved scale exponent 0xFF (NaN)");
  Nibbles(b + 1, 0, codes);
  scales[0] = std::ldexp(1.0f, e - 127);  // exact: 2^-127 is an fp32 subnormal
  biases[0] = 0;
}

// ---- K-quants: 256-element super-blocks with quantized sub-block scales. Each type has its
// codes and its two-level scales (TwoLevelScales, as stored); the float scales and biases of the
// canonical form are d * sc and -(dmin * m) (UnpackK).

// get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 packed bytes.
void ScaleMinK4(int j, const std::byte* s, int& sc, int& m) {
  if (j < 4) {
    sc = Byte(s, j) & 63;
    m = Byte(s, j + 4) & 63;
  } else {
    sc = (Byte(s, j + 4) & 0xF) | ((Byte(s, j - 4) >> 6) << 4);
    m = (Byte(s, j + 4) >> 4) | ((Byte(s, j) >> 6) << 4);
  }
}

void CodesQ2_K(const std::byte* b, uint8_t* codes) {
  const std::byte* qs = b + 16;
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    codes[e] = static_cast<uint8_t>((Byte(qs, 32 * h + l) >> (2 * g)) & 3);
  }
}
void ScalesQ2_K(const std::byte* b, TwoLevelScales& k) {
  k.d = Half(b + 80);
  k.dmin = Half(b + 82);
  for (int s = 0; s < 16; ++s) {
    k.scales[s] = static_cast<int8_t>(Byte(b, s) & 0xF);
    k.mins[s] = Byte(b, s) >> 4;
  }
}

void CodesQ3_K(const std::byte* b, uint8_t* codes) {
  const std::byte *hmask = b, *qs = b + 32;
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int low = (Byte(qs, 32 * h + l) >> (2 * g)) & 3, high = (Byte(hmask, e % 32) >> (e / 32)) & 1;
    codes[e] = static_cast<uint8_t>(low + 4 * high);  // q = low - 4 * !high, offset-binary q + 4
  }
}
void ScalesQ3_K(const std::byte* b, TwoLevelScales& k) {
  const std::byte* sc = b + 96;
  k.d = Half(b + 108);
  for (int s = 0; s < 16; ++s) {
    const int low4 = s < 8 ? Byte(sc, s) & 0xF : Byte(sc, s - 8) >> 4;
    const int high2 = (Byte(sc, 8 + s % 4) >> (2 * (s / 4))) & 3;
    k.scales[s] = static_cast<int8_t>((low4 | high2 << 4) - 32);
  }
}

// Q4_K / Q5_K: element e of sub-block e / 32; low 4 bits from qs[32 * (e / 64) + e % 32], low or
// high nibble by (e % 64) < 32; Q5_K's fifth bit is bit e / 32 of qh[e % 32].
template <bool kFifthBit>
void CodesQ45_K(const std::byte* b, uint8_t* codes) {
  const std::byte *qh = b + 16, *qs = b + (kFifthBit ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const uint8_t byte = Byte(qs, 32 * (e / 64) + e % 32);
    int q = e % 64 < 32 ? byte & 0xF : byte >> 4;
    if constexpr (kFifthBit) q |= ((Byte(qh, e % 32) >> (e / 32)) & 1) << 4;
    codes[e] = static_cast<uint8_t>(q);
  }
}
void ScalesQ45_K(const std::byte* b, TwoLevelScales& k) {
  k.d = Half(b);
  k.dmin = Half(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc = 0, m = 0;
    ScaleMinK4(j, b + 4, sc, m);
    k.scales[j] = static_cast<int8_t>(sc);
    k.mins[j] = static_cast<uint8_t>(m);
  }
}

void CodesQ6_K(const std::byte* b, uint8_t* codes) {
  const std::byte *ql = b, *qh = b + 128;
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t byte = Byte(ql, 64 * h + 32 * (g & 1) + l);
    const int low = g < 2 ? byte & 0xF : byte >> 4, high = (Byte(qh, 32 * h + l) >> (2 * g)) & 3;
    codes[e] = static_cast<uint8_t>(low | high << 4);  // q = code - 32: our symmetric int6
  }
}
void ScalesQ6_K(const std::byte* b, TwoLevelScales& k) {
  k.d = Half(b + 208);
  for (int s = 0; s < 16; ++s) k.scales[s] = static_cast<int8_t>(Byte(b + 192, s));
}

// IQ4_XS: 8 sub-blocks of 32, each laid out as an IQ4_NL block's nibbles (16 bytes of qs) with
// the scale d * (ls - 32); ls has its low 4 bits in scales_l (two per byte), high 2 in scales_h.
void CodesIq4_XS(const std::byte* b, uint8_t* codes) {
  for (int ib = 0; ib < 8; ++ib) Nibbles(b + 8 + 16 * ib, 0, codes + 32 * ib);
}
void ScalesIq4_XS(const std::byte* b, TwoLevelScales& k) {
  k.d = Half(b);
  const int scales_h = Byte(b, 2) | Byte(b, 3) << 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((Byte(b, 4 + ib / 2) >> (4 * (ib % 2))) & 0xF) | ((scales_h >> (2 * ib)) & 3) << 4;
    k.scales[ib] = static_cast<int8_t>(ls - 32);
  }
}

template <void (*kCodes)(const std::byte*, uint8_t*), void (*kScales)(const std::byte*, TwoLevelScales&), int kSubs>
void UnpackK(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  kCodes(b, codes);
  TwoLevelScales k;
  kScales(b, k);
  for (int s = 0; s < kSubs; ++s) {
    scales[s] = k.d * static_cast<float>(k.scales[s]);
    biases[s] = -(k.dmin * static_cast<float>(k.mins[s]));
  }
}

// ---- Ternary: trits 0, 1, 2 meaning -1, 0, +1 (our ternary codes), times the fp16 d.

// TQ1_0: trit n of byte b is ((uint8_t)(b * 3^n) * 3) >> 8. Elements 0..159 are trit e / 32 of
// qs[e % 32], 160..239 trit e' / 16 of qs[32 + e' % 16], 240..255 trit e' / 4 of qh[e' % 4].
void UnpackTq1_0(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  constexpr int kPow3[5] = {1, 3, 9, 27, 81};
  const auto trit = [&](size_t byte, int n) {
    return static_cast<uint8_t>((static_cast<uint8_t>(Byte(b, byte) * kPow3[n]) * 3) >> 8);
  };
  for (int e = 0; e < 160; ++e) codes[e] = trit(e % 32, e / 32);
  for (int e = 0; e < 80; ++e) codes[160 + e] = trit(32 + e % 16, e / 16);
  for (int e = 0; e < 16; ++e) codes[240 + e] = trit(48 + e % 4, e / 4);
  scales[0] = Half(b + 52);
  biases[0] = 0;
}

// TQ2_0: element e in bits 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32]. ggml's quantizer
// writes 0..2 only; a foreign code 3 (ggml: +2 * d) decodes to 0 under the ternary table.
void UnpackTq2_0(const std::byte* b, uint8_t* codes, float* scales, float* biases) {
  for (int e = 0; e < 256; ++e)
    codes[e] = static_cast<uint8_t>((Byte(b, 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3);
  scales[0] = Half(b + 64);
  biases[0] = 0;
}

constexpr GgmlBlockFormat kFormats[] = {
    {kGgmlQ4_0, "int4:g32:scale=f16", 32, UnpackHalfAndNibbles},
    {kGgmlQ4_1, "int4:g32:asym:scale=f16:zero=bias_f16", 32, UnpackQ4_1},
    {kGgmlQ5_0, "int5:g32:scale=f16", 32, UnpackQ5_0},
    {kGgmlQ5_1, "int5:g32:asym:scale=f16:zero=bias_f16", 32, UnpackQ5_1},
    {kGgmlQ8_0, "int8:g32:scale=f16", 32, UnpackQ8<2>},
    {kGgmlQ8_1, "int8:g32:scale=f16", 32, UnpackQ8<4>},
    {kGgmlQ2_K, "int2:g16:asym:scale=i8:zero=min8:super256", 16, UnpackK<CodesQ2_K, ScalesQ2_K, 16>, ScalesQ2_K},
    {kGgmlQ3_K, "int3:g16:scale=i8:super256", 16, UnpackK<CodesQ3_K, ScalesQ3_K, 16>, ScalesQ3_K},
    {kGgmlQ4_K, "int4:g32:asym:scale=i8:zero=min8:super256", 32, UnpackK<CodesQ45_K<false>, ScalesQ45_K, 8>, ScalesQ45_K},
    {kGgmlQ5_K, "int5:g32:asym:scale=i8:zero=min8:super256", 32, UnpackK<CodesQ45_K<true>, ScalesQ45_K, 8>, ScalesQ45_K},
    {kGgmlQ6_K, "int6:g16:scale=i8:super256", 16, UnpackK<CodesQ6_K, ScalesQ6_K, 16>, ScalesQ6_K},
    {kGgmlIQ4_NL, "iq4_nl:g32:scale=f16", 32, UnpackHalfAndNibbles},
    {kGgmlIQ4_XS, "iq4_nl:g32:scale=i8:super256", 32, UnpackK<CodesIq4_XS, ScalesIq4_XS, 8>, ScalesIq4_XS},
    {kGgmlTQ1_0, "ternary:g256:scale=f16", 256, UnpackTq1_0},
    {kGgmlTQ2_0, "ternary:g256:scale=f16", 256, UnpackTq2_0},
    {kGgmlMXFP4, "fp4_e2m1:g32:scale=e8m0", 32, UnpackMxfp4},
};

}  // namespace

const GgmlBlockFormat* FindGgmlBlockFormat(uint32_t ggml_type) {
  for (const GgmlBlockFormat& f : kFormats)
    if (f.type == ggml_type) return &f;
  return nullptr;
}

void DecodeGgmlBlocks(const GgmlBlockFormat& format, const std::byte* src, uint64_t blocks, float* out) {
  const GgmlTypeInfo& info = *FindGgmlType(format.type);
  const QuantScheme scheme = ParseGgufStorageScheme(format.scheme);
  std::array<float, 256> table;
  BuildDecodeTable(*scheme.element, !scheme.asymmetric(), table);
  std::vector<uint8_t> codes(info.block_elems);
  std::vector<float> scales(info.block_elems / format.sub), biases(scales.size());
  for (uint64_t b = 0; b < blocks; ++b, out += info.block_elems) {
    format.unpack(src + b * info.block_bytes, codes.data(), scales.data(), biases.data());
    for (uint32_t e = 0; e < info.block_elems; ++e)
      out[e] = scales[e / format.sub] * table[codes[e]] + biases[e / format.sub];
  }
}

}  // namespace lowbit
