#include "io/gguf_quantize.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/minifloat.h"
#include "io/gguf.h"

// Everything below follows llama.cpp's ggml-quants.c routine by routine (named in each comment);
// the float expressions keep ggml's operand order and types, since a reordered sum or a product
// taken in another order changes the last bit and with it a rounding decision.

namespace lowbit {
namespace {

constexpr int kQK = 256;                // QK_K: elements of a K-quant / IQ4_XS / ternary super-block
constexpr float kGroupMaxEps = 1e-15f;  // GROUP_MAX_EPS: a group with a smaller amax counts as all zero

// kvalues_iq4nl: the IQ4_NL levels (formats/element.h kIq4nlLevels) as the integers ggml searches.
constexpr std::array<int8_t, 16> kIq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                           1,    13,   25,  38,  53,  69,  89,  113};
// kvalues_mxfp4: the E2M1 values doubled; ggml pairs them with half the E8M0 scale.
constexpr std::array<int8_t, 16> kMxfp4Doubled = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ---- ggml's scalar helpers.

// nearest_int: adding 1.5 * 2^23 leaves round-half-even(v) in the low mantissa bits. Meaningful
// for |v| < 2^22 (ggml asserts that in debug builds); kept bit for bit outside it as well.
int NearestInt(float v) {
  const float biased = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(biased) & 0x7FFFFFu) - 0x400000;
}

// A C cast of a float to a small integer type as ggml's x86-64 build performs it: truncation to
// int32 (cvttss2si, which gives INT32_MIN for NaN and out-of-range values), then the low bits.
int TruncToInt(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT_MIN;
  return static_cast<int>(v);
}
int8_t TruncToInt8(float v) { return static_cast<int8_t>(TruncToInt(v)); }
uint8_t TruncToUint8(float v) { return static_cast<uint8_t>(TruncToInt(v)); }

// GGML_FP32_TO_FP16 (round to nearest even) into a little-endian half; returns the stored value
// as GGML_FP16_TO_FP32 reads it back.
float PutHalf(uint8_t* p, float v) {
  const uint16_t h = Fp32ToFp16(v);
  std::memcpy(p, &h, 2);
  return Fp16ToFp32(h);
}
float GetHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}
void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// best_index_int8 over kvalues_iq4nl: the largest index whose midpoint with its lower neighbour
// x reaches (2x against the exact integer sum, so a tie goes to the upper index).
int BestIndexIq4nl(float x) {
  const float x2 = x + x;
  int index = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = index + step;
    if (x2 >= static_cast<float>(kIq4nl[j - 1] + kIq4nl[j])) index = j;
  }
  return index;
}

// ---- Scale searches shared by the types.

