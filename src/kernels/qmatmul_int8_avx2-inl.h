// Pieces of the AVX2 integer-dot kernel (qmatmul_int8_avx2.cc): codes to byte levels (bit planes
// and level tables; codes that straddle bytes) and a row's scales and biases decoded in registers.
// Internal to kernels/; include only from a file compiled with these target attributes in use.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include "kernels/qmatmul_int8.h"
#include "quant/quantized_tensor.h"

#define LOWBIT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace lowbit::int8dot {

// Codes of 3, 5, 6 and 7 bits packed LSB first (code i at bit i * kBits), 32 at a time, one per
// byte. Code i of 8 lies within the two bytes from i * kBits / 8; a byte shuffle puts those in
// 16-bit lane i (8 codes, kBits bytes, per 128-bit lane), a multiply by 2^(16 - kBits - shift)
// moves the code to the lane's top bits (AVX2 has no variable 16-bit shift) and a shift by 16 -
// kBits brings it down. 6-bit codes (Q6_K, the output matrix of most K-quant mixes) go 4 to a
// 32-bit lane instead, 3 bytes each, and are moved to their bytes by constant shifts and masks:
// half the byte shuffles, which bound the general path. Reads 16 - kBits bytes past the 32 codes
// at most (rows are padded where that would leave the tensor).
template <int kBits>
class SpreadDecoder {
 public:
  LOWBIT_AVX2 SpreadDecoder() {
    alignas(32) uint8_t shuffle[32];
    alignas(32) uint16_t multiplier[16];
    for (int i = 0; i < 16; ++i) {
      const int bit = i % 8 * kBits;
      shuffle[2 * i] = static_cast<uint8_t>(bit / 8);
      shuffle[2 * i + 1] = static_cast<uint8_t>(bit / 8 + 1);
      multiplier[i] = static_cast<uint16_t>(1u << (16 - kBits - bit % 8));
    }
    shuffle_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(shuffle));
    multiplier_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(multiplier));
    if constexpr (kBits == 6)  // bytes 3j .. 3j + 2 to 32-bit lane j, its top byte zero
      shuffle_ = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                  0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  }

  LOWBIT_AVX2 __attribute__((always_inline)) __m256i Codes(const uint8_t* p) const {
    if constexpr (kBits == 6) {
      // 16 codes (12 bytes) per 128-bit lane; code k of lane j at bit 6k moves to bit 8k.
      const __m256i v = _mm256_shuffle_epi8(
          _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 12), reinterpret_cast<const __m128i*>(p)), shuffle_);
      const __m256i c01 = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0x3F)),
                                          _mm256_and_si256(_mm256_slli_epi32(v, 2), _mm256_set1_epi32(0x3F00)));
      const __m256i c23 = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(v, 4), _mm256_set1_epi32(0x3F0000)),
                                          _mm256_and_si256(_mm256_slli_epi32(v, 6), _mm256_set1_epi32(0x3F000000)));
      return _mm256_or_si256(c01, c23);
    }
    // Sixteen codes to 16-bit lanes, twice; packed to bytes they come back in lane order
    // [a low, b low, a high, b high], which one qword permute puts right.
    const __m256i packed = _mm256_packus_epi16(Words(p), Words(p + 2 * kBits));
    return _mm256_permute4x64_epi64(packed, 0xD8);
  }

 private:
  LOWBIT_AVX2 __attribute__((always_inline)) __m256i Words(const uint8_t* p) const {
    const __m256i bytes = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + kBits), reinterpret_cast<const __m128i*>(p));
    return _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(bytes, shuffle_), multiplier_), 16 - kBits);
  }

  __m256i shuffle_, multiplier_;
};

// The levels of plane p of 32 code bytes, as the multiply takes them: unsigned, or level - 128
// (wide).
template <int kBits, bool kLookup, bool kWide>
class PlaneDecoder {
 public:
  LOWBIT_AVX2 explicit PlaneDecoder(const Int8DotLayout& l) : mask_(_mm256_set1_epi8(static_cast<char>((1 << kBits) - 1))) {
    alignas(16) uint8_t table[16] = {};
    for (int c = 0; c < (1 << kBits) && c < 16; ++c) table[c] = static_cast<uint8_t>(l.level[c] ^ (kWide ? 0x80 : 0));
    table_ = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  }

