// Fused quantized matmul kernels (Highway, dispatched at run time). One row kernel, specialised
// at compile time on how a vector of codes becomes a vector of floats:
//   affine integers (int2..int8 sym and asym, offset folded into the group bias): shift, mask, convert;
//   16-entry tables (NF4, FP4 E2M1 / MXFP4 / NVFP4, ternary): in-register table lookup;
//   FP8 E4M3 / E5M2: bit-moved into fp16 and widened in hardware (E4M3 carries a 2^8 factor,
//   folded into the group scale); other 8-bit codes: gather from the 256-entry table;
//   FP6 E2M3 / E3M2: bit-moved into fp16 as FP8 is (a 2^14 / 2^12 factor folded into the scale);
//   fp16 / bf16 / fp32 storage: widened directly.
// Packed codes of b = 2 or 4 bits hold 8/b "planes" per byte (element k*P + j sits in plane j of byte
// k); the activations are permuted once per call so plane j meets a contiguous run of x. Codes of 3, 5,
// 6 and 7 bits straddle bytes (element i at bit i*b, LSB first): a chunk of one code per lane is
// b bytes per 8 lanes, which one byte shuffle spreads two bytes per lane and one variable shift aligns.
#ifndef LOWBIT_QMATMUL_PLAN
#define LOWBIT_QMATMUL_PLAN
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "formats/codec.h"
#include "kernels/qmatmul.h"

namespace lowbit::qmatmul {

enum class CodeKind : uint8_t { kNone, kAffine, kLut16, kE4M3, kE5M2, kE2M3, kE3M2, kTable8, kFp16, kBf16, kF32 };

// Codes that straddle bytes, one per lane.
constexpr bool OddWidth(int bits) { return bits == 3 || bits == 5 || bits == 6 || bits == 7; }

// Code bytes are prefetched this far ahead of the decode (as in qmatmul_int8.cc).
constexpr size_t kPrefetchAhead = 2048;

struct Plan {
  CodeKind kind = CodeKind::kNone;
  int bits = 0;
  size_t planes = 1;      // codes per byte for b < 8
  size_t group = 0;       // elements per scale group (cols when there is one group)
  size_t groups = 1;      // scale groups per row (1 for unscaled fp16 / bf16 / fp32 storage)
  float offset = 0;       // affine codes: table[c] = c + offset
  float code_scale = 1;   // what the vector decode leaves out of the value (E4M3: 2^8)
};

inline Plan PlanFor(const QuantizedTensor& w) {
  const ElementFormat& e = *w.scheme().element;
  Plan p;
  p.bits = e.bits;
  p.groups = std::max<uint64_t>(w.grid().grid_cols, 1);
  p.group = p.groups == 1 ? w.cols() : w.grid().cell_cols;
  if (e.bits == 32) p.kind = CodeKind::kF32;
  if (e.bits == 16) p.kind = e.minifloat == &kFp16 ? CodeKind::kFp16 : CodeKind::kBf16;
  if (e.bits > 8) return p;
  const bool packs = e.bits == 2 || e.bits == 4 || e.bits == 8;
  p.planes = packs ? 8 / e.bits : 1;
  if ((packs || OddWidth(e.bits)) && w.decode_affine()) {
    p.kind = CodeKind::kAffine;
    p.offset = w.decode_table()[0];
  } else if (e.bits == 2 || e.bits == 4) {
    p.kind = CodeKind::kLut16;
  } else if (e.bits == 8) {
    p.kind = e.minifloat == &kE4M3 ? CodeKind::kE4M3 : e.minifloat == &kE5M2 ? CodeKind::kE5M2 : CodeKind::kTable8;
    if (p.kind == CodeKind::kE4M3) p.code_scale = 256.0f;
  } else if (e.bits == 6 && (e.minifloat == &kE2M3 || e.minifloat == &kE3M2)) {
    // fp16 holds the value times 2^(bias - 15): E2M3's bias is 1, E3M2's 3.
    p.kind = e.minifloat == &kE2M3 ? CodeKind::kE2M3 : CodeKind::kE3M2;
    p.code_scale = p.kind == CodeKind::kE2M3 ? 16384.0f : 4096.0f;
  }
  return p;
}

// Weight i of a row, decoded the scalar way (tails of rows the vectors do not cover).
inline float ScalarWeight(const QuantizedTensor& w, const uint8_t* row, size_t i, float scale) {
  const int bits = w.scheme().element->bits;
  if (bits == 32) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
  if (bits == 16) {
    const uint16_t h = static_cast<uint16_t>(row[2 * i] | row[2 * i + 1] << 8);
    return w.scheme().element->minifloat == &kFp16 ? Fp16ToFp32(h) : Bf16ToFp32(h);
  }
  return w.decode_table()[ReadCode(row, i, bits)] * scale;
}

}  // namespace lowbit::qmatmul
#endif  // LOWBIT_QMATMUL_PLAN

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qmatmul.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using qmatmul::CodeKind;
using qmatmul::Plan;