// make_qx_quants with rmse_type 1: symmetric codes L = l + nmax, l in [-nmax, nmax - 1], weights
// qw (x^2 without), the scale chosen among 19 candidate grids by weighted least squares.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill_n(L, n, int8_t{0});
    return 0.0f;
  }
  const auto weight = [&](int i) { return qw ? qw[i] : x[i] * x[i]; };
  const auto level = [&](float iscale, int i) { return std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = weight(i);
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants with do_rmse: as MakeQxQuants' first grid (weights x^2), then up to 5 rounds of
// coordinate descent re-choosing one code at a time. Codes come back as l + nmax.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill_n(L, n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = L[i];
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int new_l = std::clamp(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The affine grid search of make_qkx2_quants / make_qkx3_quants: codes L in [0, nmax] with
// x ~ scale * L - the_min (the_min >= 0), candidate grids iscale = (rmin + rdelta * is + nmax) /
// (max - min) for is = 0..nstep, each refit by weighted least squares and kept when its weighted
// error (absolute with use_mad, else squared) is strictly lower. Later grids start from the best
// min so far, as in ggml.
struct AffineSearch {
  float rmin, rdelta;
  int nstep;
  bool use_mad;
};

template <bool kQkx3>
float MakeAffineQuants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min,
                       const AffineSearch& s) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (kQkx3 ? max <= min : max == min) {
    std::fill_n(L, n, uint8_t{0});
    the_min = -min;
    return 0.0f;
  }
  const auto error_of = [&](float diff) { return s.use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    best_error += w[i] * error_of(scale * static_cast<float>(L[i]) + min - x[i]);
  }
  uint8_t Laux[32];
  for (int is = 0; is <= s.nstep; ++is) {
    iscale = (s.rmin + s.rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l;
      if constexpr (kQkx3) {
        // min may sit at or near max by now, so v can be huge, inf or NaN: clamp before rounding.
        const float v = iscale * (x[i] - min);
        l = v > 0 ? NearestInt(v < static_cast<float>(nmax) ? v : static_cast<float>(nmax)) : 0;
      } else {
        l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      }
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) error += w[i] * error_of(this_scale * static_cast<float>(Laux[i]) + this_min - x[i]);
      if (error < best_error) {
        std::copy_n(Laux, n, L);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  the_min = -min;
  return scale;
}

// make_qkx2_quants (n <= 32): Q2_K / Q4_K / Q5_K without an importance matrix.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min, AffineSearch s) {
  return MakeAffineQuants<false>(n, nmax, x, w, L, the_min, s);
}
// make_qkx3_quants (n <= 32, weights given): the weighted Q2_K / Q4_K / Q5_K / Q4_1 / Q5_1 paths.
float MakeQkx3Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min, AffineSearch s) {
  return MakeAffineQuants<true>(n, nmax, x, w, L, the_min, s);
}

// make_qp_quants: non-negative values (sub-block scales or mins) onto 0..nmax with weights qw.
// Codes are bytes as in ggml, so a negative level (a negative input) wraps.
float MakeQpQuants(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (max < kGroupMaxEps) {
    std::fill_n(L, n, uint8_t{0});
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(NearestInt(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, NearestInt(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, NearestInt(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    sumlx += qw[i] * x[i] * static_cast<float>(l);
    suml2 += qw[i] * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i], li = L[i];
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, NearestInt(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ---- 32-element types (formats.md 2.8). Nibble order: element j in the low nibble of qs[j],
// element j + 16 in the high nibble; the 5-bit types keep bit 4 of element j in bit j of a u32.

// The 4-bit types OR the codes unmasked (they are below 16 unless the input held NaN or inf),
// the 5-bit types mask their low 4 bits.
void PackNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | L[j + 16] << 4);
}
void PackLowNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((L[j] & 0xF) | (L[j + 16] & 0xF) << 4);
}
uint32_t FifthBits(const uint8_t* L) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= ((L[j] & 0x10u) >> 4) << j;
  return qh;
}

// Element with the largest |x| (the first of equals), signed.
float SignedAbsMax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// quantize_row_q4_0_ref: d = max / -8, q = min(15, (int8)(x / d + 8.5)).
void Q4_0Block(const float* x, uint8_t* y) {
  const float d = SignedAbsMax(x, 32) / -8;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutHalf(y, d);
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(std::min<int>(15, TruncToInt8(x[j] * id + 8.5f)));
  PackNibbles(L, y + 2);
}

// quantize_row_q5_0_ref: d = max / -16, q = min(31, (int8)(x / d + 16.5)).
void Q5_0Block(const float* x, uint8_t* y) {
  const float d = SignedAbsMax(x, 32) / -16;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutHalf(y, d);
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(std::min<int>(31, TruncToInt8(x[j] * id + 16.5f)));
  PutU32(y + 2, FifthBits(L));
  PackLowNibbles(L, y + 6);
}

// quantize_row_q4_1_ref / q5_1_ref: d = (max - min) / nmax, m = min, q = (x - min) / d + 0.5
// truncated (Q4_1 through int8 and capped at 15, Q5_1 straight to a byte).
template <int kBits>
void Q41Or51Block(const float* x, uint8_t* y) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / ((1 << kBits) - 1);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutHalf(y, d);
  PutHalf(y + 2, min);
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) {
    const float v = (x[j] - min) * id + 0.5f;
    L[j] = kBits == 4 ? static_cast<uint8_t>(std::min<int>(15, TruncToInt8(v))) : TruncToUint8(v);
  }
  if constexpr (kBits == 4) {
    PackNibbles(L, y + 4);
  } else {
    PutU32(y + 4, FifthBits(L));
    PackLowNibbles(L, y + 8);
  }
}

// quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (half away from zero).
void Q8_0Block(const float* x, uint8_t* y) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutHalf(y, d);
  for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(TruncToInt(std::round(x[j] * id)));
}

// quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block), each element
// the nearest doubled-E2M1 level times 2^(e - 128), the first of equally near levels.
void Mxfp4Block(const float* x, uint8_t* y) {
  float amax = 0;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  const uint8_t e = amax > 0.0f ? TruncToUint8(std::floor(std::log2(amax)) - 2 + 127) : 0;
  const float d = std::ldexp(1.0f, e - 128);  // GGML_E8M0_TO_FP32_HALF, exact (2^-128 is subnormal)
  y[0] = e;
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kMxfp4Doubled[0]) * d - x[j]);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(static_cast<float>(kMxfp4Doubled[i]) * d - x[j]);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    L[j] = static_cast<uint8_t>(best);
  }
  PackNibbles(L, y + 1);
}

// Weighted 32-element paths (quantize_row_q4_0_impl, q4_1, q5_0, q5_1): per-element weights
// qw * sqrt(sigma2 + x^2) with sigma2 the mean square of the whole row.
float RowSigma2(const float* x, int64_t n) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / static_cast<float>(n);
}

template <int kBits, bool kAffine>
void Weighted32Row(const float* x, int64_t n, const float* qw, uint8_t* y) {
  constexpr int kBlockBytes = (kAffine ? 4 : 2) + (kBits == 5 ? 4 : 0) + 16;
  const float sigma2 = RowSigma2(x, n);
  for (int64_t ib = 0; ib < n / 32; ++ib, x += 32, qw += 32, y += kBlockBytes) {
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
    uint8_t L[32];
    if constexpr (kAffine) {
      float min = 0;
      const float d = MakeQkx3Quants(32, (1 << kBits) - 1, x, weight, L, min, {-0.9f, 0.05f, 36, false});
      PutHalf(y, d);
      PutHalf(y + 2, -min);
    } else {
      int8_t Ls[32];
      PutHalf(y, MakeQxQuants(32, 1 << (kBits - 1), x, Ls, weight));
      for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(Ls[j]);
    }
    uint8_t* q = y + (kAffine ? 4 : 2);
    if constexpr (kBits == 5) {
      PutU32(q, FifthBits(L));
      PackLowNibbles(L, q + 4);
    } else {
      PackNibbles(L, q);
    }
  }
}

// ---- K-quants (256-element super-blocks).

// Q2_K's and Q3_K's 2-bit field: element e in bits 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32].
template <class T>
void Pack2Bits(const T* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q2_K: the last step of quantize_row_q2_K_ref and _impl. Sub-blocks whose stored scale is 0 keep
// the codes of the search.
void FinishQ2_K(const float* x, uint8_t* y, uint8_t* L) {
  const float dall = GetHalf(y + 80), mall = GetHalf(y + 82);
  for (int j = 0; j < 16; ++j) {
    const float d = dall * static_cast<float>(y[j] & 0xF);
    if (d == 0) continue;
    const float m = mall * static_cast<float>(y[j] >> 4);
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<uint8_t>(std::clamp(NearestInt((x[16 * j + i] + m) / d), 0, 3));
  }
  Pack2Bits(L, y + 16);
}

// quantize_row_q2_K_ref.
void Q2_KBlock(const float* x, uint8_t* y) {
  uint8_t L[kQK];
  float mins[16], scales[16], weights[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, mins[j], {-0.5f, 0.1f, 15, true});
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float q4scale = 15.0f;
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) y[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
    PutHalf(y + 80, max_scale / q4scale);
  } else {
    std::fill_n(y, 16, uint8_t{0});
    PutHalf(y + 80, 0.0f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) y[j] = static_cast<uint8_t>(y[j] | NearestInt(iscale * mins[j]) << 4);
    PutHalf(y + 82, max_min / q4scale);
  } else {
    PutHalf(y + 82, 0.0f);
  }
  FinishQ2_K(x, y, L);
}

