// Bulk codecs: rows of codes <-> fp32, the work every quantizer and dequantizer does.
//
// Each operation has a scalar reference (`...Ref`, the source of truth, plain C++) and a SIMD
// version dispatched at run time to the best Highway target the CPU supports (AVX2, AVX-512,
// ...). Tests compare the two on every target this CPU can run.
//
// Codes are packed LSB-first: element i of a row occupies bits [i*b, (i+1)*b) of the row's bit
// stream, so 4-bit codes put element 2k in the low nibble of byte k (ggml's MXFP4/NVFP4
// split-halves order and bitsandbytes' high-nibble-first order are converted by exporters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/minifloat.h"

namespace lowbit {

// A row split into groups of `group` consecutive elements (the last may be shorter); group g
// decodes as value = table[code] * scale[g] + bias[g].
struct GroupedRow {
  size_t n = 0;
  size_t group = 0;
  const float* scale = nullptr;
  const float* bias = nullptr;  // nullptr = all zero
};

// Whether table[c] = table[0] + c for every code of `bits` bits: integer formats, whose codes can be
// converted to floats instead of looked up.
bool IsAffineTable(std::span<const float> table, int bits);

// Packed codes of `bits` (1..8) -> values through a 256-entry decode table. `affine` must be
// IsAffineTable(table, bits), computed once by the caller: such codes are converted, not gathered
// (the same values).
void DecodeRow(const uint8_t* packed, int bits, const float* table, bool affine, const GroupedRow& row, float* out);
void DecodeRowRef(const uint8_t* packed, int bits, const float* table, const GroupedRow& row, float* out);

// fp32 -> integer codes: code = clamp(round_half_even(x / scale[g] + pre[g]) + post[g], 0, qmax),
// one code per byte (pack afterwards). `pre` carries float zero-points, `post` integer ones.
struct IntEncodeParams {
  int qmax = 0;
  const float* pre = nullptr;   // nullptr = all zero
  const float* post = nullptr;  // nullptr = all zero
};
void EncodeIntRow(const float* x, const GroupedRow& row, const IntEncodeParams& p, uint8_t* codes);
void EncodeIntRowRef(const float* x, const GroupedRow& row, const IntEncodeParams& p, uint8_t* codes);

// fp32 -> MiniFloat codes (formats of at most 8 bits) of x / scale[g], saturating, RNE; one
// code per byte.
void EncodeMiniFloatRow(const MiniFloat& f, const float* x, const GroupedRow& row, uint8_t* codes);
void EncodeMiniFloatRowRef(const MiniFloat& f, const float* x, const GroupedRow& row, uint8_t* codes);

// fp16 / bf16 bulk conversions (RNE, NaN kept quiet, overflow to inf as IEEE).
void Fp32ToFp16Row(const float* x, size_t n, uint16_t* out);
void Fp16ToFp32Row(const uint16_t* x, size_t n, float* out);
void Fp32ToBf16Row(const float* x, size_t n, uint16_t* out);
void Bf16ToFp32Row(const uint16_t* x, size_t n, float* out);
// An affine decode map from fp16 scales and integer zero-points (one per byte, under `mask`), for
// codes read as code + offset: scales[i] = the fp16 value, biases[i] = (offset - zero_i) x scales[i].
void HalfScalesByteZeros(const uint16_t* halves, const uint8_t* zeros, uint8_t mask, float offset, size_t n,
                         float* scales, float* biases);

// Bit packing of one-code-per-byte arrays (b = 1..8), LSB-first.
size_t PackedBytes(size_t n, int bits);
void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* packed);
void UnpackCodes(const uint8_t* packed, size_t n, int bits, uint8_t* codes);
// Reads / overwrites the single code i of a packed stream.
uint32_t ReadCode(const uint8_t* packed, size_t i, int bits);
void WriteCode(uint8_t* packed, size_t i, int bits, uint32_t code);
// The same LSB-first stream held in 32-bit words that lie `stride` words apart, as GPTQ and
// compressed-tensors pack codes into int32 (stride > 1: a column of an input-major matrix). Values
// may straddle two words (3, 5, 6, 7 bits). OrWordCode ORs into words that start at zero.
void OrWordCode(uint32_t* words, size_t stride, size_t i, int bits, uint32_t code);
uint32_t ReadWordCode(const uint32_t* words, size_t stride, size_t i, int bits);

}  // namespace lowbit
