#include "io/gguf_quantize.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/minifloat.h"
#include "io/gguf.h"
#include "io/gguf_quantize_internal.h"

// Everything below follows llama.cpp's ggml-quants.c routine by routine (named in each comment);
// the float expressions keep ggml's operand order and types, since a reordered sum or a product
// taken in another order changes the last bit and with it a rounding decision. The scalar helpers
// and the shared scale searches live in gguf_quantize_internal.h / gguf_quantize_search.cc, the
// K-quants and IQ4_XS in gguf_kquant_grid.cc (as the three phases of gguf_kquant_grid.h).

namespace lowbit {
namespace {

using namespace gguf_quant;

// kvalues_mxfp4: the E2M1 values doubled; ggml pairs them with half the E8M0 scale.
constexpr std::array<int8_t, 16> kMxfp4Doubled = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ---- 32-element types (formats.md 2.8). Nibble order: element j in the low nibble of qs[j],
// element j + 16 in the high nibble (PackNibbles); the 5-bit types keep bit 4 of element j in bit
// j of a u32.

// The 4-bit types OR the codes unmasked (they are below 16 unless the input held NaN or inf),
// the 5-bit types mask their low 4 bits.
void PackLowNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((L[j] & 0xF) | (L[j + 16] & 0xF) << 4);
}
uint32_t FifthBits(const uint8_t* L) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= ((L[j] & 0x10u) >> 4) << j;
  return qh;
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


// ---- K-quants and IQ4_XS (256-element super-blocks): choose the scales, code each element,
// pack (gguf_kquant_grid.cc).

template <uint32_t kType>
void KQuantBlock(const float* x, uint8_t* y) {
  QuantizeKQuantSuperBlock(kType, x, nullptr, y);
}
template <uint32_t kType, int kBytes>
void KQuantRow(const float* x, int64_t n, const float* qw, uint8_t* y) {
  for (int64_t i = 0; i < n / kQK; ++i) QuantizeKQuantSuperBlock(kType, x + i * kQK, qw + i * kQK, y + i * kBytes);
}

// ---- IQ4_NL: quantize_row_iq4_nl_impl with 16 levels and ntry = 7 (what quantize_iq4_nl runs,
// with or without quant_weights) on one block of 32; weights qw * sqrt(sigma2 + x^2) (x^2
// without), sigma2 = 2 * mean x^2 over the block; the fp32 block scale stored as fp16, the
// indices re-picked with its inverse.
void Iq4NlBlock(const float* x, const float* qw, uint8_t* y) {
  float sigma2 = 0;
  for (int j = 0; j < 32; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.0f / 32;
  float weight[32];
  for (int j = 0; j < 32; ++j) weight[j] = qw ? qw[j] * std::sqrt(sigma2 + x[j] * x[j]) : x[j] * x[j];
  const float d = Iq4BlockScale(x, weight);
  PutHalf(y, d);
  const float id = d != 0 ? 1 / d : 0.0f;
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(BestIndexIq4nl(id * x[j]));
  PackNibbles(L, y + 2);
}
void Iq4NlUnweighted(const float* x, uint8_t* y) { Iq4NlBlock(x, nullptr, y); }
void Iq4NlRow(const float* x, int64_t n, const float* qw, uint8_t* y) {
  for (int64_t i = 0; i < n / 32; ++i) Iq4NlBlock(x + i * 32, qw + i * 32, y + i * 18);
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
    {kGgmlQ2_K, KQuantBlock<kGgmlQ2_K>, KQuantRow<kGgmlQ2_K, 84>},
    {kGgmlQ3_K, KQuantBlock<kGgmlQ3_K>, KQuantRow<kGgmlQ3_K, 110>},
    {kGgmlQ4_K, KQuantBlock<kGgmlQ4_K>, KQuantRow<kGgmlQ4_K, 144>},
    {kGgmlQ5_K, KQuantBlock<kGgmlQ5_K>, KQuantRow<kGgmlQ5_K, 176>},
    {kGgmlQ6_K, KQuantBlock<kGgmlQ6_K>, KQuantRow<kGgmlQ6_K, 210>},
    {kGgmlIQ4_NL, Iq4NlUnweighted, Iq4NlRow},
    {kGgmlIQ4_XS, KQuantBlock<kGgmlIQ4_XS>, KQuantRow<kGgmlIQ4_XS, 136>},
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
