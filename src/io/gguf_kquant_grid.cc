#include "io/gguf_kquant_grid.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "formats/minifloat.h"
#include "io/gguf.h"
#include "io/gguf_quantize_internal.h"

// Phase 1 is each quantize_row_*_ref / quantize_*_impl routine of ggml-quants.c up to the point
// where it has stored the scales; phase 2 is its final requantization pass, element by element;
// phase 3 its packing. The fp16 scales are kept as bits and read back (GGML_FP16_TO_FP32) where
// ggml reads them back from the block.

namespace lowbit {

using namespace gguf_quant;

namespace {

// ---- Phase 1: the scale choices.

// quantize_row_q2_K_ref (qw == nullptr) / quantize_row_q2_K_impl: 16 x 16, codes 0..3; 4-bit
// scales and mins, stored as one byte per sub-block (scale in the low nibble).
void Q2_KScales(const float* x, const float* qw, KQuantScales& s) {
  uint8_t L[kQK], bytes[16];
  float mins[16], scales[16];
  if (!qw) {
    float weights[16];
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
      for (int j = 0; j < 16; ++j) bytes[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      s.d = Fp32ToFp16(max_scale / q4scale);
    } else {
      std::fill_n(bytes, 16, uint8_t{0});
      s.d = Fp32ToFp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j) bytes[j] = static_cast<uint8_t>(bytes[j] | NearestInt(iscale * mins[j]) << 4);
      s.dmin = Fp32ToFp16(max_min / q4scale);
    } else {
      s.dmin = Fp32ToFp16(0.0f);
    }
  } else {
    float sumx2 = 0;
    for (int j = 0; j < kQK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / kQK;
    float sw[16] = {}, weight[16];
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      for (int l = 0; l < 16; ++l) sw[j] += weight[l];
      scales[j] = MakeQkx3Quants(16, 3, x + 16 * j, weight, L + 16 * j, mins[j], {-0.9f, 0.05f, 36, false});
    }
    uint8_t Ls[16], Lm[16];
    s.d = Fp32ToFp16(MakeQpQuants(16, 15, scales, Ls, sw));
    s.dmin = Fp32ToFp16(MakeQpQuants(16, 15, mins, Lm, sw));
    for (int j = 0; j < 16; ++j) bytes[j] = static_cast<uint8_t>(Ls[j] | Lm[j] << 4);
  }
  // A byte is its two nibbles, whatever wrapped into it.
  for (int j = 0; j < 16; ++j) {
    s.sc[j] = bytes[j] & 0xF;
    s.m[j] = bytes[j] >> 4;
  }
  for (int i = 0; i < kQK; ++i) s.search_codes[i] = static_cast<int8_t>(L[i]);
}

// quantize_row_q3_K_ref / quantize_row_q3_K_impl: 16 x 16, codes -4..3, 6-bit signed scales.
void Q3_KScales(const float* x, const float* qw, KQuantScales& s) {
  int8_t L[kQK];
  float scales[16];
  if (!qw) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) s.sc[j] = std::clamp<int>(static_cast<int8_t>(NearestInt(iscale * scales[j])), -32, 31);
      s.d = Fp32ToFp16(1 / iscale);
    } else {
      // ggml leaves the scale bytes zero: stored 0, read back as 0 - 32.
      s.sc.fill(-32);
      s.d = Fp32ToFp16(0.0f);
    }
  } else {
    float sumx2 = 0;
    for (int j = 0; j < kQK; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / kQK;
    float weight[16], sw[16];
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = MakeQxQuants(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    int8_t Ls[16];  // l + 32, l in -32..31
    s.d = Fp32ToFp16(MakeQxQuants(16, 32, scales, Ls, sw));
    for (int j = 0; j < 16; ++j) s.sc[j] = Ls[j] - 32;
  }
  for (int i = 0; i < kQK; ++i) s.search_codes[i] = static_cast<int8_t>(L[i] - 4);
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

// quantize_row_q4_K_ref / q5_K_ref: per 32, weights sqrt(mean x^2) + |x|, 6-bit scales and mins
// relative to their maxima over 63. quantize_row_q4_K_impl / q5_K_impl: weights
// qw * sqrt(sigma2 + x^2), make_qkx3_quants per 32, then the scales and mins themselves by
// make_qp_quants weighted by each sub-block's weight sum.
template <int kBits>
void Q45_KScales(const float* x, const float* qw, KQuantScales& s) {
  constexpr int kMax = (1 << kBits) - 1;
  uint8_t L[kQK], ls[8], lm[8];
  float mins[8], scales[8], weights[32];
  if (!qw) {
    constexpr AffineSearch kSearch = kBits == 4 ? AffineSearch{-1.0f, 0.1f, 20, false} : AffineSearch{-0.5f, 0.1f, 15, false};
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xb = x + 32 * j;
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += xb[l] * xb[l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xb[l]);
      scales[j] = MakeQkx2Quants(32, kMax, xb, weights, L + 32 * j, mins[j], kSearch);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; ++j) {
      ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
      lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    }
    s.d = Fp32ToFp16(max_scale / 63.0f);
    s.dmin = Fp32ToFp16(max_min / 63.0f);
  } else {
    float sum_x2 = 0;
    for (int l = 0; l < kQK; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / kQK;
    float sw[8];
    for (int j = 0; j < 8; ++j) {
      const float* xb = x + 32 * j;
      for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + xb[l] * xb[l]);
      float sumw = 0;
      for (int l = 0; l < 32; ++l) sumw += weights[l];
      sw[j] = sumw;
      scales[j] = MakeQkx3Quants(32, kMax, xb, weights, L + 32 * j, mins[j], {-0.9f, 0.05f, 36, false});
    }
    s.d = Fp32ToFp16(MakeQpQuants(8, 63, scales, ls, sw));
    s.dmin = Fp32ToFp16(MakeQpQuants(8, 63, mins, lm, sw));
    // Only the Q5_K routine caps the codes at 63 (they exceed it only when make_qp_quants
    // wrapped a negative level); Q4_K writes such a byte unmasked.
    if constexpr (kBits == 5) {
      for (int j = 0; j < 8; ++j) {
        ls[j] = std::min<uint8_t>(63, ls[j]);
        lm[j] = std::min<uint8_t>(63, lm[j]);
      }
    }
  }
  // Sub-blocks 0..3 keep their bytes whole, 4..7 take what the reader gets (their high bits are
  // ORed into bytes 0..7, so a wrapped byte of sub-block j - 4 shows there): PackKQuantBlock
  // writes the same 12 bytes back and scale() / bias() read what the dequantizer reads.
  uint8_t packed[12] = {};
  for (int j = 0; j < 8; ++j) PutScaleMinK4(j, ls[j], lm[j], packed);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s.sc[j] = ls[j];
      s.m[j] = lm[j];
    } else {
      GetScaleMinK4(j, packed, s.sc[j], s.m[j]);
    }
  }
  for (int i = 0; i < kQK; ++i) s.search_codes[i] = static_cast<int8_t>(L[i]);
}

