// Pieces shared by the integer-dot kernels (qmatmul_int8.cc: decode and small batches;
// qgemm_int8.cc: prefill): the CPU check, scale decoding in registers and code spreading.
// Internal to kernels/; include only from a file compiled with these target attributes in use.
#pragma once

// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports inside the inlined intrinsics (_mm512_reduce_add_ps); the values are all written first.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // GCC's name only
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/qmatmul_int8.h"
#include "quant/quantized_tensor.h"

namespace lowbit::int8dot {

using Layout = Int8DotLayout;

// VBMI spreads 3/5/6/7-bit codes to bytes; every CPU with VNNI since Ice Lake (and Zen 4) has it.
inline bool CpuHasVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                          __builtin_cpu_supports("avx512vbmi");
  return has && CpuLevelAllowed(CpuLevel::kAvx512);
}

// What the kernels share beyond SIMD (qmatmul_int8.cc): the weight's layout, where input i of a
// row sits among the activations, a row's scales and biases, the activations' arrays.
std::optional<Layout> LayoutOf(const QuantizedTensor& w);
size_t ActivationSlot(const Layout& l, size_t i);
void RowScales(const QuantizedTensor& w, const Layout& l, size_t r, float* scales, float* biases);
Int8Activations EmptyActivations(const Layout& l, size_t cols, size_t n_tokens);
void AddToGroupSum(Int8Activations& a, const Layout& l, size_t t, size_t b, float scale, int sum);

#define LOWBIT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))

// int32 dot accumulators in the type vpdpbusd's builtin works in. Held as __m512i (64-bit lanes) in
// arrays across a loop, GCC 12 copied each one into another register before every vpdpbusd and
// back after it (two moves per dot: 16 per 8 dots in the attention tiles); typed as the builtin's
// own lanes, the casts around the intrinsic fold away and no copy is left.
using Int32x16 = __v16si;
LOWBIT_VNNI inline Int32x16 Dpbusd(Int32x16 acc, __m512i u8, __m512i s8) {
  return reinterpret_cast<Int32x16>(_mm512_dpbusd_epi32(reinterpret_cast<__m512i>(acc), u8, s8));
}
LOWBIT_VNNI inline __m512 ToFloats(Int32x16 sums) { return _mm512_cvtepi32_ps(reinterpret_cast<__m512i>(sums)); }

// Lane i: v[i]'s lanes reduced by `op` (AddPs, MaxPs), v overwritten. Four rounds of pairing: each
// round's even and odd lanes reduced halve the partial results per vector and double the vectors
// per register (all 16 in about 45 instructions, where 16 separate reductions take 128).
struct AddPs {
  LOWBIT_VNNI __m512 operator()(__m512 a, __m512 b) const { return _mm512_add_ps(a, b); }
};
struct MaxPs {
  LOWBIT_VNNI __m512 operator()(__m512 a, __m512 b) const { return _mm512_max_ps(a, b); }
};
template <class Op>
inline LOWBIT_VNNI __m512 ReduceEach16(__m512 (&v)[16], Op op) {
  alignas(64) static constexpr std::array<int32_t, 16> kEven = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  alignas(64) static constexpr std::array<int32_t, 16> kOdd = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
  const __m512i even = _mm512_load_si512(kEven.data()), odd = _mm512_load_si512(kOdd.data());
  for (size_t n = 16; n > 1; n /= 2)
    for (size_t i = 0; i < n / 2; ++i)
      v[i] = op(_mm512_permutex2var_ps(v[2 * i], even, v[2 * i + 1]), _mm512_permutex2var_ps(v[2 * i], odd, v[2 * i + 1]));
  return v[0];
}

