// SIMD versions of codec.h, written once with Highway and compiled for every x86 target;
// HWY_DYNAMIC_DISPATCH picks the best one the CPU supports at run time.
//
// Decoding of every <= 8-bit format goes through one kernel: unpack codes to 32-bit lanes, gather
// their values from the 256-entry decode table, then value * scale + bias per group. 8- and 4-bit
// codes are unpacked in registers; other widths are unpacked to a small stack buffer first.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/codec_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>

#include "formats/codec.h"

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;

// Codes [i, i + Lanes) of a packed row as int32 lanes. Requires i to be a multiple of Lanes.
template <int kBits>
HWY_INLINE hn::Vec<DI> LoadCodes(const uint8_t* HWY_RESTRICT packed, size_t i) {
  const DI di;
  const DU8 du8;
  if constexpr (kBits == 8) {
    return hn::PromoteTo(di, hn::LoadU(du8, packed + i));
  } else if constexpr (kBits == 2) {
    // Lanes / 4 bytes (at most 4: 16 lanes) as one word in every lane, lane k shifted by 2k.
    uint32_t word = 0;
    std::memcpy(&word, packed + i / 4, hn::Lanes(di) / 4);
    const auto shifts = hn::Mul(hn::Iota(di, 0), hn::Set(di, 2));
    return hn::And(hn::Shr(hn::Set(di, static_cast<int32_t>(word)), shifts), hn::Set(di, 3));
  } else {
    static_assert(kBits == 4);
    if constexpr (hn::MaxLanes(DF()) >= 4) {
      const hn::Half<DU8> dh;
      const auto bytes = hn::LoadU(dh, packed + i / 2);
      const auto lo = hn::And(bytes, hn::Set(dh, 0x0F));
      const auto hi = hn::ShiftRight<4>(bytes);
      const auto ordered = hn::Combine(du8, hn::InterleaveUpper(dh, lo, hi), hn::InterleaveLower(dh, lo, hi));
      return hn::PromoteTo(di, ordered);
    } else {
      HWY_ALIGN int32_t lanes[hn::MaxLanes(DI())];
      for (size_t k = 0; k < hn::Lanes(di); ++k) {
        const size_t j = i + k;
        lanes[k] = (packed[j / 2] >> ((j & 1) * 4)) & 0xF;
      }
      return hn::Load(di, lanes);
    }
  }
}

// Decodes elements [begin, end) of one group (end - begin a multiple of Lanes). Integer tables
// (`affine`: table[c] = table[0] + c) convert codes directly, exactly as the table would, without
// a gather.
template <int kBits>
HWY_INLINE void DecodeSpan(const uint8_t* HWY_RESTRICT packed, const float* HWY_RESTRICT table, bool affine,
                           size_t begin, size_t end, float scale, float bias, float* HWY_RESTRICT out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  const auto vb = hn::Set(df, bias);
  if (affine) {
    const auto offset = hn::Set(df, table[0]);
    for (size_t i = begin; i < end; i += N) {
      const auto v = hn::Add(hn::ConvertTo(df, LoadCodes<kBits>(packed, i)), offset);
      hn::StoreU(hn::MulAdd(v, vs, vb), df, out + i);
    }
    return;
  }
  for (size_t i = begin; i < end; i += N) {
    const auto v = hn::GatherIndex(df, table, LoadCodes<kBits>(packed, i));
    hn::StoreU(hn::MulAdd(v, vs, vb), df, out + i);
  }
}

template <int kBits>
void DecodeRowFast(const uint8_t* HWY_RESTRICT packed, const float* HWY_RESTRICT table, bool affine,
                   const GroupedRow& row, float* HWY_RESTRICT out) {
  const size_t N = hn::Lanes(DF());
  // Vector loop over whole multiples of N inside each group; scalar for the ragged rest.
  for (size_t g0 = 0, g = 0; g0 < row.n; g0 += row.group, ++g) {
    const size_t g1 = g0 + row.group < row.n ? g0 + row.group : row.n;
    const float scale = row.scale[g];
    const float bias = row.bias ? row.bias[g] : 0.0f;
    size_t i = g0;
    if (g0 % N == 0) {
      const size_t vec_end = g0 + (g1 - g0) / N * N;
      DecodeSpan<kBits>(packed, table, affine, g0, vec_end, scale, bias, out);
      i = vec_end;
    }
    for (; i < g1; ++i) out[i] = std::fma(table[ReadCode(packed, i, kBits)], scale, bias);
  }
}