  LOWBIT_AVX2 __attribute__((always_inline)) __m256i Plane(__m256i codes, int p) const {
    if constexpr (kBits == 8) {
      return kWide ? _mm256_xor_si256(codes, _mm256_set1_epi8(static_cast<char>(0x80))) : codes;
    } else {
      const __m256i c = _mm256_and_si256(p == 0 ? codes : _mm256_srli_epi16(codes, p * kBits), mask_);
      return kLookup ? _mm256_shuffle_epi8(table_, c) : c;
    }
  }

 private:
  __m256i mask_, table_;
};

// n <= 16 bytes from p into a vector, the rest zero: exact-width loads for whole vectors of groups,
// a copy only for a row's last groups (a copy into a buffer then a load of it stalled store
// forwarding, and cost as much as the dot on a Q4_0 row).
LOWBIT_AVX2 __attribute__((always_inline)) inline __m128i LoadBytes(const uint8_t* p, size_t n) {
  if (n >= 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (n == 8) return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  if (n == 4) {
    int32_t four;
    std::memcpy(&four, p, 4);
    return _mm_cvtsi32_si128(four);
  }
  alignas(16) uint8_t bytes[16] = {};
  std::memcpy(bytes, p, n);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(bytes));
}

// Row r's group scales (times the tensor scale and the layout's step) and biases (the offset, the
// zero-point or stored bias, and for wide levels the 128 taken off them, each times the scale),
// 8 groups at a time, for the storages GGUF files and lowbit's schemes use: fp16, bf16, fp32,
// E8M0 and UE4M3 scales, GGUF's i8 sub-scales under an fp16 super-block scale; integer, fp16, bf16
// and fp32 zero-points, Q4_1's fp16 biases, the K-quants' u8 mins under an fp16 super-block min.
// What RowScales decodes through the generic per-row path, which took 2/3 of a Q4_K row's time.
template <int kBits, bool kWide>
class RowScalesAvx2 {
 public:
  LOWBIT_AVX2 RowScalesAvx2(const QuantizedTensor& w, const Int8DotLayout& l)
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
        whole_supers_(type_ == ScaleType::kI8 && (per_super_ == 16 || per_super_ == 8) && groups_ % 8 == 0 &&
                      (zero_type_ == ZeroType::kNone || zero_type_ == ZeroType::kMin8)),
        factor_(w.tensor_scale() * l.step),
        offset_(l.offset + (kWide ? 128.0f : 0.0f)) {}

  // 8 lanes share a super-block when its group count is a multiple of 8 (the K-quants: 8 or 16);
  // integer zero-points are read 8 at a time from 2, 4 or 8-bit packing.
  bool Fits() const { return per_super_ % 8 == 0 && (zero_type_ != ZeroType::kInt || 8 % kBits == 0); }

  // The K-quants' sub-scales as integers (RowsAvx2's kIntScales): row r's i8 sub-scales, one per
  // group, and super-block k's fp16 scale times the tensor scale and step (what ForRow multiplies
  // the sub-scales by).
  bool SubScalesFit() const { return whole_supers_; }
  // Whether any group has a bias (Q8_0's two's complement codes, levels - 128 in the wide form, have none).
  bool HasBiases() const { return offset_ != 0 || zero_type_ != ZeroType::kNone; }
  const int8_t* SubScales(size_t r) const {
    return reinterpret_cast<const int8_t*>(scales_.data() + r / cell_rows_ * scale_row_bytes_);
  }
  LOWBIT_AVX2 float SuperScale(size_t r, size_t k) const {
    uint16_t half;
    std::memcpy(&half, supers_.data() + r / cell_rows_ * super_row_bytes_ + 2 * k, 2);
    return _cvtsh_ss(half) * factor_;
  }