// E8M0 scale codes to fp32: 2^(e - 127) has e itself as its exponent field, except e = 0 (2^-127,
// a subnormal) and e = 255 (NaN).
inline LOWBIT_VNNI __m512 E8m0ToFp32(__m128i codes) {
  const __m512i e = _mm512_cvtepu8_epi32(codes);
  __m512i bits = _mm512_slli_epi32(e, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_castsi512_ps(bits);
}

// UE4M3 scale codes (NVFP4) to fp32, as DecodeMiniFloat: the low 7 bits; exponent 1-15 normal,
// 0 subnormal (mantissa x 2^-9), 0x7F NaN.
inline LOWBIT_VNNI __m512 Ue4m3ToFp32(__m128i codes) {
  const __m512i c = _mm512_and_si512(_mm512_cvtepu8_epi32(codes), _mm512_set1_epi32(0x7F));
  __m512 v = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(c, 20), _mm512_set1_epi32(120 << 23)));
  v = _mm512_mask_mov_ps(v, _mm512_cmplt_epi32_mask(c, _mm512_set1_epi32(8)), _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(0x1p-9f)));
  return _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(0x7F)), _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}

// Cutting kBits-bit codes packed LSB-first into one code per byte, 64 at a time: qword k of a
// vpermb gathers the bytes of codes 8k.. (kSpread[0]), then byte i of a vpmultishiftqb takes the
// 8 bits from bit i % 8 * kBits (kSpread[1]). The first 16 entries serve 16 codes the same way.
template <int kBits>
inline constexpr auto kSpread = [] {
  std::array<std::array<uint8_t, 64>, 2> t{};
  for (int i = 0; i < 64; ++i) {
    t[0][i] = static_cast<uint8_t>(i / 8 * kBits + i % 8);
    t[1][i] = static_cast<uint8_t>(i % 8 * kBits);
  }
  return t;
}();

// Sixteen kBits-bit codes packed LSB-first from `packed` (at most `available` bytes there), one per byte.
template <int kBits>
inline LOWBIT_VNNI __m128i UnpackSixteen(const uint8_t* packed, size_t available) {
  const __mmask16 m = static_cast<__mmask16>((1u << std::min<size_t>(2 * kBits, available)) - 1);
  const __m128i bytes = _mm_maskz_loadu_epi8(m, packed);
  const __m128i gathered = _mm_permutexvar_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kSpread<kBits>[0].data())), bytes);
  return _mm_and_si128(_mm_multishift_epi64_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kSpread<kBits>[1].data())), gathered),
                       _mm_set1_epi8(static_cast<char>((1 << kBits) - 1)));
}

// Sixteen fp16 or bf16 values to fp32.
inline LOWBIT_VNNI __m512 HalvesToFp32(const uint8_t* bytes, __mmask16 m, bool bf16) {
  const __m256i bits = _mm256_maskz_loadu_epi16(m, bytes);
  return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)) : _mm512_cvtph_ps(bits);
}

// Row r's group scales and biases (offset and zero-point, times scale), 16 groups at a time, to
// use(g, mask, scales, biases) in registers, from every scale and zero-point storage: fp16, bf16
// and fp32 scales, E8M0 (MXFP4, MXFP6) and UE4M3 (NVFP4), GGUF's i8 sub-scales under an fp16
// super-block scale (K-quants); integer zero-points (AWQ-style asymmetric), fp32/fp16/bf16 ones,
// and GGUF's stored biases (Q4_1's fp16, the K-quants' u8 mins under an fp16 super-block min).
// The generic per-row decode (QuantizedTensor::RowScales) cost about 15 % of an int4 g128 row, its
// table lookups as much as the whole dot at MXFP4. Where the rows' bytes sit and how they decode
// is worked out once per call.
template <int kBits>
class RowScaleSource {
 public:
  LOWBIT_VNNI RowScaleSource(const QuantizedTensor& w, const Layout& l)
      : scales_(w.scale_bytes()),
        zeros_(w.zero_bytes()),
        supers_(w.super_bytes()),
        scale_row_bytes_(scales_.size() / w.grid().grid_rows),
        zero_row_bytes_(zeros_.size() / w.grid().grid_rows),
        super_row_bytes_(2 * w.supers_per_row()),
        super_mins_at_(w.grid().grid_rows * super_row_bytes_),
        cell_rows_(w.grid().cell_rows),
        groups_(l.groups),
        per_super_(w.scheme().super_groups()),
        type_(w.scheme().scale_type),
        zero_type_(w.scheme().asymmetric() ? w.scheme().zero_type : ZeroType::kNone),
        whole_supers_(type_ == ScaleType::kI8 && (per_super_ == 16 || per_super_ == 8) && groups_ % 16 == 0 &&
                      (zero_type_ == ZeroType::kNone || zero_type_ == ZeroType::kMin8)),
        factor_(_mm512_set1_ps(w.tensor_scale() * l.step)),
        offset_(_mm512_set1_ps(l.offset)) {
    // Lane i of 16 groups starting at a multiple of 16 lies in super-block g / per + i / per
    // (per dividing 16) or g / per (per a multiple of 16): LayoutOf admits only these.
    alignas(64) int32_t lane[16];
    for (int i = 0; i < 16; ++i) lane[i] = per_super_ && per_super_ < 16 ? i / static_cast<int>(per_super_) : 0;
    super_lane_ = _mm512_load_si512(lane);
  }