// quantize_row_q2_K_impl.
void Q2_KRow(const float* x, int64_t n, const float* qw, uint8_t* y) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK, y += 84) {
    float sumx2 = 0;
    for (int j = 0; j < kQK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / kQK;
    uint8_t L[kQK];
    float mins[16], scales[16], sw[16] = {}, weight[16];
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      for (int l = 0; l < 16; ++l) sw[j] += weight[l];
      scales[j] = MakeQkx3Quants(16, 3, x + 16 * j, weight, L + 16 * j, mins[j], {-0.9f, 0.05f, 36, false});
    }
    uint8_t Ls[16], Lm[16];
    const float dm = MakeQpQuants(16, 15, scales, Ls, sw);
    const float mm = MakeQpQuants(16, 15, mins, Lm, sw);
    PutHalf(y + 80, dm);
    PutHalf(y + 82, mm);
    for (int j = 0; j < 16; ++j) y[j] = static_cast<uint8_t>(Ls[j] | Lm[j] << 4);
    FinishQ2_K(x, y, L);
  }
}

// Q3_K's 16 six-bit scales (stored l + 32): low nibbles in s[0..7], high 2 bits in s[8..11].
void PutQ3Scale(int j, int l, uint8_t* s) {
  if (j < 8) s[j] = static_cast<uint8_t>(l & 0xF);
  else s[j - 8] = static_cast<uint8_t>(s[j - 8] | (l & 0xF) << 4);
  s[j % 4 + 8] = static_cast<uint8_t>(s[j % 4 + 8] | (l >> 4) << (2 * (j / 4)));
}
int GetQ3Scale(int j, const uint8_t* s) {
  const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  return (low | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

// Q3_K's last step (quantize_row_q3_K_ref and _impl): requantize with the stored scales, then
// the high bit of each 3-bit code into hmask[e % 32] bit e / 32, the low 2 bits into qs.
void FinishQ3_K(const float* x, uint8_t* y, int8_t* L) {
  const float dall = GetHalf(y + 108);
  for (int j = 0; j < 16; ++j) {
    const float d = dall * static_cast<float>(GetQ3Scale(j, y + 96));
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(std::clamp(NearestInt(x[16 * j + i] / d), -4, 3) + 4);
  }
  uint8_t* hmask = y;
  std::fill_n(hmask, 32, uint8_t{0});
  for (int e = 0; e < kQK; ++e) {
    if (L[e] > 3) {
      hmask[e % 32] = static_cast<uint8_t>(hmask[e % 32] | 1 << (e / 32));
      L[e] = static_cast<int8_t>(L[e] - 4);
    }
  }
  Pack2Bits(L, y + 32);
}

// quantize_row_q3_K_ref.
void Q3_KBlock(const float* x, uint8_t* y) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  uint8_t* s = y + 96;
  std::fill_n(s, 12, uint8_t{0});
  if (max_scale != 0) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const int8_t l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
      PutQ3Scale(j, std::clamp<int>(l, -32, 31) + 32, s);
    }
    PutHalf(y + 108, 1 / iscale);
  } else {
    PutHalf(y + 108, 0.0f);
  }
  FinishQ3_K(x, y, L);
}

