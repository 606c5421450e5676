#include "formats/minifloat.h"

#include <bit>
#include <cmath>
#include <limits>

namespace lowbit {
namespace {

constexpr uint32_t SignBit(const MiniFloat& f) {
  return f.has_sign ? 1u << (f.exp_bits + f.man_bits) : 0u;
}
constexpr uint32_t MaxExpField(const MiniFloat& f) { return (1u << f.exp_bits) - 1; }

// Largest finite magnitude code (no sign bit).
uint32_t MaxFiniteCode(const MiniFloat& f) {
  const uint32_t man_all = (1u << f.man_bits) - 1;
  switch (f.nan) {
    case NanStyle::kNone:
      return (MaxExpField(f) << f.man_bits) | man_all;
    case NanStyle::kIeee:
      return ((MaxExpField(f) - 1) << f.man_bits) | man_all;
    case NanStyle::kAllOnes:
      return (MaxExpField(f) << f.man_bits) | (man_all - 1);
    case NanStyle::kExponentOnly:
      return MaxExpField(f) - 1;
  }
  return 0;
}

uint32_t NanCode(const MiniFloat& f) {
  switch (f.nan) {
    case NanStyle::kNone:
      return 0;
    case NanStyle::kIeee:  // quiet NaN: top mantissa bit set
      return (MaxExpField(f) << f.man_bits) | (1u << (f.man_bits - 1));
    case NanStyle::kAllOnes:
      return (MaxExpField(f) << f.man_bits) | ((1u << f.man_bits) - 1);
    case NanStyle::kExponentOnly:
      return MaxExpField(f);
  }
  return 0;
}

uint32_t InfCode(const MiniFloat& f) { return MaxExpField(f) << f.man_bits; }

// Value of a magnitude code (no sign bit), as double.
double MagnitudeValue(const MiniFloat& f, uint32_t mag) {
  const uint32_t e = mag >> f.man_bits;
  const uint32_t m = mag & ((1u << f.man_bits) - 1);
  const double frac = std::ldexp(static_cast<double>(m), -f.man_bits);
  if (e == 0 && f.has_subnormals) return std::ldexp(frac, 1 - f.bias);
  return std::ldexp(1.0 + frac, static_cast<int>(e) - f.bias);
}

uint32_t EncodeE8M0(float x) {
  if (std::isnan(x)) return NanCode(kE8M0);
  if (!(x > 0)) return 0;
  if (std::isinf(x)) return MaxFiniteCode(kE8M0);
  int exp2;
  const double mant = std::frexp(static_cast<double>(x), &exp2);  // x = mant * 2^exp2, mant in [0.5,1)
  int k = exp2 - 1;                                                // x = (2*mant) * 2^k
  const double sig = 2.0 * mant;                                   // in [1, 2)
  if (sig > 1.5 || (sig == 1.5 && (k & 1) != 0)) ++k;              // nearest power, ties to even
  const int code = k + kE8M0.bias;
  if (code < 0) return 0;
  if (code > 254) return 254;
  return static_cast<uint32_t>(code);
}

}  // namespace

bool IsNanCode(const MiniFloat& f, uint32_t code) {
  const uint32_t mag = code & ~SignBit(f);
  switch (f.nan) {
    case NanStyle::kNone:
      return false;
    case NanStyle::kIeee:
      return (mag >> f.man_bits) == MaxExpField(f) && (mag & ((1u << f.man_bits) - 1)) != 0;
    case NanStyle::kAllOnes:
    case NanStyle::kExponentOnly:
      return mag == NanCode(f);
  }
  return false;
}

float DecodeMiniFloat(const MiniFloat& f, uint32_t code) {
  code &= f.code_count() - 1;
  if (IsNanCode(f, code)) return std::numeric_limits<float>::quiet_NaN();
  const bool negative = (code & SignBit(f)) != 0;
  const uint32_t mag = code & ~SignBit(f);
  double v;
  if (f.has_inf && mag == InfCode(f)) {
    v = std::numeric_limits<double>::infinity();
  } else {
    v = MagnitudeValue(f, mag);
  }
  return static_cast<float>(negative ? -v : v);
}

uint32_t EncodeMiniFloat(const MiniFloat& f, float x, Overflow overflow) {
  if (f.nan == NanStyle::kExponentOnly) return EncodeE8M0(x);
  if (std::isnan(x)) return f.nan == NanStyle::kNone ? 0 : NanCode(f) | SignBit(f) * std::signbit(x);
  const uint32_t sign = std::signbit(x) ? SignBit(f) : 0;
  if (std::signbit(x) && !f.has_sign) return 0;
  const uint32_t max_code = MaxFiniteCode(f);
  const double max_value = MagnitudeValue(f, max_code);
  auto overflowed = [&]() -> uint32_t {
    if (overflow == Overflow::kSaturate) return sign | max_code;
    if (f.has_inf) return sign | InfCode(f);
    if (f.nan != NanStyle::kNone) return sign | NanCode(f);
    return sign | max_code;
  };
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return overflowed();
  if (a == 0) return sign;

  // Quantum of the binade holding `a` (the subnormal binade for tiny values).
  const int min_exp = 1 - f.bias;
  int e = std::ilogb(a);
  if (e < min_exp) e = min_exp;
  const double quantum = std::ldexp(1.0, e - f.man_bits);
  const double q = std::nearbyint(a / quantum);  // default rounding mode: ties to even
  const double v = q * quantum;
  if (v > max_value) return overflowed();
  if (v == 0) return sign;
  if (v < std::ldexp(1.0, min_exp)) return sign | static_cast<uint32_t>(q);  // subnormal
  const int ev = std::ilogb(v);
  const uint32_t exp_field = static_cast<uint32_t>(ev + f.bias);
  const uint32_t man = static_cast<uint32_t>(std::ldexp(v, f.man_bits - ev)) - (1u << f.man_bits);
  return sign | (exp_field << f.man_bits) | man;
}

double MaxFinite(const MiniFloat& f) { return MagnitudeValue(f, MaxFiniteCode(f)); }

double MinNormal(const MiniFloat& f) {
  return f.has_subnormals ? std::ldexp(1.0, 1 - f.bias) : std::ldexp(1.0, -f.bias);
}

double MinSubnormal(const MiniFloat& f) {
  return f.has_subnormals ? std::ldexp(1.0, 1 - f.bias - f.man_bits) : MinNormal(f);
}

int MaxExponent(const MiniFloat& f) { return std::ilogb(MaxFinite(f)); }

uint16_t Fp32ToFp16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;      // NaN (quiet, sign kept)
  if (a >= 0x477FF000u) return sign | 0x7C00u;     // >= 65520 rounds to inf (inf included)
  if (a < 0x38800000u) {                            // below 2^-14: fp16 subnormal grid 2^-24
    // |x| * 2^24 is exact in float; lrintf rounds ties to even. 1024 carries into 0x0400.
    return sign | static_cast<uint16_t>(std::lrintf(std::bit_cast<float>(a) * 16777216.0f));
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7FFFFFu) >> 13);
  const uint32_t rest = a & 0x1FFFu;  // the 13 dropped mantissa bits
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
  return sign | static_cast<uint16_t>(h);
}

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(static_cast<float>(m) * 0x1p-24f));
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t Fp32ToBf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float Bf16ToFp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace lowbit