  // Scales and zeros live in their own arrays, a few hundred bytes a row at g32: the hardware
  // prefetcher missed them, and the first scale load of each row stalled (18% of int4 g32).
  LOWBIT_VNNI void Prefetch(size_t r) const {
    Prefetch(scales_, scale_row_bytes_, r);
    Prefetch(zeros_, zero_row_bytes_, r);
  }

  template <class Use>
  LOWBIT_VNNI __attribute__((always_inline)) void ForRow(size_t r, Use&& use) const {
    const size_t grid_row = r / cell_rows_;
    const uint8_t* stored = scales_.data() + grid_row * scale_row_bytes_;
    const uint8_t* zeros = zeros_.data() + grid_row * zero_row_bytes_;
    const uint8_t* supers = supers_.data() + grid_row * super_row_bytes_;
    if (whole_supers_) {
      const bool mins = zero_type_ == ZeroType::kMin8;
      if (per_super_ == 16) return mins ? ForRowOfSupers<16, true>(stored, zeros, supers, use) : ForRowOfSupers<16, false>(stored, zeros, supers, use);
      return mins ? ForRowOfSupers<8, true>(stored, zeros, supers, use) : ForRowOfSupers<8, false>(stored, zeros, supers, use);
    }
    for (size_t g = 0; g < groups_; g += 16) {
      const __mmask16 m = groups_ - g >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (groups_ - g)) - 1);
      __m512 decoded = _mm512_setzero_ps();
      switch (type_) {
        case ScaleType::kF16:
        case ScaleType::kBF16: decoded = HalvesToFp32(stored + 2 * g, m, type_ == ScaleType::kBF16); break;
        case ScaleType::kE8M0: decoded = E8m0ToFp32(_mm_maskz_loadu_epi8(m, stored + g)); break;
        case ScaleType::kUE4M3: decoded = Ue4m3ToFp32(_mm_maskz_loadu_epi8(m, stored + g)); break;
        case ScaleType::kF32: decoded = _mm512_maskz_loadu_ps(m, stored + 4 * g); break;
        case ScaleType::kI8:  // d * sc, as ggml forms it
          decoded = _mm512_mul_ps(SuperLanes(supers, g),
                                  _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, stored + g))));
          break;
      }
      const __m512 s = _mm512_mul_ps(decoded, factor_);
      __m512 bias = _mm512_mul_ps(s, offset_);
      switch (zero_type_) {  // x = s * (code - zero): the bias -zero * s; or the bias as stored
        case ZeroType::kNone: break;
        case ZeroType::kInt: {
          const size_t at = g * kBits / 8;
          const __m512 zero = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(UnpackSixteen<kBits>(zeros + at, zero_row_bytes_ - at)));
          bias = _mm512_fnmadd_ps(zero, s, bias);
          break;
        }
        case ZeroType::kF32: bias = _mm512_fnmadd_ps(_mm512_maskz_loadu_ps(m, zeros + 4 * g), s, bias); break;
        case ZeroType::kF16:
        case ZeroType::kBF16: bias = _mm512_fnmadd_ps(HalvesToFp32(zeros + 2 * g, m, zero_type_ == ZeroType::kBF16), s, bias); break;
        case ZeroType::kBiasF16: bias = _mm512_add_ps(bias, HalvesToFp32(zeros + 2 * g, m, false)); break;
        case ZeroType::kMin8: {  // -(dmin * m)
          const __m512 mins = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, zeros + g)));
          bias = _mm512_sub_ps(bias, _mm512_mul_ps(SuperLanes(supers + super_mins_at_, g), mins));
          break;
        }
      }
      use(g, m, s, bias);
    }
  }

 private:
  // ForRow for the K-quants (8 or 16 groups a super-block, whole vectors of 16 groups): the fp16
  // super-block scales and mins broadcast from scalars, with no masks and no per-vector dispatch on
  // the scale type. The generic loop cost these rows twice their dot products (Q2_K: 9.2 GB/s per
  // core in L2, 26 without it).
  template <int kPer, bool kMins, class Use>
  LOWBIT_VNNI __attribute__((always_inline)) void ForRowOfSupers(const uint8_t* stored, const uint8_t* zeros,
                                                                 const uint8_t* supers, Use&& use) const {
    const uint8_t* mins = supers + super_mins_at_;
    for (size_t g = 0; g < groups_; g += 16) {
      const __m512 sub = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(stored + g))));
      const __m512 s = _mm512_mul_ps(_mm512_mul_ps(SuperHalves<kPer>(supers, g), sub), factor_);  // as ForRow rounds
      __m512 bias = _mm512_mul_ps(s, offset_);
      if constexpr (kMins) {
        const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zeros + g))));
        bias = _mm512_sub_ps(bias, _mm512_mul_ps(SuperHalves<kPer>(mins, g), m));
      }
      use(g, __mmask16{0xFFFF}, s, bias);
    }
  }

  // SuperLanes for 16 or 8 groups a super-block: one fp16 value in all lanes, or one per 8 lanes.
  template <int kPer>
  static LOWBIT_VNNI __attribute__((always_inline)) __m512 SuperHalves(const uint8_t* row, size_t g) {
    uint16_t h[2];
    if constexpr (kPer == 16) {
      std::memcpy(h, row + g / 8, 2);
      return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h[0])));
    } else {
      std::memcpy(h, row + g / 4, 4);
      return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(h[1])), _mm_set1_epi16(static_cast<short>(h[0]))));
    }
  }

  LOWBIT_VNNI void Prefetch(std::span<const uint8_t> bytes, size_t per_row, size_t r) const {
    const size_t at = r / cell_rows_ * per_row;
    for (size_t i = 0; i < per_row && at + i < bytes.size(); i += 64) _mm_prefetch(reinterpret_cast<const char*>(&bytes[at + i]), _MM_HINT_T0);
  }

  // The fp16 super-block value of each of the 16 groups from g, from a grid row's values.
  LOWBIT_VNNI __attribute__((always_inline)) __m512 SuperLanes(const uint8_t* row, size_t g) const {
    const size_t first = g / per_super_, left = super_row_bytes_ / 2 - first;
    const __mmask16 m = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
    return _mm512_permutexvar_ps(super_lane_, HalvesToFp32(row + 2 * first, m, false));
  }

  std::span<const uint8_t> scales_, zeros_, supers_;
  size_t scale_row_bytes_, zero_row_bytes_, super_row_bytes_, super_mins_at_, cell_rows_, groups_, per_super_;
  ScaleType type_;
  ZeroType zero_type_;
  bool whole_supers_;  // ForRowOfSupers applies
  __m512 factor_, offset_;
  __m512i super_lane_;
};