// Codes [first, first + n) to bytes. Eight codes of kBits bits fill exactly kBits bytes, so from a
// byte-aligned start they are unpacked eight at a time from one 64-bit load; the rest one by one.
template <int kBits>
void UnpackToBytes(const uint8_t* HWY_RESTRICT packed, size_t first, size_t n, uint8_t* HWY_RESTRICT bytes) {
  size_t k = 0;
  if (first % 8 == 0) {
    const uint8_t* p = packed + first / 8 * kBits;
    for (; k + 8 <= n; k += 8, p += kBits) {
      uint64_t v = 0;
      std::memcpy(&v, p, kBits);
      for (int j = 0; j < 8; ++j) bytes[k + j] = static_cast<uint8_t>((v >> (j * kBits)) & ((1u << kBits) - 1));
    }
  }
  for (; k < n; ++k) bytes[k] = static_cast<uint8_t>(ReadCode(packed, first + k, kBits));
}

void DecodeRowImpl(const uint8_t* HWY_RESTRICT packed, int bits, const float* HWY_RESTRICT table, bool affine,
                   const GroupedRow& row, float* HWY_RESTRICT out) {
  if (bits == 8) return DecodeRowFast<8>(packed, table, affine, row, out);
  if (bits == 4) return DecodeRowFast<4>(packed, table, affine, row, out);
  // 2-bit codes (KIVI's int2 KV cache) straight from their bytes, when a vector holds 4 to 16 lanes.
  if (bits == 2 && hn::Lanes(DF()) >= 4 && hn::Lanes(DF()) <= 16) return DecodeRowFast<2>(packed, table, affine, row, out);
  auto unpack = bits == 2 ? UnpackToBytes<2> : bits == 3 ? UnpackToBytes<3> : bits == 5 ? UnpackToBytes<5>
              : bits == 6 ? UnpackToBytes<6> : bits == 7 ? UnpackToBytes<7> : nullptr;
  HWY_ASSERT(unpack != nullptr);
  // Other widths: unpack each group (in pieces of at most kChunk) to bytes, then decode them as
  // 8-bit codes.
  constexpr size_t kChunk = 4096;
  HWY_ALIGN uint8_t bytes[kChunk];
  for (size_t g0 = 0, g = 0; g0 < row.n; g0 += row.group, ++g) {
    const size_t g1 = g0 + row.group < row.n ? g0 + row.group : row.n;
    const float bias = row.bias ? row.bias[g] : 0.0f;
    for (size_t c0 = g0; c0 < g1; c0 += kChunk) {
      const size_t len = g1 - c0 < kChunk ? g1 - c0 : kChunk;
      unpack(packed, c0, len, bytes);
      const GroupedRow piece{len, len, &row.scale[g], &bias};
      DecodeRowFast<8>(bytes, table, affine, piece, out + c0);
    }
  }
}

void EncodeIntRowImpl(const float* HWY_RESTRICT x, const GroupedRow& row, const IntEncodeParams& p,
                      uint8_t* HWY_RESTRICT codes) {
  const DF df;
  const DI di;
  const DU8 du8;
  const size_t N = hn::Lanes(df);
  const auto vmax = hn::Set(df, static_cast<float>(p.qmax));
  for (size_t g0 = 0, g = 0; g0 < row.n; g0 += row.group, ++g) {
    const size_t g1 = g0 + row.group < row.n ? g0 + row.group : row.n;
    const auto vs = hn::Set(df, row.scale[g]);
    const auto vpre = hn::Set(df, p.pre ? p.pre[g] : 0.0f);
    const auto vpost = hn::Set(df, p.post ? p.post[g] : 0.0f);
    size_t i = g0;
    for (; i + N <= g1; i += N) {
      auto q = hn::Add(hn::Round(hn::Add(hn::Div(hn::LoadU(df, x + i), vs), vpre)), vpost);
      q = hn::Min(hn::Max(q, hn::Zero(df)), vmax);
      hn::StoreU(hn::DemoteTo(du8, hn::ConvertTo(di, q)), du8, codes + i);
    }
    if (i < g1) {
      const GroupedRow tail{g1 - i, g1 - i, &row.scale[g], nullptr};
      const float pre = p.pre ? p.pre[g] : 0.0f, post = p.post ? p.post[g] : 0.0f;
      EncodeIntRowRef(x + i, tail, IntEncodeParams{p.qmax, &pre, &post}, codes + i);
    }
  }
}

