// compressed-tensors' microscaled float formats (docs/formats.md 1.8 and 5.3): elements in groups along
// the input dimension, each group with an 8-bit scale.
//
//   "nvfp4-pack-quantized"  P.weight_packed U8 [N, K/2]   E2M1 codes, element 2k in the low nibble
//                           P.weight_scale F8_E4M3 [N, K/16], P.weight_global_scale F32 [1]
//   "mxfp4-pack-quantized"  P.weight_packed U8 [N, K/2],  P.weight_scale U8 [N, K/32] (E8M0 exponents)
//   "mxfp6-pack-quantized"  P.weight_packed U8 [N, 3K/4]  E2M3 codes, four in three bytes, little-endian
//                           P.weight_scale U8 [N, K/32]
//   "mxfp8-quantized"       P.weight F8_E4M3 [N, K],      P.weight_scale U8 [N, K/32]
//
// Each packed row is a lowbit row of the same scheme byte for byte (LSB-first codes that are the
// elements' bit patterns), and each scale byte a lowbit E8M0 / UE4M3 scale.
//
// NVFP4's fp32 global scale g is a divisor there (W = e2m1 * scale / g); vLLM's kernels multiply by
// 1 / g, and lowbit's tensor scale t is that multiplier. lowbit writes g = 1 / t and reads t = 1 / g:
// a round trip that keeps every bit, and vLLM's multiplier is t, because the quantizer chooses t as
// the reciprocal of an fp32 global scale (ChooseTensorScale; an arbitrary fp32 t comes back exactly
// only 86 % of the time). compressed-tensors' own decompression (scale / g) can differ from scale * t
// in the last bit of the fp32 block scale.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/json_util.h"
#include "io/checkpoint_folder.h"
#include "io/safetensors.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

inline constexpr std::string_view kNvfp4Format = "nvfp4-pack-quantized";

// The microscaled format weights of scheme `s` are written in (nvfp4 = fp4_e2m1:g16:scale=ue4m3:tscale,
// mxfp4, mxfp6_e2m3, mxfp8_e4m3), or nullopt when `s` is none of them.
std::optional<std::string> MicroscaledFormatOf(const QuantScheme& s);
bool IsMicroscaledFormat(std::string_view format);

// Appends P.weight_packed (P.weight for mxfp8), P.weight_scale and, for NVFP4, P.weight_global_scale.
void AddMicroscaledLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q);

// The lowbit scheme a config group of microscaled `format` describes; Error naming the key of the
// "weights" QuantizationArgs that does not fit the format (type, num_bits, group_size, symmetric).
QuantScheme MicroscaledScheme(const JsonView& weights, std::string_view format);

// Reads linear `prefix` [rows x cols] of scheme `s` (from MicroscaledScheme), validating every
// tensor's dtype and shape and every scale (no NaN codes, no negative E4M3 scales, a positive finite
// global scale).
QuantizedTensor ReadMicroscaledLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                      uint64_t cols, const QuantScheme& s);

}  // namespace lowbit
