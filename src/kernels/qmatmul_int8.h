// Integer-dot decode kernel for weights whose code values are whole multiples of one step within
// a byte's range: int2..int8, and the level tables FP4 E2M1 (MXFP4, NVFP4), FP6 E2M3, IQ4_NL and
// ternary, whose codes become byte levels by one shuffle (exactly: value = step * (level + offset)),
// and NF4, whose levels are rounded to 1/127 of its largest (as IQ4_NL's are int8 in llama.cpp).
// The activations of the few tokens being decoded are quantized to int8 in blocks (one fp32 scale
// per weight group, or per step of codes when groups are larger, or per 256-input super-block
// for the K-quants, as llama.cpp quantizes activations to Q8_0 / Q8_K for its quantized dots)
// and multiplied with the unsigned weight levels by AVX-512 VNNI (vpdpbusd: 64 byte products per
// instruction), so a weight byte costs a fraction of an instruction instead of a convert and an
// fp32 FMA per code. 2/4/8-bit codes are taken one bit
// plane of a 64-byte load at a time; other widths are spread to one code per byte by VBMI (a byte
// permute and a multishift). Per block: int32 dot -> fp32, times weight scale x activation scale;
// the zero-point / offset of each group is applied once through the group's sum of activations.
//
// On CPUs with AVX2 but no VNNI (Zen 2/3, Haswell to Raptor Lake) the same activations meet the
// same codes (level tables of 16 entries and integers of every width) through vpmaddubsw /
// vpmaddwd on 32-byte halves (qmatmul_int8_avx2.cc), at every batch; the prefill GEMM
// (qgemm_int8.h) is VNNI's alone.
//
// Available when the CPU has AVX-512 VNNI and VBMI (Ice Lake, Zen 4 and later) and the weight's row
// length is a multiple of one step's codes (256 / 128 / 64 at 2 / 4 / 8 bits, 64 otherwise) and
// its group is 16 or larger and either divides that count or is a multiple of it (or one group
// per row). GGUF Q4_0, Q8_0, the K-quants, MXFP4 and IQ4_NL run here. Otherwise MatMul uses the
// fp32 fused kernel, or decodes rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/aligned.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// What the kernel needs to know of a weight: bits, the codes one step takes (chunk: a 64-byte
// load for 2/4/8 bits, 64 codes = 8 * bits bytes for the other widths), the scale block (group,
// or chunk when groups are larger: the activations' int8 block too), and the code values as
// bytes: table[c] = step * (level[c] + offset), level[c] in 0..255 (level[c] = c for integers).
struct Int8DotLayout {
  int bits = 0;
  size_t chunk = 0, block = 0, group = 0, groups = 0;
  float step = 1, offset = 0;
  bool lookup = false;  // level[c] != c: codes pass through a byte shuffle, or at 8 bits flip their sign
                        // bit (two's complement codes, MXINT8: level = code ^ 0x80)
  bool rounded = false;                // table[c] ~ step * (level[c] + offset) (NF4: see LayoutOf)
  // Consecutive blocks quantized with one activation scale (each block's entry in `scales` holds
  // it): a K-quant's super-block of 256, as llama.cpp's Q8_K, so that the prefill GEMM applies the
  // activation scale once per super-block rather than per 16- or 32-code sub-block.
  size_t shared_blocks = 1;
  std::array<uint8_t, 64> level = {};  // lookup only (<= 6 bits)
  bool planes() const { return 8 % bits == 0; }
  uint32_t Level(uint32_t code) const { return !lookup ? code : bits == 8 ? code ^ 0x80u : level[code]; }
  bool operator==(const Int8DotLayout&) const = default;
};

// Activations quantized for one weight: they are laid out for it, and carry its layout.
struct Int8Activations {
  Int8DotLayout layout;
  size_t n_tokens = 0, cols = 0;
  AlignedVector<int8_t> values;    // [n_tokens x cols]; each 64-byte load's inputs grouped by bit plane
  std::vector<float> scales;       // [n_tokens x cols / layout.block]
  std::vector<float> group_sums;   // [n_tokens x groups]: sum over the group of scale * value
};

bool HasInt8DotKernel(const QuantizedTensor& w);  // the CPU and the weight both qualify (VNNI or AVX2)
bool HasInt8GemmKernel(const QuantizedTensor& w);  // Int8GemmRows (qgemm_int8.h) too: VNNI
bool Int8DotKernelFits(const QuantizedTensor& w);  // the weight qualifies (whatever the CPU)

Int8Activations QuantizeActivationsInt8(const QuantizedTensor& w, const float* x, size_t n_tokens);
// Whether activations quantized for `a` serve `b` as they are: the same length and layout (scheme and
// code values), as for q, k and v of one recipe.
bool SameInt8Activations(const QuantizedTensor& a, const QuantizedTensor& b);
// Scalar reference: the same bytes and scales.
Int8Activations QuantizeActivationsInt8Ref(const QuantizedTensor& w, const float* x, size_t n_tokens);

void Int8DotRows(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride);
// Scalar reference: the same integer arithmetic, plain C++.
void Int8DotRowsRef(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                    size_t y_stride);

// The AVX2 forms, which the calls above take on CPUs without VNNI; named so that tests run them
// wherever AVX2 is. Every layout above but FP6 E2M3's (a 64-entry level table).
bool HasInt8DotKernelAvx2(const QuantizedTensor& w);
Int8Activations QuantizeActivationsInt8Avx2(const QuantizedTensor& w, const float* x, size_t n_tokens);
void Int8DotRowsAvx2(const QuantizedTensor& w, const Int8Activations& a, size_t row_begin, size_t row_end, float* y,
                     size_t y_stride);

}  // namespace lowbit