void EncodeMiniFloatRowImpl(const MiniFloat& f, const float* HWY_RESTRICT x, const GroupedRow& row,
                            uint8_t* HWY_RESTRICT codes) {
  const DF df;
  const DI di;
  const DU8 du8;
  const size_t N = hn::Lanes(df);
  const int emin = 1 - f.bias;  // exponent of the smallest normal binade
  const auto vmax = hn::Set(df, static_cast<float>(MaxFinite(f)));
  const auto vmin_normal = hn::Set(df, static_cast<float>(MinNormal(f)));
  const auto vemin = hn::Set(di, emin);
  const auto vman_shift = hn::Set(di, f.man_bits - 127);  // quantum exponent = e - M; biased
  const auto vman_mask = hn::Set(di, (1 << f.man_bits) - 1);
  const auto vsign = hn::Set(di, f.has_sign ? 1 << (f.exp_bits + f.man_bits) : 0);
  for (size_t g0 = 0, g = 0; g0 < row.n; g0 += row.group, ++g) {
    const size_t g1 = g0 + row.group < row.n ? g0 + row.group : row.n;
    const auto vs = hn::Set(df, row.scale[g]);
    size_t i = g0;
    for (; i + N <= g1; i += N) {
      const auto v = hn::Div(hn::LoadU(df, x + i), vs);
      const auto a = hn::Min(hn::Abs(v), vmax);  // saturate: max finite is on the grid
      // Binade exponent of a, floored at the subnormal binade.
      auto e = hn::Sub(hn::ShiftRight<23>(hn::BitCast(di, a)), hn::Set(di, 127));
      e = hn::Max(e, vemin);
      const auto quantum = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(e, vman_shift)));
      const auto q = hn::Round(hn::Div(a, quantum));  // exact rescale, RNE
      const auto r = hn::Mul(q, quantum);
      const auto rbits = hn::BitCast(di, r);
      const auto exp_field = hn::Add(hn::Sub(hn::ShiftRight<23>(rbits), hn::Set(di, 127)), hn::Set(di, f.bias));
      const auto man = hn::And(hn::ShiftRightSame(rbits, 23 - f.man_bits), vman_mask);
      const auto normal_code = hn::Or(hn::ShiftLeftSame(exp_field, f.man_bits), man);
      auto code = hn::IfThenElse(hn::RebindMask(di, hn::Lt(r, vmin_normal)), hn::ConvertTo(di, q), normal_code);
      const auto negative = hn::RebindMask(di, hn::Lt(hn::BitCast(di, v), hn::Zero(di)));
      code = hn::IfThenElse(negative, hn::Or(code, vsign), code);
      hn::StoreU(hn::DemoteTo(du8, code), du8, codes + i);
    }
    if (i < g1) {
      const GroupedRow tail{g1 - i, g1 - i, &row.scale[g], nullptr};
      EncodeMiniFloatRowRef(f, x + i, tail, codes + i);
    }
  }
}

// fp16 via integer ops (the same algorithm as the scalar Fp32ToFp16), so every target, with or
// without F16C, produces identical bits.
void Fp32ToFp16RowImpl(const float* HWY_RESTRICT x, size_t n, uint16_t* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint16_t, DF> du16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(di, hn::LoadU(df, x + i));
    const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(di, 0x8000));
    const auto a = hn::And(u, hn::Set(di, 0x7FFFFFFF));
    const auto sub = hn::NearestInt(hn::Mul(hn::BitCast(df, a), hn::Set(df, 16777216.0f)));
    auto h = hn::Or(hn::ShiftLeft<10>(hn::Sub(hn::ShiftRight<23>(a), hn::Set(di, 112))),
                    hn::ShiftRight<13>(hn::And(a, hn::Set(di, 0x7FFFFF))));
    const auto rest = hn::And(a, hn::Set(di, 0x1FFF));
    const auto round_up = hn::Or(hn::Gt(rest, hn::Set(di, 0x1000)),
                                 hn::And(hn::Eq(rest, hn::Set(di, 0x1000)),
                                         hn::Eq(hn::And(h, hn::Set(di, 1)), hn::Set(di, 1))));
    h = hn::IfThenElse(round_up, hn::Add(h, hn::Set(di, 1)), h);
    h = hn::IfThenElse(hn::Lt(a, hn::Set(di, 0x38800000)), sub, h);
    h = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x477FEFFF)), hn::Set(di, 0x7C00), h);
    h = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x7F800000)), hn::Set(di, 0x7E00), h);
    hn::StoreU(hn::DemoteTo(du16, hn::Or(h, sign)), du16, out + i);
  }
  for (; i < n; ++i) out[i] = Fp32ToFp16(x[i]);
}

void Fp16ToFp32RowImpl(const uint16_t* HWY_RESTRICT x, size_t n, float* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint16_t, DF> du16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  // vcvtph2ps (F16C): the KV cache's fp16 scales pass through here at every attention tile. Not on
  // other targets: Highway 1.0.3's emulated conversion does not turn fp16 infinities into fp32 ones.
  const hn::Rebind<hwy::float16_t, DF> dh;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(x + i))), df, out + i);