// Byte levels of 64 codes at a time, in the activations' order (ActivationSlot): for 2/4/8 bits
// one bit plane of a 64-byte load, for other widths 64 codes of 8 * kBits bytes spread to one
// per byte (kSpread); level tables (kLookup) through a byte shuffle, two's complement 8-bit codes
// (kLookup at 8 bits) by flipping their sign bit.
template <int kBits, bool kLookup>
class LevelDecoder {
 public:
  static constexpr bool kPlanes = 8 % kBits == 0;
  static constexpr int kPer = kPlanes ? 8 / kBits : 1;  // planes per chunk
  static constexpr size_t kChunkBytes = kPlanes ? 64 : 8 * kBits;

  LOWBIT_VNNI explicit LevelDecoder(const Layout& l)
      : mask_(_mm512_set1_epi8(static_cast<char>((1 << kBits) - 1))),
        gather_bytes_(_mm512_loadu_si512(kSpread<kBits>[0].data())),
        spread_bits_(_mm512_loadu_si512(kSpread<kBits>[1].data())),
        // vpshufb looks up within each 128-bit lane, so its 16 levels repeat in all four.
        levels_(kBits == 8  ? _mm512_set1_epi8(static_cast<char>(0x80))
                : kBits <= 4 ? _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l.level.data())))
                             : _mm512_loadu_si512(l.level.data())) {}

  // Plane p of a chunk's 64 code bytes (2/4/8 bits).
  LOWBIT_VNNI __attribute__((always_inline)) __m512i Plane(__m512i codes, int p) const {
    if constexpr (kBits == 8) return Levels(codes);
    else return Levels(_mm512_and_si512(_mm512_srli_epi16(codes, p * kBits), mask_));
  }
  // The 64 codes of the chunk at `at` (other widths).
  LOWBIT_VNNI __attribute__((always_inline)) __m512i Spread(const uint8_t* at) const {
    return Levels(_mm512_and_si512(
        _mm512_multishift_epi64_epi8(spread_bits_, _mm512_permutexvar_epi8(gather_bytes_, _mm512_maskz_loadu_epi8((1ull << kChunkBytes) - 1, at))),
        mask_));
  }

 private:
  LOWBIT_VNNI __attribute__((always_inline)) __m512i Levels(__m512i codes) const {
    if constexpr (!kLookup) return codes;
    else if constexpr (kBits == 8) return _mm512_xor_si512(codes, levels_);  // two's complement codes
    else if constexpr (kBits <= 4) return _mm512_shuffle_epi8(levels_, codes);
    else return _mm512_permutexvar_epi8(codes, levels_);
  }

  __m512i mask_, gather_bytes_, spread_bits_, levels_;
};