// The widest vector whose chunk (planes x lanes codes) tiles every full scale group; codes that
// straddle bytes need whole bytes per chunk, so 8 or 16 lanes.
size_t ChooseLanes(const Plan& p) {
  if (p.kind == CodeKind::kNone) return 0;
  const size_t full = hn::Lanes(hn::ScalableTag<float>());
  for (const size_t lanes : {full, std::min<size_t>(full, 8), std::min<size_t>(full, 4)}) {
    if (qmatmul::OddWidth(p.bits) && (lanes < 8 || lanes > 16)) continue;
    if (p.groups == 1 || p.group % (p.planes * lanes) == 0) return lanes;
  }
  return 0;
}

// For codes of b bits straddling bytes: lane l's code starts at bit l*b of the chunk, so its two
// bytes are (l*b)/8 and the next (the other two bytes of the 32-bit lane are zeroed: index 0x80),
// shifted right by (l*b) % 8. Indices stay within one 16-byte block, which every block repeats.
template <int kBits>
struct OddCodeSpread {
  alignas(64) uint8_t bytes[64];
  alignas(64) uint32_t shifts[16];
  constexpr OddCodeSpread() : bytes(), shifts() {
    for (int l = 0; l < 16; ++l) {
      const int bit = l * kBits;
      bytes[4 * l] = static_cast<uint8_t>(bit / 8);
      bytes[4 * l + 1] = static_cast<uint8_t>(bit / 8 + 1);
      bytes[4 * l + 2] = bytes[4 * l + 3] = 0x80;
      shifts[l] = static_cast<uint32_t>(bit % 8);
    }
  }
};
template <int kBits>
inline constexpr OddCodeSpread<kBits> kOddSpread{};

// The codes of one chunk of b-bit codes (b = 3, 5, 6, 7; lanes * b bits, whole bytes) at p, one per
// lane. Reads 16 bytes from p: callers keep that within the buffer.
template <int kBits, class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> OddCodes(D, const uint8_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<D> du;
  const hn::Repartition<uint8_t, D> d8;
  const auto bytes = hn::LoadDup128(d8, p);
  const auto pairs = hn::BitCast(du, hn::TableLookupBytesOr0(bytes, hn::Load(d8, kOddSpread<kBits>.bytes)));
  return hn::And(hn::Shr(pairs, hn::Load(du, kOddSpread<kBits>.shifts)), hn::Set(du, (1u << kBits) - 1));
}

template <class D>
struct Lut {  // a 16-entry table split into vectors of the tag's width
  hn::Vec<D> part[4];
};

template <class D>
HWY_INLINE hn::Vec<D> LookUp(D d, const Lut<D>& lut, hn::Vec<hn::RebindToSigned<D>> idx) {
  const hn::RebindToSigned<D> di;
  const size_t lanes = hn::Lanes(d);
  if (lanes >= 16) return hn::TableLookupLanes(lut.part[0], hn::IndicesFromVec(d, idx));
  const auto local = hn::IndicesFromVec(d, hn::And(idx, hn::Set(di, static_cast<int32_t>(lanes - 1))));
  auto v = hn::TableLookupLanes(lut.part[0], local);
  for (size_t k = 1; k * lanes < 16; ++k) {
    const auto in_part = hn::Gt(idx, hn::Set(di, static_cast<int32_t>(k * lanes) - 1));
    v = hn::IfThenElse(hn::RebindMask(d, in_part), hn::TableLookupLanes(lut.part[k], local), v);
  }
  return v;
}

template <CodeKind K, int kBits>
constexpr size_t kPlanes = (kBits == 2 || kBits == 4) ? 8 / kBits : 1;