// Q6_K's scale choice (quantize_row_q6_K_ref and _impl): per 16 make_qx_quants(nmax 32) with
// weights qw (x^2 without); 8-bit signed scales relative to the largest. An all-zero block is all
// zero bytes: d = 0, scales 0, codes -32.
void Q6_KScales(const float* x, const float* qw, KQuantScales& s) {
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
    s.d = 0;
    s.sc.fill(0);
    s.search_codes.fill(-32);
    return;
  }
  const float iscale = -128.0f / max_scale;
  s.d = Fp32ToFp16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) s.sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  for (int i = 0; i < kQK; ++i) s.search_codes[i] = static_cast<int8_t>(L[i] - 32);
}

// IQ4_XS (quantize_row_iq4_nl_impl for a super-block of 256 in blocks of 32, 16 levels, ntry 7):
// weights qw * sqrt(sigma2 + x^2) (x^2 without), sigma2 = 2 * mean x^2 over the super-block;
// d = -max_scale / 32 (-0 when every block is zero), block scales l in -32..31 relative to the
// fp32 d.
void Iq4XsScales(const float* x, const float* qw, KQuantScales& s) {
  float sigma2 = 0;
  for (int j = 0; j < kQK; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.0f / kQK;
  float scales[8], weight[32];
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = x + 32 * ib;
    for (int j = 0; j < 32; ++j) weight[j] = qw ? qw[32 * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    scales[ib] = Iq4BlockScale(xb, weight);
    if (std::fabs(scales[ib]) > amax_scale) {
      amax_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  const float d = -max_scale / 32;
  s.d = Fp32ToFp16(d);
  s.d_search = d;
  const float id = d != 0 ? 1 / d : 0.0f;
  for (int ib = 0; ib < 8; ++ib) s.sc[ib] = std::clamp(NearestInt(id * scales[ib]), -32, 31);
}

// ---- Phase 3 helpers.

// Q2_K's and Q3_K's 2-bit field: element e in bits 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32].
void Pack2Bits(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q3_K's 16 six-bit scales (stored l + 32): low nibbles in s[0..7], high 2 bits in s[8..11].
void PutQ3Scale(int j, int l, uint8_t* s) {
  if (j < 8) s[j] = static_cast<uint8_t>(l & 0xF);
  else s[j - 8] = static_cast<uint8_t>(s[j - 8] | (l & 0xF) << 4);
  s[j % 4 + 8] = static_cast<uint8_t>(s[j % 4 + 8] | (l >> 4) << (2 * (j / 4)));
}

void CheckRange(const char* what, int v, int lo, int hi, int index) {
  if (v < lo || v > hi) Fail("{} {} at {} is outside {}..{}", what, v, index, lo, hi);
}

struct TypeShape {
  int sub, q_lo, q_hi;
};
TypeShape ShapeOf(uint32_t type) {
  switch (type) {
    case kGgmlQ2_K: return {16, 0, 3};
    case kGgmlQ3_K: return {16, -4, 3};
    case kGgmlQ4_K: return {32, 0, 15};
    case kGgmlQ5_K: return {32, 0, 31};
    case kGgmlQ6_K: return {16, -32, 31};
    case kGgmlIQ4_XS: return {32, 0, 15};
    default: Fail("ggml type {} has no K-quant grid", GgmlTypeName(type));
  }
}


// ---- Phase 2: ggml's final pass. CodeOnGrid is its formula for one element, given the
// sub-block's scale d = scale(j) (nonzero; ggml keeps the search's codes where it is 0) and, for
// the affine types, dm = dmin * m[j] as ggml forms it (the negated bias).
template <uint32_t kType>
int CodeOnGrid(float d, float dm, float x) {
  if constexpr (kType == kGgmlQ2_K) return std::clamp(NearestInt((x + dm) / d), 0, 3);
  else if constexpr (kType == kGgmlQ3_K) return std::clamp(NearestInt(x / d), -4, 3);
  else if constexpr (kType == kGgmlQ4_K) return std::clamp(NearestInt((x + dm) / d), 0, 15);
  else if constexpr (kType == kGgmlQ5_K) return std::clamp(NearestInt((x + dm) / d), 0, 31);
  else return std::clamp(NearestInt(x / d), -32, 31);  // Q6_K
}

float MinOffset(const KQuantScales& s, int j) {
  switch (s.type) {
    case kGgmlQ2_K: return Fp16ToFp32(s.dmin) * static_cast<float>(s.m[j]);
    case kGgmlQ4_K:
    case kGgmlQ5_K: return Fp16ToFp32(s.dmin) * static_cast<float>(s.m[j] & 63);
    default: return 0.0f;
  }
}

// IQ4_XS picks block j's indices with the inverse of d_search * l (0 for 0).
float Iq4XsInverseScale(const KQuantScales& s, int j) {
  const float dl = s.d_search * static_cast<float>(s.sc[static_cast<size_t>(j)]);
  return dl != 0 ? 1 / dl : 0.0f;
}

// KQuantCode for all 256 elements, the sub-block's scale worked out once.
template <uint32_t kType>
void BlockCodes(const KQuantScales& s, const float* x, int* q) {
  constexpr int kSub = kType == kGgmlQ2_K || kType == kGgmlQ3_K || kType == kGgmlQ6_K ? 16 : 32;
  for (int j = 0; j < kQK / kSub; ++j) {
    const int first = kSub * j;
    if constexpr (kType == kGgmlIQ4_XS) {
      const float idl = Iq4XsInverseScale(s, j);
      for (int i = first; i < first + kSub; ++i) q[i] = BestIndexIq4nl(idl * x[i]);
    } else {
      const float d = s.scale(j);
      if (d == 0) {
        for (int i = first; i < first + kSub; ++i) q[i] = s.search_codes[static_cast<size_t>(i)];
        continue;
      }
      const float dm = MinOffset(s, j);
      for (int i = first; i < first + kSub; ++i) q[i] = CodeOnGrid<kType>(d, dm, x[i]);
    }
  }
}

void CheckScaleCodes(const KQuantScales& s) {
  for (int j = 0; j < s.sub_blocks(); ++j) {
    switch (s.type) {
      case kGgmlQ2_K:
        CheckRange("scale code", s.sc[j], 0, 15, j);
        CheckRange("min code", s.m[j], 0, 15, j);
        break;
      case kGgmlQ4_K:
      case kGgmlQ5_K:  // sub-blocks 0..3 may hold a whole wrapped byte (gguf_kquant_grid.h)
        CheckRange("scale code", s.sc[j], 0, j < 4 ? 255 : 63, j);
        CheckRange("min code", s.m[j], 0, j < 4 ? 255 : 63, j);
        break;
      case kGgmlQ6_K: CheckRange("scale code", s.sc[j], -128, 127, j); break;
      default: CheckRange("scale code", s.sc[j], -32, 31, j); break;  // Q3_K, IQ4_XS
    }
  }
}

// PackKQuantBlock without the range checks (the codes and scales of phases 1 and 2 are in range).
void PackBlock(const KQuantScales& s, const int* q256, uint8_t* y) {
  const TypeShape shape = ShapeOf(s.type);
  uint8_t L[kQK];
  for (int i = 0; i < kQK; ++i) L[i] = static_cast<uint8_t>(q256[i] - shape.q_lo);
  switch (s.type) {
    case kGgmlQ2_K:
      for (int j = 0; j < 16; ++j) y[j] = static_cast<uint8_t>(s.sc[j] | s.m[j] << 4);
      Pack2Bits(L, y + 16);
      PutHalfBits(y + 80, s.d);
      PutHalfBits(y + 82, s.dmin);
      return;
    case kGgmlQ3_K: {
      // The high bit of each 3-bit code into hmask[e % 32] bit e / 32, the low 2 bits into qs.
      uint8_t* hmask = y;
      std::fill_n(hmask, 32, uint8_t{0});
      for (int e = 0; e < kQK; ++e) {
        if (L[e] > 3) {
          hmask[e % 32] = static_cast<uint8_t>(hmask[e % 32] | 1 << (e / 32));
          L[e] = static_cast<uint8_t>(L[e] - 4);
        }
      }
      Pack2Bits(L, y + 32);
      uint8_t* sc = y + 96;
      std::fill_n(sc, 12, uint8_t{0});
      for (int j = 0; j < 16; ++j) PutQ3Scale(j, s.sc[j] + 32, sc);
      PutHalfBits(y + 108, s.d);
      return;
    }
    case kGgmlQ4_K:
    case kGgmlQ5_K: {
      // Low 4 bits of element e in qs[32 * (e / 64) + e % 32] (low nibble when e % 64 < 32),
      // Q5_K's fifth bit in bit e / 32 of qh[e % 32].
      PutHalfBits(y, s.d);
      PutHalfBits(y + 2, s.dmin);
      std::fill_n(y + 4, 12, uint8_t{0});
      for (int j = 0; j < 8; ++j) PutScaleMinK4(j, static_cast<uint8_t>(s.sc[j]), static_cast<uint8_t>(s.m[j]), y + 4);
      uint8_t* qs = y + 16;
      if (s.type == kGgmlQ5_K) {
        uint8_t* qh = y + 16;
        std::fill_n(qh, 32, uint8_t{0});
        for (int e = 0; e < kQK; ++e) {
          if (L[e] > 15) {
            qh[e % 32] = static_cast<uint8_t>(qh[e % 32] | 1 << (e / 32));
            L[e] = static_cast<uint8_t>(L[e] - 16);
          }
        }
        qs = y + 48;
      }
      for (int j = 0; j < kQK; j += 64)
        for (int l = 0; l < 32; ++l) qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
      return;
    }
    case kGgmlQ6_K: {
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
      for (int j = 0; j < 16; ++j) {
        y[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(s.sc[j]));
      }
      PutHalfBits(y + 208, s.d);
      return;
    }
    default: {
      // IQ4_XS: 6-bit block scales l + 32 with low nibbles in scales_l (two per byte) and high
      // 2 bits in the u16 scales_h; the indices as IQ4_NL's, block by block.
      PutHalfBits(y, s.d);
      uint16_t scales_h = 0;
      uint8_t* scales_l = y + 4;
      for (int ib = 0; ib < 8; ++ib) {
        const int l = s.sc[ib] + 32;
        if (ib % 2 == 0) scales_l[ib / 2] = static_cast<uint8_t>(l & 0xF);
        else scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | (l & 0xF) << 4);
        scales_h = static_cast<uint16_t>(scales_h | (l >> 4) << (2 * ib));
      }
      std::memcpy(y + 2, &scales_h, 2);
      for (int ib = 0; ib < 8; ++ib) PackNibbles(L + 32 * ib, y + 8 + 16 * ib);
      return;
    }
  }
}

}  // namespace

bool HasKQuantGrid(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlQ2_K:
    case kGgmlQ3_K:
    case kGgmlQ4_K:
    case kGgmlQ5_K:
    case kGgmlQ6_K:
    case kGgmlIQ4_XS: return true;
    default: return false;
  }
}

int KQuantScales::sub() const { return ShapeOf(type).sub; }
int KQuantScales::sub_blocks() const { return kQK / sub(); }

float KQuantScales::scale(int j) const {
  // Q4_K / Q5_K: the dequantizer's 6-bit field (sc[j] may hold a whole wrapped byte for j < 4).
  const int code = type == kGgmlQ4_K || type == kGgmlQ5_K ? sc[j] & 63 : sc[j];
  return Fp16ToFp32(d) * static_cast<float>(code);
}

float KQuantScales::bias(int j) const {
  switch (type) {
    case kGgmlQ2_K: return -(Fp16ToFp32(dmin) * static_cast<float>(m[j]));
    case kGgmlQ4_K:
    case kGgmlQ5_K: return -(Fp16ToFp32(dmin) * static_cast<float>(m[j] & 63));
    default: return 0.0f;
  }
}

float KQuantScales::value(int j, int q) const {
  // ggml: y = dl * q - ml (Q2_K, Q4_K, Q5_K), dl * q (Q3_K), d * sc * q (Q6_K), dl * kvalues[q]
  // (IQ4_XS); a - b and a + (-b) are the same fp32 operation.
  // The symmetric types add no bias: + 0.0f would turn a -0 product into +0.
  switch (type) {
    case kGgmlIQ4_XS: return scale(j) * static_cast<float>(kIq4nl[static_cast<size_t>(q & 15)]);
    case kGgmlQ3_K:
    case kGgmlQ6_K: return scale(j) * static_cast<float>(q);
    default: return scale(j) * static_cast<float>(q) + bias(j);
  }
}

KQuantScales ChooseKQuantScales(uint32_t ggml_type, const float* x256, std::span<const float> importance) {
  if (!HasKQuantGrid(ggml_type)) Fail("ggml type {} has no K-quant grid", GgmlTypeName(ggml_type));
  if (!importance.empty() && importance.size() != kQK)
    Fail("{} importance weights for a super-block of {}", importance.size(), kQK);
  KQuantScales s;
  s.type = ggml_type;
  const float* qw = importance.empty() ? nullptr : importance.data();
  switch (ggml_type) {
    case kGgmlQ2_K: Q2_KScales(x256, qw, s); break;
    case kGgmlQ3_K: Q3_KScales(x256, qw, s); break;
    case kGgmlQ4_K: Q45_KScales<4>(x256, qw, s); break;
    case kGgmlQ5_K: Q45_KScales<5>(x256, qw, s); break;
    case kGgmlQ6_K: Q6_KScales(x256, qw, s); break;
    default: Iq4XsScales(x256, qw, s); break;
  }
  return s;
}

int KQuantCode(const KQuantScales& s, int i, float x) {
  if (i < 0 || i >= kQK) Fail("element {} is outside a super-block of {}", i, kQK);
  const int j = i / s.sub();
  if (s.type == kGgmlIQ4_XS) return BestIndexIq4nl(Iq4XsInverseScale(s, j) * x);
  const float d = s.scale(j);
  if (d == 0) return s.search_codes[static_cast<size_t>(i)];
  const float dm = MinOffset(s, j);
  switch (s.type) {
    case kGgmlQ2_K: return CodeOnGrid<kGgmlQ2_K>(d, dm, x);
    case kGgmlQ3_K: return CodeOnGrid<kGgmlQ3_K>(d, dm, x);
    case kGgmlQ4_K: return CodeOnGrid<kGgmlQ4_K>(d, dm, x);
    case kGgmlQ5_K: return CodeOnGrid<kGgmlQ5_K>(d, dm, x);
    default: return CodeOnGrid<kGgmlQ6_K>(d, dm, x);
  }
}

void PackKQuantBlock(const KQuantScales& s, const int* q256, std::byte* block) {
  const TypeShape shape = ShapeOf(s.type);
  for (int i = 0; i < kQK; ++i) CheckRange("code", q256[i], shape.q_lo, shape.q_hi, i);
  CheckScaleCodes(s);
  PackBlock(s, q256, reinterpret_cast<uint8_t*>(block));
}

namespace gguf_quant {

void QuantizeKQuantSuperBlock(uint32_t ggml_type, const float* x, const float* qw, uint8_t* y) {
  const KQuantScales s =
      ChooseKQuantScales(ggml_type, x, qw ? std::span<const float>(qw, kQK) : std::span<const float>());
  int q[kQK];
  switch (ggml_type) {
    case kGgmlQ2_K: BlockCodes<kGgmlQ2_K>(s, x, q); break;
    case kGgmlQ3_K: BlockCodes<kGgmlQ3_K>(s, x, q); break;
    case kGgmlQ4_K: BlockCodes<kGgmlQ4_K>(s, x, q); break;
    case kGgmlQ5_K: BlockCodes<kGgmlQ5_K>(s, x, q); break;
    case kGgmlQ6_K: BlockCodes<kGgmlQ6_K>(s, x, q); break;
    default: BlockCodes<kGgmlIQ4_XS>(s, x, q); break;
  }
  PackBlock(s, q, y);
}

}  // namespace gguf_quant
}  // namespace lowbit
