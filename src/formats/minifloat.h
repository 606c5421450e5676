// Scalar reference codecs for every small floating-point format lowbit knows: IEEE fp16,
// bfloat16, OCP FP8 (E4M3 "fn", E5M2), OCP FP6 (E2M3, E3M2), FP4 E2M1, the unsigned E4M3 block
// scale of NVFP4 (UE4M3) and the E8M0 shared scale of the MX formats.
//
// One parameterised codec covers them all: a format is (exponent bits, mantissa bits, bias,
// how it spells infinity and NaN, whether it has a sign bit). Encoding is round-to-nearest,
// ties-to-even, computed exactly in double precision (a power-of-two rescale and nearbyint are
// exact), so this is the source of truth the SIMD codecs are tested against.
#pragma once

#include <cstdint>
#include <string_view>

namespace lowbit {

enum class NanStyle : uint8_t {
  kNone,          // every code is finite (FP6, FP4)
  kIeee,          // exponent all ones, mantissa != 0 (fp16, bf16, E5M2)
  kAllOnes,       // only S.1111.111 (E4M3 "fn"); the top binade is otherwise normal
  kExponentOnly,  // E8M0: 0xFF
};

// What happens to finite values beyond the largest finite value after rounding.
enum class Overflow : uint8_t {
  kSaturate,  // clamp to +-max finite (OCP saturating mode; what every quantizer does)
  kInfOrNan,  // +-inf where the format has it, else NaN where it has it, else saturate
};

struct MiniFloat {
  std::string_view name;
  uint8_t exp_bits;
  uint8_t man_bits;
  int bias;
  bool has_inf;
  NanStyle nan;
  bool has_sign;        // UE4M3 and E8M0 are unsigned
  bool has_subnormals;  // E8M0 has none (code 0 is 2^-127)
  Overflow default_overflow;

  constexpr int total_bits() const { return exp_bits + man_bits + (has_sign ? 1 : 0); }
  constexpr uint32_t code_count() const { return 1u << total_bits(); }
};

inline constexpr MiniFloat kFp16{"fp16", 5, 10, 15, true, NanStyle::kIeee, true, true, Overflow::kInfOrNan};
inline constexpr MiniFloat kBf16{"bf16", 8, 7, 127, true, NanStyle::kIeee, true, true, Overflow::kInfOrNan};
inline constexpr MiniFloat kE4M3{"fp8_e4m3", 4, 3, 7, false, NanStyle::kAllOnes, true, true, Overflow::kSaturate};
inline constexpr MiniFloat kE5M2{"fp8_e5m2", 5, 2, 15, true, NanStyle::kIeee, true, true, Overflow::kSaturate};
inline constexpr MiniFloat kE2M3{"fp6_e2m3", 2, 3, 1, false, NanStyle::kNone, true, true, Overflow::kSaturate};
inline constexpr MiniFloat kE3M2{"fp6_e3m2", 3, 2, 3, false, NanStyle::kNone, true, true, Overflow::kSaturate};
inline constexpr MiniFloat kE2M1{"fp4_e2m1", 2, 1, 1, false, NanStyle::kNone, true, true, Overflow::kSaturate};
inline constexpr MiniFloat kUE4M3{"ue4m3", 4, 3, 7, false, NanStyle::kAllOnes, false, true, Overflow::kSaturate};
inline constexpr MiniFloat kE8M0{"e8m0", 8, 0, 127, false, NanStyle::kExponentOnly, false, false, Overflow::kSaturate};

// Decodes a code (the low total_bits() bits) to its value; NaN codes give a quiet NaN.
float DecodeMiniFloat(const MiniFloat& f, uint32_t code);

// Encodes with round-to-nearest-even. NaN input gives the NaN code, or +0 for formats without
// NaN. Negative input to an unsigned format gives +0 (the nearest representable value).
// E8M0 has no mantissa: finite positive inputs round to the nearest power of two (ties, which
// lie at 1.5 * 2^k in value, go to the even exponent), zero and negatives to 2^-127.
uint32_t EncodeMiniFloat(const MiniFloat& f, float x, Overflow overflow);
inline uint32_t EncodeMiniFloat(const MiniFloat& f, float x) {
  return EncodeMiniFloat(f, x, f.default_overflow);
}

// Facts for tables and scale selection.
double MaxFinite(const MiniFloat& f);
double MinNormal(const MiniFloat& f);
double MinSubnormal(const MiniFloat& f);  // == MinNormal when the format has no subnormals
int MaxExponent(const MiniFloat& f);      // emax_elem of the OCP MX spec: floor(log2(max finite))
bool IsNanCode(const MiniFloat& f, uint32_t code);

// Fast bit-level fp16 / bf16 conversions (RNE), identical to the reference on every input.
uint16_t Fp32ToFp16(float x);
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToBf16(float x);
float Bf16ToFp32(uint16_t b);

}  // namespace lowbit