// Decodes one chunk of codes at p into kPlanes vectors (values before the group scale).
template <CodeKind K, int kBits, class D>
HWY_INLINE void DecodeChunk(D d, const uint8_t* HWY_RESTRICT p, const Lut<D>& lut, const float* table,
                            hn::Vec<D>* out) {
  const hn::RebindToSigned<D> di;
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<uint16_t, D> d16;
  if constexpr (K == CodeKind::kF32) {
    out[0] = hn::LoadU(d, reinterpret_cast<const float*>(p));
  } else if constexpr (K == CodeKind::kFp16) {
    const hn::Rebind<hwy::float16_t, D> dh;
    out[0] = hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else if constexpr (K == CodeKind::kBf16) {
    const auto wide = hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)));
    out[0] = hn::BitCast(d, hn::ShiftLeft<16>(wide));
  } else if constexpr (K == CodeKind::kE4M3 || K == CodeKind::kE5M2) {
    const hn::Rebind<hwy::float16_t, D> dh;
    const auto code = hn::PromoteTo(d16, hn::LoadU(d8, p));
    const auto half = K == CodeKind::kE5M2
                          ? hn::ShiftLeft<8>(code)
                          : hn::Or(hn::ShiftLeft<8>(hn::And(code, hn::Set(d16, 0x80))),
                                   hn::ShiftLeft<7>(hn::And(code, hn::Set(d16, 0x7F))));
    out[0] = hn::PromoteTo(d, hn::BitCast(dh, half));
  } else if constexpr (qmatmul::OddWidth(kBits)) {
    const auto code = OddCodes<kBits>(d, p);
    if constexpr (K == CodeKind::kAffine) {
      out[0] = hn::ConvertTo(d, hn::BitCast(di, code));
    } else {
      static_assert(K == CodeKind::kE2M3 || K == CodeKind::kE3M2);
      // Sign to fp16's bit 15, exponent and mantissa under fp16's: E2M3's 3 mantissa bits start at
      // bit 7, E3M2's 2 at bit 8.
      constexpr int kMantissaShift = K == CodeKind::kE2M3 ? 7 : 8;
      const auto half = hn::Or(hn::ShiftLeft<10>(hn::And(code, hn::Set(du, 0x20))),
                               hn::ShiftLeft<kMantissaShift>(hn::And(code, hn::Set(du, 0x1F))));
      const hn::Rebind<hwy::float16_t, D> dh;
      out[0] = hn::PromoteTo(d, hn::BitCast(dh, hn::DemoteTo(d16, hn::BitCast(di, half))));
    }
  } else {
    const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, p));
    constexpr size_t P = kPlanes<K, kBits>;
    for (size_t j = 0; j < P; ++j) {
      auto code = hn::BitCast(di, P == 1 ? bytes : hn::And(hn::ShiftRightSame(bytes, static_cast<int>(j * kBits)),
                                                           hn::Set(du, (1u << kBits) - 1)));
      if constexpr (K == CodeKind::kAffine) out[j] = hn::ConvertTo(d, code);
      else if constexpr (K == CodeKind::kLut16) out[j] = LookUp(d, lut, code);
      else out[j] = hn::GatherIndex(d, table, code);
    }
  }
}

struct RowArgs {
  const QuantizedTensor* w;
  const QuantInput* in;
  const Plan* plan;
  const float* scales;  // per group, times the plan's code_scale applied below; nullptr = 1
  const float* biases;  // per group, multiplies the group sum of x; nullptr = none
};