// quantize_row_q3_K_impl.
void Q3_KRow(const float* x, int64_t n, const float* qw, uint8_t* y) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK, y += 110) {
    float sumx2 = 0;
    for (int j = 0; j < kQK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / kQK;
    int8_t L[kQK];
    float scales[16], weight[16], sw[16];
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = MakeQxQuants(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    uint8_t* s = y + 96;
    std::fill_n(s, 12, uint8_t{0});
    int8_t Ls[16];
    const float d_block = MakeQxQuants(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; ++j) PutQ3Scale(j, Ls[j], s);
    PutHalf(y + 108, d_block);
    FinishQ3_K(x, y, L);
  }
}

// get_scale_min_k4's writer and reader: 8 six-bit (scale, min) pairs in 12 bytes.
void PutScaleMinK4(int j, uint8_t ls, uint8_t lm, uint8_t* s) {
  if (j < 4) {
    s[j] = ls;
    s[j + 4] = lm;
  } else {
    s[j + 4] = static_cast<uint8_t>((ls & 0xF) | (lm & 0xF) << 4);
    s[j - 4] = static_cast<uint8_t>(s[j - 4] | (ls >> 4) << 6);
    s[j] = static_cast<uint8_t>(s[j] | (lm >> 4) << 6);
  }
}
void GetScaleMinK4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

// Q4_K / Q5_K's last step: requantize with the stored scales and mins, then pack: low 4 bits of
// element e in qs[32 * (e / 64) + e % 32] (low nibble when e % 64 < 32), Q5_K's fifth bit in bit
// e / 32 of qh[e % 32].
template <int kBits>
void FinishQ45_K(const float* x, uint8_t* y, uint8_t* L) {
  constexpr int kMax = (1 << kBits) - 1;
  const float dall = GetHalf(y), mall = GetHalf(y + 2);
  for (int j = 0; j < 8; ++j) {
    int sc = 0, m = 0;
    GetScaleMinK4(j, y + 4, sc, m);
    const float d = dall * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = mall * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + i] + dm) / d), 0, kMax));
  }
  uint8_t* qs = y + (kBits == 5 ? 48 : 16);
  if constexpr (kBits == 5) {
    uint8_t* qh = y + 16;
    std::fill_n(qh, 32, uint8_t{0});
    for (int e = 0; e < kQK; ++e) {
      if (L[e] > 15) {
        qh[e % 32] = static_cast<uint8_t>(qh[e % 32] | 1 << (e / 32));
        L[e] = static_cast<uint8_t>(L[e] - 16);
      }
    }
  }
  for (int j = 0; j < kQK; j += 64)
    for (int l = 0; l < 32; ++l) qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
}

// quantize_row_q4_K_ref / q5_K_ref: per 32, weights sqrt(mean x^2) + |x|; 6-bit scales and mins
// relative to their maxima over 63.
template <int kBits>
void Q45_KBlock(const float* x, uint8_t* y) {
  constexpr AffineSearch kSearch = kBits == 4 ? AffineSearch{-1.0f, 0.1f, 20, false} : AffineSearch{-0.5f, 0.1f, 15, false};
  uint8_t L[kQK];
  float mins[8], scales[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xb = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xb[l] * xb[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xb[l]);
    scales[j] = MakeQkx2Quants(32, (1 << kBits) - 1, xb, weights, L + 32 * j, mins[j], kSearch);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    PutScaleMinK4(j, ls, lm, y + 4);
  }
  PutHalf(y, max_scale / 63.0f);
  PutHalf(y + 2, max_min / 63.0f);
  FinishQ45_K<kBits>(x, y, L);
}