  // use(g, n, scales, biases) for groups g .. g + n - 1 (n <= 8; lanes past n hold nothing of use).
  template <class Use>
  LOWBIT_AVX2 __attribute__((always_inline)) void ForRow(size_t r, Use&& use) const {
    const size_t grid_row = r / cell_rows_;
    const uint8_t* stored = scales_.data() + grid_row * scale_row_bytes_;
    const uint8_t* zeros = zeros_.data() + grid_row * zero_row_bytes_;
    const uint8_t* supers = supers_.data() + grid_row * super_row_bytes_;
    if (whole_supers_) {
      const bool mins = zero_type_ == ZeroType::kMin8;
      if (per_super_ == 16) return mins ? ForRowOfSupers<16, true>(stored, zeros, supers, use) : ForRowOfSupers<16, false>(stored, zeros, supers, use);
      return mins ? ForRowOfSupers<8, true>(stored, zeros, supers, use) : ForRowOfSupers<8, false>(stored, zeros, supers, use);
    }
    const __m256 factor = _mm256_set1_ps(factor_), offset = _mm256_set1_ps(offset_);
    if (type_ == ScaleType::kF16 && zero_type_ == ZeroType::kNone) {
      // Q8_0, Q4_0, Q5_0, IQ4_NL: the loop below without its two dispatches per 8 groups.
      for (size_t g = 0; g < groups_; g += 8) {
        const size_t n = std::min<size_t>(8, groups_ - g);
        const __m256 s = _mm256_mul_ps(_mm256_cvtph_ps(LoadBytes(stored + 2 * g, 2 * n)), factor);
        use(g, n, s, _mm256_mul_ps(s, offset));
      }
      return;
    }
    for (size_t g = 0; g < groups_; g += 8) {
      const size_t n = std::min<size_t>(8, groups_ - g);
      __m256 decoded;
      switch (type_) {
        case ScaleType::kF16: decoded = _mm256_cvtph_ps(LoadBytes(stored + 2 * g, 2 * n)); break;
        case ScaleType::kBF16: decoded = Bf16ToFp32(LoadBytes(stored + 2 * g, 2 * n)); break;
        case ScaleType::kF32: decoded = _mm256_castsi256_ps(Load32(stored + 4 * g, 4 * n)); break;
        case ScaleType::kE8M0: decoded = E8m0ToFp32(LoadBytes(stored + g, n)); break;
        case ScaleType::kUE4M3: decoded = Ue4m3ToFp32(LoadBytes(stored + g, n)); break;
        case ScaleType::kI8:  // d * sc, as ggml forms it
          decoded = _mm256_mul_ps(Super(supers, g), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(LoadBytes(stored + g, n))));
          break;
      }
      const __m256 s = _mm256_mul_ps(decoded, factor);
      __m256 bias = _mm256_mul_ps(s, offset);
      switch (zero_type_) {  // x = s * (code - zero): the bias -zero * s; or the bias as stored
        case ZeroType::kNone: break;
        case ZeroType::kInt: bias = _mm256_fnmadd_ps(IntZeros(zeros, g), s, bias); break;
        case ZeroType::kF32: bias = _mm256_fnmadd_ps(_mm256_castsi256_ps(Load32(zeros + 4 * g, 4 * n)), s, bias); break;
        case ZeroType::kF16: bias = _mm256_fnmadd_ps(_mm256_cvtph_ps(LoadBytes(zeros + 2 * g, 2 * n)), s, bias); break;
        case ZeroType::kBF16: bias = _mm256_fnmadd_ps(Bf16ToFp32(LoadBytes(zeros + 2 * g, 2 * n)), s, bias); break;
        case ZeroType::kBiasF16: bias = _mm256_add_ps(bias, _mm256_cvtph_ps(LoadBytes(zeros + 2 * g, 2 * n))); break;
        case ZeroType::kMin8: {  // -(dmin * m)
          const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(LoadBytes(zeros + g, n)));
          bias = _mm256_sub_ps(bias, _mm256_mul_ps(Super(supers + super_mins_at_, g), mins));
          break;
        }
      }
      use(g, n, s, bias);
    }
  }

 private:
  // ForRow for the K-quants (8 or 16 groups a super-block, whole vectors of 8 groups): no
  // per-vector dispatch, division or partial loads (as qmatmul_int8-inl.h's ForRowOfSupers).
  template <int kPer, bool kMins, class Use>
  LOWBIT_AVX2 __attribute__((always_inline)) void ForRowOfSupers(const uint8_t* stored, const uint8_t* zeros,
                                                                 const uint8_t* supers, Use&& use) const {
    const __m256 factor = _mm256_set1_ps(factor_), offset = _mm256_set1_ps(offset_);
    const uint8_t* mins = supers + super_mins_at_;
    for (size_t g = 0; g < groups_; g += 8) {
      const __m256 sub = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(stored + g))));
      const __m256 s = _mm256_mul_ps(_mm256_mul_ps(Half(supers + 2 * (g / kPer)), sub), factor);  // as ForRow rounds
      __m256 bias = _mm256_mul_ps(s, offset);
      if constexpr (kMins) {
        const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zeros + g))));
        bias = _mm256_sub_ps(bias, _mm256_mul_ps(Half(mins + 2 * (g / kPer)), m));
      }
      use(g, size_t{8}, s, bias);
    }
  }
  LOWBIT_AVX2 __attribute__((always_inline)) static __m256 Half(const uint8_t* at) {
    uint16_t half;
    std::memcpy(&half, at, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(half)));
  }

  LOWBIT_AVX2 __attribute__((always_inline)) static __m256i Load32(const uint8_t* p, size_t n) {
    if (n >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    alignas(32) uint8_t bytes[32] = {};
    std::memcpy(bytes, p, n);
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(bytes));
  }
  LOWBIT_AVX2 static __m256 Bf16ToFp32(__m128i halves) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
  }
  // As qmatmul_int8-inl.h's: 2^(e - 127) has e as its exponent field, but for e = 0 and 255.
  LOWBIT_AVX2 static __m256 E8m0ToFp32(__m128i codes) {
    const __m256i e = _mm256_cvtepu8_epi32(codes);
    __m256i bits = _mm256_slli_epi32(e, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(bits);
  }
  // The low 7 bits: exponent 1-15 normal, 0 subnormal (mantissa x 2^-9), 0x7F NaN.
  LOWBIT_AVX2 static __m256 Ue4m3ToFp32(__m128i codes) {
    const __m256i c = _mm256_and_si256(_mm256_cvtepu8_epi32(codes), _mm256_set1_epi32(0x7F));
    const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(c, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(0x1p-9f));
    __m256 v = _mm256_blendv_ps(normal, subnormal, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), c)));
    return _mm256_blendv_ps(v, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                            _mm256_castsi256_ps(_mm256_cmpeq_epi32(c, _mm256_set1_epi32(0x7F))));
  }
  // The fp16 super-block value of groups g..g + 7 (one super-block: Fits).
  LOWBIT_AVX2 __m256 Super(const uint8_t* row, size_t g) const { return Half(row + 2 * (g / per_super_)); }
  // Eight kBits-bit zero-points from group g, packed LSB first (2, 4 or 8 bits: 2, 4 or 8 bytes).
  LOWBIT_AVX2 __m256 IntZeros(const uint8_t* zeros, size_t g) const {
    const size_t at = g * kBits / 8;
    const __m128i bytes = LoadBytes(zeros + at, std::min<size_t>(kBits, zero_row_bytes_ - at));
    if constexpr (kBits == 8) {
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    } else {
      const __m256i shifts = _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
      const __m256i codes = _mm256_srlv_epi32(_mm256_set1_epi32(_mm_cvtsi128_si32(bytes)), shifts);
      return _mm256_cvtepi32_ps(_mm256_and_si256(codes, _mm256_set1_epi32((1 << kBits) - 1)));
    }
  }

  std::span<const uint8_t> scales_, zeros_, supers_;
  size_t scale_row_bytes_, zero_row_bytes_, super_row_bytes_, super_mins_at_, cell_rows_, groups_, per_super_;
  ScaleType type_;
  ZeroType zero_type_;
  bool whole_supers_;  // ForRowOfSupers applies
  float factor_, offset_;
};

}  // namespace lowbit::int8dot