// Row r against tokens [t0, t0 + kTokens). Four independent accumulators per token hide the FMA
// latency (U chunks of P planes per step); tails and group biases are scalar work after the loop.
// `row`: row r's codes (a padded copy near the end of the codes, which odd widths read 16 bytes at a time).
template <CodeKind K, int kBits, size_t kTokens, class D>
HWY_INLINE void RowTokens(D d, const RowArgs& a, const Lut<D>& lut, size_t r, const uint8_t* HWY_RESTRICT row,
                          size_t t0, float* HWY_RESTRICT y, size_t y_stride) {
  constexpr size_t P = kPlanes<K, kBits>, U = 4 / P;
  const size_t lanes = hn::Lanes(d), chunk = P * lanes;
  const QuantizedTensor& w = *a.w;
  const size_t cols = w.cols(), group = a.plan->group, groups = a.plan->groups;
  const float* table = w.decode_table().data();
  const float* x[kTokens];
  for (size_t t = 0; t < kTokens; ++t) x[t] = a.in->values.data() + (t0 + t) * cols;
  // Decoded weights are scaled before the FMA, so the accumulators live across groups (no
  // per-group reduction on the critical path).
  hn::Vec<D> acc[kTokens][4];
  for (size_t t = 0; t < kTokens; ++t)
    for (size_t k = 0; k < 4; ++k) acc[t][k] = hn::Zero(d);
  // One chunk at column i into accumulator set k (P vectors) of `into`, the weights multiplied by
  // `scale` first when `scaled` is std::true_type. k is a constant after unrolling, so the
  // accumulators stay in registers.
  const auto step = [&](size_t i, hn::Vec<D> scale, size_t k, auto scaled, hn::Vec<D>(&into)[kTokens][4]) HWY_ATTR {
    hn::Vec<D> wv[P];
    // As in the integer-dot kernel: the hardware prefetcher falls behind one stream per thread.
    hwy::Prefetch(row + i * kBits / 8 + qmatmul::kPrefetchAhead);
    DecodeChunk<K, kBits>(d, row + i * kBits / 8, lut, table, wv);
    for (size_t j = 0; j < P; ++j) {
      hn::Vec<D> w_j = wv[j];
      if constexpr (decltype(scaled)::value && kBits <= 8) w_j = hn::Mul(w_j, scale);
      for (size_t t = 0; t < kTokens; ++t)
        into[t][k * P + j] = hn::MulAdd(w_j, hn::LoadU(d, x[t] + i + j * lanes), into[t][k * P + j]);
    }
  };
  const auto group_scale = [&](size_t g) { return hn::Set(d, (a.scales ? a.scales[g] : 1.0f) * a.plan->code_scale); };
  size_t vector_end = 0;
  if (groups > 1 && group == chunk) {  // small groups, one chunk each: U groups per step, a set each
    const size_t whole = cols / chunk;  // groups with a whole chunk (a partial last one is tail)
    size_t g = 0;
    for (; g + U <= whole; g += U)
      for (size_t u = 0; u < U; ++u) step((g + u) * chunk, group_scale(g + u), u, std::true_type(), acc);
    for (; g < whole; ++g) step(g * chunk, group_scale(g), 0, std::true_type(), acc);
    vector_end = whole * chunk;
  } else {
    // One token (decode): the group's products go unscaled into their own accumulators, scaled
    // once at the group's end: one FMA per accumulator instead of a multiply per weight vector.
    // With several tokens the multiply is shared by all of them, so it stays.
    constexpr bool kDeferScale = kTokens == 1 && kBits <= 8;
    using ScaleNow = std::bool_constant<!kDeferScale>;
    for (size_t g = 0; g < groups; ++g) {
      const size_t start = g * group, end = std::min(cols, start + group);
      vector_end = start + (end - start) / chunk * chunk;
      const auto scale = group_scale(g);
      hn::Vec<D> part[kTokens][4];
      if constexpr (kDeferScale)
        for (size_t k = 0; k < 4; ++k) part[0][k] = hn::Zero(d);
      auto& into = kDeferScale ? part : acc;
      size_t i = start;
      for (; i + U * chunk <= vector_end; i += U * chunk)
        for (size_t u = 0; u < U; ++u) step(i + u * chunk, scale, u, ScaleNow(), into);
      for (; i < vector_end; i += chunk) step(i, scale, 0, ScaleNow(), into);
      if constexpr (kDeferScale)
        for (size_t k = 0; k < 4; ++k) acc[0][k] = hn::MulAdd(part[0][k], scale, acc[0][k]);
    }
  }
  float extra[kTokens] = {};
  const float last_scale = a.scales ? a.scales[groups - 1] : 1.0f;
  for (size_t i = vector_end; i < cols; ++i) {  // only the last group can have a tail
    const float v = qmatmul::ScalarWeight(w, row, i, last_scale) - a.plan->offset * last_scale;
    for (size_t t = 0; t < kTokens; ++t) extra[t] += v * x[t][i];
  }
  if (a.biases)  // sum over groups of bias x group sum of x: as many terms as groups, so vectorised
    for (size_t t = 0; t < kTokens; ++t) {
      const float* sums = a.in->group_sums.data() + (t0 + t) * groups;
      auto dot = hn::Zero(d);
      size_t g = 0;
      for (; g + lanes <= groups; g += lanes) dot = hn::MulAdd(hn::LoadU(d, a.biases + g), hn::LoadU(d, sums + g), dot);
      extra[t] += hn::GetLane(hn::SumOfLanes(d, dot));
      for (; g < groups; ++g) extra[t] += a.biases[g] * sums[g];
    }
  for (size_t t = 0; t < kTokens; ++t) {
    const auto total = hn::Add(hn::Add(acc[t][0], acc[t][1]), hn::Add(acc[t][2], acc[t][3]));
    y[(t0 + t) * y_stride + r] = hn::GetLane(hn::SumOfLanes(d, total)) + extra[t];
  }
}