// quantize_row_q4_K_impl / q5_K_impl: weights qw * sqrt(sigma2 + x^2), make_qkx3_quants per 32,
// then the scales and mins themselves by make_qp_quants weighted by each sub-block's weight sum.
template <int kBits>
void Q45_KRow(const float* x, int64_t n, const float* qw, uint8_t* y) {
  constexpr int kBlockBytes = kBits == 4 ? 144 : 176;
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK, y += kBlockBytes) {
    float sum_x2 = 0;
    for (int l = 0; l < kQK; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / kQK;
    uint8_t L[kQK];
    float weights[32], sw[8], mins[8], scales[8];
    for (int j = 0; j < 8; ++j) {
      const float* xb = x + 32 * j;
      for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + xb[l] * xb[l]);
      float sumw = 0;
      for (int l = 0; l < 32; ++l) sumw += weights[l];
      sw[j] = sumw;
      scales[j] = MakeQkx3Quants(32, (1 << kBits) - 1, xb, weights, L + 32 * j, mins[j], {-0.9f, 0.05f, 36, false});
    }
    uint8_t Ls[8], Lm[8];
    const float d_block = MakeQpQuants(8, 63, scales, Ls, sw);
    const float m_block = MakeQpQuants(8, 63, mins, Lm, sw);
    std::fill_n(y + 4, 12, uint8_t{0});
    for (int j = 0; j < 8; ++j) {
      // Only the Q5_K routine caps the codes at 63 (they exceed it only when make_qp_quants
      // wrapped a negative level).
      const uint8_t ls = kBits == 5 ? std::min<uint8_t>(63, Ls[j]) : Ls[j];
      const uint8_t lm = kBits == 5 ? std::min<uint8_t>(63, Lm[j]) : Lm[j];
      PutScaleMinK4(j, ls, lm, y + 4);
    }
    PutHalf(y, d_block);
    PutHalf(y + 2, m_block);
    FinishQ45_K<kBits>(x, y, L);
  }
}

// Q6_K's common part (quantize_row_q6_K_ref and _impl): per 16 make_qx_quants(nmax 32) with
// weights qw (x^2 without); 8-bit signed scales relative to the largest; all-zero blocks are all
// zero bytes.
void Q6_KFromWeights(const float* x, const float* qw, uint8_t* y) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : nullptr);
    const float abs_scale = std::fabs(scales[ib]);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::fill_n(y, 210, uint8_t{0});
    return;
  }
  const float iscale = -128.0f / max_scale;
  const float dall = PutHalf(y + 208, 1 / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = dall * static_cast<float>(sc[j]);
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(std::clamp(NearestInt(x[16 * j + i] / d), -32, 31) + 32);
  }
  // Element e = 128h + 32g + l: low 4 bits in ql[64h + 32(g & 1) + l] (high nibble for g >= 2),
  // high 2 bits in bits 2g of qh[32h + l].
  uint8_t *ql = y, *qh = y + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 0xF) | (q3 & 0xF) << 4);
      ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | (q4 & 0xF) << 4);
      qh[l] = static_cast<uint8_t>((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
    }
  }
}
void Q6_KBlock(const float* x, uint8_t* y) { Q6_KFromWeights(x, nullptr, y); }
void Q6_KRow(const float* x, int64_t n, const float* qw, uint8_t* y) {
  for (int64_t i = 0; i < n / kQK; ++i) Q6_KFromWeights(x + i * kQK, qw + i * kQK, y + i * 210);
}

