// The ggml K-quant (and IQ4_XS) super-block encoders of gguf_quantize.h split into their three
// phases, for quantizers that choose the codes themselves on ggml's grid (GPTQ: the scales of a
// super-block are fixed from the weights when the first of its 256 columns is reached, the
// columns are then coded one at a time as error feedback changes them, and the block is written
// at the end):
//
//   1. ChooseKQuantScales: the super-block's stored scales, exactly as the encoder picks them;
//   2. KQuantCode: one element's integer code under those scales, exactly as the encoder's final
//      pass computes it;
//   3. PackKQuantBlock: the block bytes from the scales and the 256 codes.
//
// Applied to the same 256 values, 1 + 2 + 3 give the bytes QuantizeGgufRow gives for that
// super-block, with and without importance weights (QuantizeGgufRow runs these very phases).
// Same build constraint as gguf_quantize.h: no floating-point contraction, no -ffast-math.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace lowbit {

// True for the types this file covers: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool HasKQuantGrid(uint32_t ggml_type);

// The quantized scales of one super-block (256 elements) as the block stores them.
//
// Sub-block j (16 elements for Q2_K, Q3_K, Q6_K; 32 for Q4_K, Q5_K, IQ4_XS) decodes its integer
// code q as value(j, q): scale(j) * q + bias(j) for the K-quants, with q in 0..3 (Q2_K), -4..3
// (Q3_K), 0..15 (Q4_K), 0..31 (Q5_K), -32..31 (Q6_K); scale(j) * kvalues_iq4nl[q] for IQ4_XS
// (q an index 0..15). All in fp32 exactly as ggml's dequantize_row_* computes it, so value()
// is bit for bit what DequantizeGgufRow gives for the packed block.
struct KQuantScales {
  uint32_t type = 0;         // ggml type id
  uint16_t d = 0, dmin = 0;  // fp16 bits of the super-scale and (Q2_K, Q4_K, Q5_K) the super-min
  // Per-sub-block scale codes, as the dequantizer multiplies d by them: Q2_K 0..15, Q3_K -32..31,
  // Q4_K / Q5_K 0..63, Q6_K -128..127, IQ4_XS -32..31. m: the min codes (Q2_K 0..15, Q4_K / Q5_K
  // 0..63), bias(j) = -dmin * m[j]. 16 used for Q2_K / Q3_K / Q6_K, 8 for Q4_K / Q5_K / IQ4_XS.
  // (One degenerate exception: ggml's weighted Q4_K path writes a wrapped, unmasked scale or min
  // byte when make_qp_quants meets a negative sub-block scale; then sc[j] / m[j] for j < 4 keep
  // that byte whole and the dequantizer, like scale() / bias(), uses its low 6 bits.)
  std::array<int, 16> sc{}, m{};
  // IQ4_XS only: the fp32 super-scale ggml picks the indices with (it does so before rounding
  // it to the fp16 d it stores).
  float d_search = 0;
  // The codes the scale search chose per element. ggml's final pass keeps them in sub-blocks
  // whose scale(j) is 0 (where every code decodes to bias(j)); KQuantCode returns them there.
  std::array<int8_t, 256> search_codes{};

  int sub() const;         // elements per sub-block: 16 or 32
  int sub_blocks() const;  // 256 / sub()
  float scale(int j) const;
  float bias(int j) const;
  float value(int j, int q) const;
};

// Phase 1: the scale choice the encoder makes for the super-block x256. importance: empty (the
// quantize_row_*_ref path; IQ4_XS: its unweighted search) or 256 weights, the super-block's
// slice of the importance row (the weighted quantize_*_impl path). Throws Error for other types
// and other importance sizes.
KQuantScales ChooseKQuantScales(uint32_t ggml_type, const float* x256, std::span<const float> importance);

// Phase 2: the code of element i (0..255, in sub-block i / s.sub()) when its value is x: ggml's
// nearest_int((x + dmin * m) / (d * sc)) or nearest_int(x / (d * sc)) clamped to the code range,
// with d * sc formed in fp32 first (IQ4_XS: the nearest level of x / (d_search * sc)); the
// search's code in sub-blocks whose scale is 0. Only that last case depends on i. Throws Error
// for i outside 0..255.
int KQuantCode(const KQuantScales& s, int i, float x);

// Phase 3: the block bytes (the type's block size) from the scales and the 256 codes q256 in the
// ranges above. Throws Error for a code or a scale code out of range.
void PackKQuantBlock(const KQuantScales& s, const int* q256, std::byte* block);

}  // namespace lowbit