template <CodeKind K, int kBits, class D>
void RunRows(D d, const QuantizedTensor& w, const QuantInput& in, const Plan& plan, size_t row_begin, size_t row_end,
             float* y, size_t y_stride) {
  Lut<D> lut;
  const size_t lanes = hn::Lanes(d);
  for (size_t k = 0; k * lanes < 16; ++k)
    lut.part[k] = K == CodeKind::kLut16 ? hn::LoadU(d, w.decode_table().data() + k * lanes) : hn::Zero(d);
  const bool scaled = kBits <= 8, asym = w.scheme().asymmetric();
  std::vector<float> scales(w.grid().grid_cols), biases(w.grid().grid_cols);
  const bool has_bias = scaled && (asym || plan.offset != 0);
  const RowArgs args{&w, &in, &plan, scaled ? scales.data() : nullptr, has_bias ? biases.data() : nullptr};
  // Odd widths read 16 bytes from a chunk's first: the rows whose reads would pass the end of the
  // codes run from a copy with room behind it.
  std::vector<uint8_t> padded;
  const size_t row_bytes = w.row_bytes(), code_bytes = w.codes().size();
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.codes().data() + r * row_bytes;
    if (qmatmul::OddWidth(kBits) && (r + 1) * row_bytes + 16 > code_bytes) {
      padded.assign(row, row + row_bytes);
      padded.resize(row_bytes + 16);
      row = padded.data();
    }
    if (scaled) {
      w.RowScales(r, scales.data(), asym ? biases.data() : nullptr);
      if (plan.offset != 0)
        for (size_t g = 0; g < scales.size(); ++g) biases[g] = (asym ? biases[g] : 0.0f) + plan.offset * scales[g];
    }
    size_t t = 0;
    for (; t + 4 <= in.n_tokens; t += 4) RowTokens<K, kBits, 4>(d, args, lut, r, row, t, y, y_stride);
    for (; t < in.n_tokens; ++t) RowTokens<K, kBits, 1>(d, args, lut, r, row, t, y, y_stride);
  }
}

template <class D>
void DispatchKind(D d, const QuantizedTensor& w, const QuantInput& in, const Plan& p, size_t r0, size_t r1, float* y,
                  size_t ys) {
  switch (p.kind) {
    case CodeKind::kAffine:
      switch (p.bits) {
        case 2: return RunRows<CodeKind::kAffine, 2>(d, w, in, p, r0, r1, y, ys);
        case 3: return RunRows<CodeKind::kAffine, 3>(d, w, in, p, r0, r1, y, ys);
        case 4: return RunRows<CodeKind::kAffine, 4>(d, w, in, p, r0, r1, y, ys);
        case 5: return RunRows<CodeKind::kAffine, 5>(d, w, in, p, r0, r1, y, ys);
        case 6: return RunRows<CodeKind::kAffine, 6>(d, w, in, p, r0, r1, y, ys);
        case 7: return RunRows<CodeKind::kAffine, 7>(d, w, in, p, r0, r1, y, ys);
        default: return RunRows<CodeKind::kAffine, 8>(d, w, in, p, r0, r1, y, ys);
      }
    case CodeKind::kE2M3: return RunRows<CodeKind::kE2M3, 6>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kE3M2: return RunRows<CodeKind::kE3M2, 6>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kLut16:
      if (p.bits == 2) return RunRows<CodeKind::kLut16, 2>(d, w, in, p, r0, r1, y, ys);
      return RunRows<CodeKind::kLut16, 4>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kE4M3: return RunRows<CodeKind::kE4M3, 8>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kE5M2: return RunRows<CodeKind::kE5M2, 8>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kTable8: return RunRows<CodeKind::kTable8, 8>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kFp16: return RunRows<CodeKind::kFp16, 16>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kBf16: return RunRows<CodeKind::kBf16, 16>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kF32: return RunRows<CodeKind::kF32, 32>(d, w, in, p, r0, r1, y, ys);
    case CodeKind::kNone: return;
  }
}

