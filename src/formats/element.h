// Element formats: what one stored code means. A quantized value is
//   x = Decode(code) * scale + bias        (bias = -zero * scale for asymmetric integers)
// where the scale (and zero) come from the tensor's granularity (see quant/scheme.h).
//
// Integer codes are stored unsigned ("offset binary", as GPTQ and AWQ store them): a symmetric
// n-bit integer q in [-2^(n-1), 2^(n-1)-1] is stored as q + 2^(n-1), so symmetric and asymmetric
// tensors decode the same way, with an implicit zero of 2^(n-1) in the symmetric case.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "formats/minifloat.h"

namespace lowbit {

enum class ElementKind : uint8_t {
  kFloat,    // a MiniFloat bit pattern (fp32 is stored raw)
  kInt,      // unsigned offset-binary integer
  kCodebook, // index into a fixed table of levels (NF4, IQ4_NL), ascending
  kTernary,  // {-1, 0, +1} stored as 0, 1, 2 in 2 bits
  kMxInt8,   // two's complement int8 with an implied scale of 2^-6 (OCP MXINT8)
};

struct ElementFormat {
  std::string_view name;
  ElementKind kind;
  uint8_t bits;                        // stored bits per code
  const MiniFloat* minifloat;          // kFloat only; nullptr for fp32
  std::span<const float> levels = {};  // kCodebook only: value of each code, ascending
};

// The 16 NormalFloat4 levels of bitsandbytes (index -> value), exactly as published.
inline constexpr std::array<float, 16> kNF4Levels = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

// llama.cpp's IQ4_NL non-linear levels (kvalues_iq4nl), scaled by an fp16 block scale.
inline constexpr std::array<float, 16> kIq4nlLevels = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                       1,    13,   25,  38,  53,  69,  89,  113};

inline constexpr ElementFormat kElementFormats[] = {
    {"fp32", ElementKind::kFloat, 32, nullptr},
    {"fp16", ElementKind::kFloat, 16, &kFp16},
    {"bf16", ElementKind::kFloat, 16, &kBf16},
    {"fp8_e4m3", ElementKind::kFloat, 8, &kE4M3},
    {"fp8_e5m2", ElementKind::kFloat, 8, &kE5M2},
    {"fp6_e2m3", ElementKind::kFloat, 6, &kE2M3},
    {"fp6_e3m2", ElementKind::kFloat, 6, &kE3M2},
    {"fp4_e2m1", ElementKind::kFloat, 4, &kE2M1},
    {"int8", ElementKind::kInt, 8, nullptr},
    {"int7", ElementKind::kInt, 7, nullptr},
    {"int6", ElementKind::kInt, 6, nullptr},
    {"int5", ElementKind::kInt, 5, nullptr},
    {"int4", ElementKind::kInt, 4, nullptr},
    {"int3", ElementKind::kInt, 3, nullptr},
    {"int2", ElementKind::kInt, 2, nullptr},
    {"nf4", ElementKind::kCodebook, 4, nullptr, kNF4Levels},
    {"iq4_nl", ElementKind::kCodebook, 4, nullptr, kIq4nlLevels},
    {"ternary", ElementKind::kTernary, 2, nullptr},
    {"mxint8", ElementKind::kMxInt8, 8, nullptr},
};

const ElementFormat* FindElementFormat(std::string_view name);  // nullptr when unknown
const ElementFormat& IntElement(int bits);                      // bits in 2..8

// Offset that a symmetric integer code carries: 2^(bits-1) (0 for non-integers).
uint32_t SymmetricZero(const ElementFormat& e);

// The divisor that maps a group's absolute maximum onto the element grid: scale = amax / divisor.
// Floats: their max finite value. Symmetric ints: (2^n - 1) / 2, the GPTQ / compressed-tensors
// convention (the grid [-2^(n-1), 2^(n-1)-1] is centred on the range, so +amax clips by half a
// step). Codebooks: their largest |level| (NF4 1, IQ4_NL 127). Asymmetric ints use (max - min) / (2^n - 1) instead.
double ScaleDivisor(const ElementFormat& e);

// Value of each code, for codes of at most 8 bits: table[code]. Integer codes decode to their
// signed value when `symmetric`, else to the raw unsigned code (the tensor subtracts its zero).
void BuildDecodeTable(const ElementFormat& e, bool symmetric, std::span<float, 256> table);

// Encodes a value already divided by its scale. Integers: round-half-even(v) + zero, clamped to
// [0, 2^n - 1]; floats: MiniFloat RNE with saturation; codebooks: nearest level (ties to the
// lower index, as bitsandbytes for NF4); ternary: round and clamp to [-1, 1]; MXINT8: round(v * 64) clamped to
// [-127, 127] as the OCP reference does.
uint32_t EncodeElement(const ElementFormat& e, float scaled, uint32_t zero);

}  // namespace lowbit