// run.template operator()<kBits, kLookup, kSplit>() for the layout: its code width, whether its
// codes pass a level table, and its scale blocks per chunk (as LayoutOf admits them).
template <class Run>
void DispatchLayout(const Layout& l, Run&& run) {
  auto by_split = [&]<int kBits, bool kLookup>() {
    constexpr size_t kMaxSplit = (8 % kBits == 0 ? 512 / kBits : 64) / 16;  // blocks of 16 codes
    switch (l.chunk / l.block) {
      case 1: return run.template operator()<kBits, kLookup, 1>();
      case 2: return run.template operator()<kBits, kLookup, 2>();
      case 4: return run.template operator()<kBits, kLookup, 4>();
      case 8: if constexpr (kMaxSplit >= 8) return run.template operator()<kBits, kLookup, 8>(); break;
      case 16: if constexpr (kMaxSplit >= 16) return run.template operator()<kBits, kLookup, 16>(); break;
    }
    LOWBIT_CHECK(false);  // LayoutOf admits no other split
  };
  if (l.lookup) {
    switch (l.bits) {
      case 2: return by_split.template operator()<2, true>();
      case 4: return by_split.template operator()<4, true>();
      case 6: return by_split.template operator()<6, true>();
      case 8: return by_split.template operator()<8, true>();
    }
    LOWBIT_CHECK(false);  // LayoutOf admits lookups at these widths only
  }
  switch (l.bits) {
    case 2: return by_split.template operator()<2, false>();
    case 3: return by_split.template operator()<3, false>();
    case 4: return by_split.template operator()<4, false>();
    case 5: return by_split.template operator()<5, false>();
    case 6: return by_split.template operator()<6, false>();
    case 7: return by_split.template operator()<7, false>();
    default: return by_split.template operator()<8, false>();
  }
}

}  // namespace lowbit::int8dot