// ---- IQ4_NL / IQ4_XS: quantize_row_iq4_nl_impl with 16 levels and ntry = 7 (what
// quantize_iq4_nl / quantize_iq4_xs run, with or without quant_weights). A super-block of
// `super` elements (32: IQ4_NL, 256: IQ4_XS) in blocks of 32; weights qw * sqrt(sigma2 + x^2)
// (x^2 without), sigma2 = 2 * mean x^2 over the super-block.
template <int kSuper>
void Iq4Block(const float* x, const float* qw, uint8_t* y) {
  constexpr int kBlocks = kSuper / 32, kTries = 7;
  float sigma2 = 0;
  for (int j = 0; j < kSuper; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.0f / kSuper;

  uint8_t L[kSuper];
  float scales[kBlocks], weight[32];
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < kBlocks; ++ib) {
    const float* xb = x + 32 * ib;
    uint8_t* Lb = L + 32 * ib;
    for (int j = 0; j < 32; ++j) weight[j] = qw ? qw[32 * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      std::fill_n(Lb, 32, uint8_t{0});
      continue;
    }
    float d = -max / kIq4nl[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = BestIndexIq4nl(id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = kIq4nl[l];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kTries; itry <= kTries; ++itry) {
      id = static_cast<float>(itry + kIq4nl[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = kIq4nl[BestIndexIq4nl(id * xb[j])];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }

  uint8_t* qs;
  if constexpr (kBlocks > 1) {
    // IQ4_XS: d = -max_scale / 32 (-0 when every block is zero), 6-bit block scales l + 32 with
    // low nibbles in scales_l (two per byte) and high 2 bits in the u16 scales_h.
    const float d = -max_scale / 32;
    PutHalf(y, d);
    const float id = d != 0 ? 1 / d : 0.0f;
    uint16_t scales_h = 0;
    uint8_t* scales_l = y + 4;
    for (int ib = 0; ib < kBlocks; ++ib) {
      int l = std::clamp(NearestInt(id * scales[ib]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.0f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(BestIndexIq4nl(idl * x[32 * ib + j]));
      l += 32;
      if (ib % 2 == 0) scales_l[ib / 2] = static_cast<uint8_t>(l & 0xF);
      else scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | (l & 0xF) << 4);
      scales_h = static_cast<uint16_t>(scales_h | (l >> 4) << (2 * ib));
    }
    std::memcpy(y + 2, &scales_h, 2);
    qs = y + 8;
  } else {
    // IQ4_NL: the fp32 block scale, indices re-picked with its inverse.
    PutHalf(y, scales[0]);
    const float id = scales[0] != 0 ? 1 / scales[0] : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(BestIndexIq4nl(id * x[j]));
    qs = y + 2;
  }
  for (int ib = 0; ib < kBlocks; ++ib) PackNibbles(L + 32 * ib, qs + 16 * ib);
}

template <int kSuper>
void Iq4Unweighted(const float* x, uint8_t* y) {
  Iq4Block<kSuper>(x, nullptr, y);
}
template <int kSuper, int kBytes>
void Iq4Row(const float* x, int64_t n, const float* qw, uint8_t* y) {
  for (int64_t i = 0; i < n / kSuper; ++i) Iq4Block<kSuper>(x + i * kSuper, qw + i * kSuper, y + i * kBytes);
}

// ---- Ternary: trits t = lroundf(x / amax) + 1 in {0, 1, 2} meaning -1, 0, +1; d = amax.

float TernaryScale(const float* x, uint8_t* d_at) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  PutHalf(d_at, amax);
  return amax != 0 ? 1.0f / amax : 0.0f;
}
int Trit(float x, float id) { return static_cast<int>(std::lround(x * id)) + 1; }

// quantize_row_tq1_0_ref: five trits per byte (the first most significant) stored as
// ceil(256 * N / 243); qs[0..31] take elements m + 32n (0..159), qs[32..47] elements 160 + m + 16n,
// qh[0..3] four trits each (elements 240 + j + 4m) with a zero fifth trit.
void Tq1_0Block(const float* x, uint8_t* y) {
  const float id = TernaryScale(x, y + 52);
  const auto pack = [](uint8_t n) { return static_cast<uint8_t>((static_cast<uint16_t>(n) * 256 + 242) / 243); };
  for (int m = 0; m < 32; ++m) {
    uint8_t q = 0;
    for (int n = 0; n < 5; ++n) q = static_cast<uint8_t>(q * 3 + Trit(x[m + 32 * n], id));
    y[m] = pack(q);
  }
  for (int m = 0; m < 16; ++m) {
    uint8_t q = 0;
    for (int n = 0; n < 5; ++n) q = static_cast<uint8_t>(q * 3 + Trit(x[160 + m + 16 * n], id));
    y[32 + m] = pack(q);
  }
  for (int j = 0; j < 4; ++j) {
    uint8_t q = 0;
    for (int m = 0; m < 4; ++m) q = static_cast<uint8_t>(q * 3 + Trit(x[240 + j + 4 * m], id));
    y[48 + j] = pack(static_cast<uint8_t>(q * 3));
  }
}

// quantize_row_tq2_0_ref: element e in bits 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32].
void Tq2_0Block(const float* x, uint8_t* y) {
  const float id = TernaryScale(x, y + 64);
  for (int j = 0; j < 64; j += 32) {
    for (int m = 0; m < 32; ++m) {
      uint8_t q = 0;
      for (int n = 0; n < 4; ++n) q = static_cast<uint8_t>(q + ((Trit(x[4 * j + m + 32 * n], id) & 3) << (2 * n)));
      y[j + m] = q;
    }
  }
}

// ---- Dispatch.

struct Encoder {
  uint32_t type;
  void (*block)(const float* x, uint8_t* y);  // one block, no importance
  // One row of n elements with per-column importance qw; nullptr when the type ignores it.
  void (*row)(const float* x, int64_t n, const float* qw, uint8_t* y);
};

constexpr Encoder kEncoders[] = {
    {kGgmlQ4_0, Q4_0Block, Weighted32Row<4, false>},
    {kGgmlQ4_1, Q41Or51Block<4>, Weighted32Row<4, true>},
    {kGgmlQ5_0, Q5_0Block, Weighted32Row<5, false>},
    {kGgmlQ5_1, Q41Or51Block<5>, Weighted32Row<5, true>},
    {kGgmlQ8_0, Q8_0Block, nullptr},
    {kGgmlQ2_K, Q2_KBlock, Q2_KRow},
    {kGgmlQ3_K, Q3_KBlock, Q3_KRow},
    {kGgmlQ4_K, Q45_KBlock<4>, Q45_KRow<4>},
    {kGgmlQ5_K, Q45_KBlock<5>, Q45_KRow<5>},
    {kGgmlQ6_K, Q6_KBlock, Q6_KRow},
    {kGgmlIQ4_NL, Iq4Unweighted<32>, Iq4Row<32, 18>},
    {kGgmlIQ4_XS, Iq4Unweighted<256>, Iq4Row<256, 136>},
    {kGgmlMXFP4, Mxfp4Block, nullptr},
    {kGgmlTQ1_0, Tq1_0Block, nullptr},
    {kGgmlTQ2_0, Tq2_0Block, nullptr},
};

const Encoder* FindEncoder(uint32_t type) {
  for (const Encoder& e : kEncoders)
    if (e.type == type) return &e;
  return nullptr;
}

}  // namespace

bool CanQuantizeGguf(uint32_t ggml_type) {
  return ggml_type == kGgmlF32 || ggml_type == kGgmlF16 || ggml_type == kGgmlBF16 || FindEncoder(ggml_type);
}

void QuantizeGgufRow(uint32_t ggml_type, const float* src, int64_t n, std::span<const float> importance,
                     std::byte* dst) {
  const GgmlTypeInfo* info = FindGgmlType(ggml_type);
  if (!info || !CanQuantizeGguf(ggml_type)) Fail("quantizing to ggml type {} is not supported", GgmlTypeName(ggml_type));
  if (n < 0 || n % info->block_elems != 0)
    Fail("{} elements is not a whole number of {} blocks of {}", n, info->name, info->block_elems);
  auto* y = reinterpret_cast<uint8_t*>(dst);
  switch (ggml_type) {
    case kGgmlF32: std::memcpy(y, src, static_cast<size_t>(n) * sizeof(float)); return;
    case kGgmlF16:
    case kGgmlBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = ggml_type == kGgmlF16 ? Fp32ToFp16(src[i]) : Fp32ToBf16(src[i]);
        std::memcpy(y + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  const Encoder& encoder = *FindEncoder(ggml_type);
  if (!importance.empty() && encoder.row) {
    const auto row_length = static_cast<int64_t>(importance.size());
    if (row_length % info->block_elems != 0 || n % row_length != 0)
      Fail("{} importance weights do not describe whole rows of {} blocks within {} elements", row_length,
           info->name, n);
    const int64_t row_bytes = row_length / info->block_elems * info->block_bytes;
    for (int64_t r = 0; r < n / row_length; ++r)
      encoder.row(src + r * row_length, row_length, importance.data(), y + r * row_bytes);
    return;
  }
  for (int64_t b = 0; b < n / info->block_elems; ++b)
    encoder.block(src + b * info->block_elems, y + b * info->block_bytes);
}

}  // namespace lowbit
