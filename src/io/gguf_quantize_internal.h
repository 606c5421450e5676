// Internal to the ggml block encoders (gguf_quantize.cc, gguf_quantize_search.cc,
// gguf_kquant_grid.cc): ggml's scalar helpers and the scale searches the types share. Not a
// public API. Everything follows llama.cpp's ggml-quants.c routine by routine (named in each
// comment); the float expressions keep ggml's operand order and types, since a reordered sum or a
// product taken in another order changes the last bit and with it a rounding decision. Same
// build constraint as gguf_quantize.h: no floating-point contraction, no -ffast-math.
#pragma once

#include <array>
#include <bit>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "formats/minifloat.h"

namespace lowbit::gguf_quant {

constexpr int kQK = 256;                // QK_K: elements of a K-quant / IQ4_XS / ternary super-block
constexpr float kGroupMaxEps = 1e-15f;  // GROUP_MAX_EPS: a group with a smaller amax counts as all zero

// kvalues_iq4nl: the IQ4_NL levels (formats/element.h kIq4nlLevels) as the integers ggml searches.
inline constexpr std::array<int8_t, 16> kIq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};

// ---- ggml's scalar helpers.

// nearest_int: adding 1.5 * 2^23 leaves round-half-even(v) in the low mantissa bits. Meaningful
// for |v| < 2^22 (ggml asserts that in debug builds); kept bit for bit outside it as well.
inline int NearestInt(float v) {
  const float biased = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(biased) & 0x7FFFFFu) - 0x400000;
}

// A C cast of a float to a small integer type as ggml's x86-64 build performs it: truncation to
// int32 (cvttss2si, which gives INT32_MIN for NaN and out-of-range values), then the low bits.
inline int TruncToInt(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT_MIN;
  return static_cast<int>(v);
}
inline int8_t TruncToInt8(float v) { return static_cast<int8_t>(TruncToInt(v)); }
inline uint8_t TruncToUint8(float v) { return static_cast<uint8_t>(TruncToInt(v)); }

// GGML_FP32_TO_FP16 (round to nearest even) into a little-endian half; returns the stored value
// as GGML_FP16_TO_FP32 reads it back.
inline float PutHalf(uint8_t* p, float v) {
  const uint16_t h = Fp32ToFp16(v);
  std::memcpy(p, &h, 2);
  return Fp16ToFp32(h);
}
inline void PutHalfBits(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }
inline void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// The element with the largest |x| (the first of equals), signed: the max of ggml's searches.
inline float SignedAbsMax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// best_index_int8 over kvalues_iq4nl: the largest index whose midpoint with its lower neighbour
// x reaches (2x against the exact integer sum, so a tie goes to the upper index).
inline int BestIndexIq4nl(float x) {
  const float x2 = x + x;
  int index = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = index + step;
    if (x2 >= static_cast<float>(kIq4nl[j - 1] + kIq4nl[j])) index = j;
  }
  return index;
}

// Nibble order of the 4-bit fields: element j in the low nibble of qs[j], element j + 16 in the
// high nibble. The codes are ORed unmasked (below 16 unless the input held NaN or inf).
inline void PackNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | L[j + 16] << 4);
}

// ---- Scale searches shared by the types (gguf_quantize_search.cc).

// make_qx_quants with rmse_type 1: symmetric codes L = l + nmax, l in [-nmax, nmax - 1], weights
// qw (x^2 without), the scale chosen among 19 candidate grids by weighted least squares.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, const float* qw);

// make_q3_quants with do_rmse: as MakeQxQuants' first grid (weights x^2), then up to 5 rounds of
// coordinate descent re-choosing one code at a time. Codes come back as l + nmax.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L);

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
// make_qkx2_quants (n <= 32): Q2_K / Q4_K / Q5_K without an importance matrix.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min, AffineSearch s);
// make_qkx3_quants (n <= 32, weights given): the weighted Q2_K / Q4_K / Q5_K / Q4_1 / Q5_1 paths.
float MakeQkx3Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min, AffineSearch s);

// make_qp_quants: non-negative values (sub-block scales or mins) onto 0..nmax with weights qw.
// Codes are bytes as in ggml, so a negative level (a negative input) wraps.
float MakeQpQuants(int n, int nmax, const float* x, uint8_t* L, const float* qw);

// The per-32 part of quantize_row_iq4_nl_impl (16 levels, ntry = 7): the block scale of xb under
// weights `weight`, 0 for a block with amax < GROUP_MAX_EPS. (The indices of the search are
// not returned: every caller re-picks them from the final scale.)
float Iq4BlockScale(const float* xb, const float* weight);

// ---- The K-quant / IQ4_XS super-block encoders (gguf_kquant_grid.cc), run as the three phases
// of gguf_kquant_grid.h. qw: nullptr (the _ref path; IQ4_XS: its unweighted search) or 256
// importance weights (the _impl path).
void QuantizeKQuantSuperBlock(uint32_t ggml_type, const float* x, const float* qw, uint8_t* y);

}  // namespace lowbit::gguf_quant