void QuantDotRowsImpl(const QuantizedTensor& w, const QuantInput& in, size_t row_begin, size_t row_end, float* y,
                      size_t y_stride) {
  const Plan plan = qmatmul::PlanFor(w);
  const hn::ScalableTag<float> full;
  if (in.lanes == hn::Lanes(full)) return DispatchKind(full, w, in, plan, row_begin, row_end, y, y_stride);
  if (in.lanes == 8) return DispatchKind(hn::CappedTag<float, 8>(), w, in, plan, row_begin, row_end, y, y_stride);
  DispatchKind(hn::CappedTag<float, 4>(), w, in, plan, row_begin, row_end, y, y_stride);
}

size_t FusedLanesImpl(const QuantizedTensor& w) { return ChooseLanes(qmatmul::PlanFor(w)); }

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(QuantDotRowsImpl);
HWY_EXPORT(FusedLanesImpl);

bool HasFusedKernel(const QuantizedTensor& w) { return HWY_DYNAMIC_DISPATCH(FusedLanesImpl)(w) != 0; }

QuantInput PrepareQuantInput(const QuantizedTensor& w, const float* x, size_t n_tokens) {
  const qmatmul::Plan plan = qmatmul::PlanFor(w);
  const size_t cols = w.cols(), groups = plan.groups;
  QuantInput in;
  in.n_tokens = n_tokens;
  in.cols = cols;
  in.lanes = HWY_DYNAMIC_DISPATCH(FusedLanesImpl)(w);
  if (in.lanes == 0) return in;
  in.values.resize(n_tokens * cols);
  in.group_sums.assign(n_tokens * groups, 0.0f);
  const size_t planes = plan.planes, chunk = planes * in.lanes;
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* src = x + t * cols;
    float* dst = in.values.data() + t * cols;
    for (size_t g = 0; g < groups; ++g) {
      const size_t start = g * plan.group, end = std::min(cols, start + plan.group);
      const size_t vector_end = start + (end - start) / chunk * chunk;
      for (size_t c = start; c < vector_end; c += chunk)
        for (size_t j = 0; j < planes; ++j)
          for (size_t l = 0; l < in.lanes; ++l) dst[c + j * in.lanes + l] = src[c + l * planes + j];
      float sum = 0;
      for (size_t i = start; i < end; ++i) sum += src[i];
      std::copy(src + vector_end, src + end, dst + vector_end);
      in.group_sums[t * groups + g] = sum;
    }
  }
  return in;
}

void QuantDotRows(const QuantizedTensor& w, const QuantInput& in, size_t row_begin, size_t row_end, float* y,
                  size_t y_stride) {
  LOWBIT_CHECK(in.lanes != 0);  // PrepareQuantInput found no fused kernel: callers check HasFusedKernel
  HWY_DYNAMIC_DISPATCH(QuantDotRowsImpl)(w, in, row_begin, row_end, y, y_stride);
}

void QuantDotRowsRef(const QuantizedTensor& w, const float* x, size_t n_tokens, size_t row_begin, size_t row_end,
                     float* y, size_t y_stride) {
  const size_t cols = w.cols();
  const ScaleGrid grid = w.grid();
  const bool scaled = w.scheme().element->bits <= 8;
  std::vector<float> row(cols);
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* codes = w.codes().data() + r * w.row_bytes();
    for (size_t i = 0; i < cols; ++i) {
      const uint64_t cell = r / grid.cell_rows * grid.grid_cols + i / grid.cell_cols;
      const float scale = scaled ? w.Scale(cell) * w.tensor_scale() : 1.0f;
      row[i] = qmatmul::ScalarWeight(w, codes, i, scale) + (scaled ? w.Bias(cell) : 0.0f);
    }
    for (size_t t = 0; t < n_tokens; ++t) {
      double sum = 0;
      for (size_t i = 0; i < cols; ++i) sum += static_cast<double>(row[i]) * x[t * cols + i];
      y[t * y_stride + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace lowbit
#endif