#endif
  for (; i + N <= n; i += N) {
    const auto h = hn::PromoteTo(di, hn::LoadU(du16, x + i));
    const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(di, 0x8000)));
    const auto e = hn::And(hn::ShiftRight<10>(h), hn::Set(di, 0x1F));
    const auto m = hn::And(h, hn::Set(di, 0x3FF));
    const auto normal = hn::Or(hn::ShiftLeft<23>(hn::Add(e, hn::Set(di, 112))), hn::ShiftLeft<13>(m));
    const auto special = hn::Or(hn::Set(di, 0x7F800000), hn::ShiftLeft<13>(m));
    const auto tiny = hn::BitCast(di, hn::Mul(hn::ConvertTo(df, m), hn::Set(df, 0x1p-24f)));
    auto bits = hn::IfThenElse(hn::Eq(e, hn::Zero(di)), tiny, normal);
    bits = hn::IfThenElse(hn::Eq(e, hn::Set(di, 31)), special, bits);
    hn::StoreU(hn::BitCast(df, hn::Or(bits, sign)), df, out + i);
  }
  for (; i < n; ++i) out[i] = Fp16ToFp32(x[i]);
}

void Fp32ToBf16RowImpl(const float* HWY_RESTRICT x, size_t n, uint16_t* HWY_RESTRICT out) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> du16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, hn::LoadU(df, x + i));
    const auto rounded = hn::ShiftRight<16>(
        hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u))));
    const auto quiet_nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
    const auto is_nan = hn::Gt(hn::And(u, hn::Set(du, 0x7FFFFFFFu)), hn::Set(du, 0x7F800000u));
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(hn::RebindToSigned<DF>(), hn::IfThenElse(is_nan, quiet_nan, rounded))),
               du16, out + i);
  }
  for (; i < n; ++i) out[i] = Fp32ToBf16(x[i]);
}

void Bf16ToFp32RowImpl(const uint16_t* HWY_RESTRICT x, size_t n, float* HWY_RESTRICT out) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> du16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, x + i)))), df, out + i);
  }
  for (; i < n; ++i) out[i] = Bf16ToFp32(x[i]);
}

void HalfScalesByteZerosImpl(const uint16_t* HWY_RESTRICT halves, const uint8_t* HWY_RESTRICT zeros, uint8_t mask,
                             float offset, size_t n, float* HWY_RESTRICT scales, float* HWY_RESTRICT biases) {
  Fp16ToFp32RowImpl(halves, n, scales);
  const DF df;
  const hn::Rebind<uint32_t, DF> du32;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto zero = hn::ConvertTo(df, hn::BitCast(DI(), hn::PromoteTo(du32, hn::And(hn::LoadU(DU8(), zeros + i),
                                                                                   hn::Set(DU8(), mask)))));
    hn::StoreU(hn::Mul(hn::Sub(hn::Set(df, offset), zero), hn::LoadU(df, scales + i)), df, biases + i);
  }
  for (; i < n; ++i) biases[i] = (offset - static_cast<float>(zeros[i] & mask)) * scales[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(DecodeRowImpl);
HWY_EXPORT(EncodeIntRowImpl);
HWY_EXPORT(EncodeMiniFloatRowImpl);
HWY_EXPORT(Fp32ToFp16RowImpl);
HWY_EXPORT(Fp16ToFp32RowImpl);
HWY_EXPORT(Fp32ToBf16RowImpl);
HWY_EXPORT(Bf16ToFp32RowImpl);
HWY_EXPORT(HalfScalesByteZerosImpl);

void DecodeRow(const uint8_t* packed, int bits, const float* table, bool affine, const GroupedRow& row, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeRowImpl)(packed, bits, table, affine, row, out);
}
void EncodeIntRow(const float* x, const GroupedRow& row, const IntEncodeParams& p, uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(EncodeIntRowImpl)(x, row, p, codes);
}
void EncodeMiniFloatRow(const MiniFloat& f, const float* x, const GroupedRow& row, uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(EncodeMiniFloatRowImpl)(f, x, row, codes);
}
void Fp32ToFp16Row(const float* x, size_t n, uint16_t* out) { HWY_DYNAMIC_DISPATCH(Fp32ToFp16RowImpl)(x, n, out); }
void Fp16ToFp32Row(const uint16_t* x, size_t n, float* out) { HWY_DYNAMIC_DISPATCH(Fp16ToFp32RowImpl)(x, n, out); }
void Fp32ToBf16Row(const float* x, size_t n, uint16_t* out) { HWY_DYNAMIC_DISPATCH(Fp32ToBf16RowImpl)(x, n, out); }
void Bf16ToFp32Row(const uint16_t* x, size_t n, float* out) { HWY_DYNAMIC_DISPATCH(Bf16ToFp32RowImpl)(x, n, out); }
void HalfScalesByteZeros(const uint16_t* halves, const uint8_t* zeros, uint8_t mask, float offset, size_t n,
                         float* scales, float* biases) {
  HWY_DYNAMIC_DISPATCH(HalfScalesByteZerosImpl)(halves, zeros, mask, offset, n, scales, biases);
}
}  // namespace lowbit
#endif
