// compressed-tensors (llm-compressor's checkpoint format, loaded by vLLM and transformers),
// docs/formats.md section 5. lowbit writes and reads the "pack-quantized" format:
//
//   P.weight_packed     I32 [N, ceil(K*b/32)]  offset-binary codes, a dense LSB-first bitstream per
//                                              row (compressed-tensors >= 0.17 packing: 3/5/6/7-bit
//                                              values straddle words; 1/2/4/8-bit never do)
//   P.weight_scale      scale dtype [N, groups] (channel: [N, 1]; tensor: [1])
//   P.weight_zero_point I32 [ceil(N*b/32), groups], asymmetric only: offset-binary zero points
//                                              packed the same way along the output dimension
//   P.weight_shape      I64 [2] = {N, K}
//
// A lowbit integer code is compressed-tensors' stored value (q + 2^(b-1)), byte for byte: each
// packed row is lowbit's row padded to whole int32 words.
//
// Weights with quantized inputs (W8A8, SmoothQuant's output) and FP8 weights are stored unpacked:
//   "int-quantized"   P.weight I8 [N, K] (signed: lowbit's code - 128), int8 inputs
//   "float-quantized" P.weight F8_E4M3 [N, K] (lowbit's codes), fp8 inputs
//   "naive-quantized" P.weight F8_E4M3 [N, K], FP8 weight-only
// with P.weight_scale [N, 1] / [1] / [groups] / [blocks] and, for static per-tensor inputs,
// P.input_scale F32 [1]. Per-token inputs are dynamic (no tensor).
//
// NVFP4 and the MX formats (nvfp4-pack-quantized, mxfp4-/mxfp6-pack-quantized, mxfp8-quantized):
// io/compressed_tensors_mx.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/json_util.h"
#include "io/checkpoint_folder.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "quant/column_order.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// The version of compressed-tensors whose packing lowbit writes (recorded as "version").
inline constexpr std::string_view kCompressedTensorsVersion = "0.20.1";

// compressed-tensors QuantizationArgs for a weight scheme (formats.md 5.1), or nullopt when the
// scheme has no counterpart there (NF4, ternary, FP6, FP8 E5M2, MXINT8, float zero-points,
// per-token weights, unscaled casts).
std::optional<nlohmann::ordered_json> CompressedTensorsArgs(const QuantScheme& s);

// The compressed-tensors format a linear of these weights and inputs is written in, as
// compressed-tensors itself picks it; Error naming the field when it has none (float zero points,
// NF4, FP6 E3M2, fp4 with float scales, asymmetric W8A8, MX activations, NVFP4 activations on other
// weights or without a calibrated tensor scale, inputs other than int8 / fp8 per token or per tensor, ...).
std::string CompressedTensorsFormatOf(const QuantScheme& weights, const std::optional<InputQuant>& input,
                                      const std::string& where);
// QuantizationArgs of a linear's quantized input (always symmetric; token = dynamic; NVFP4 as
// compressed-tensors' NVFP4 preset, with P.input_global_scale = 1 / the static tensor scale).
nlohmann::ordered_json CompressedTensorsInputArgs(const InputQuant& input);
// Appends the tensors of linear `prefix` in the format CompressedTensorsFormatOf names.
void AddCompressedTensorsLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q,
                                const std::optional<InputQuant>& input);

// Throws Error naming the field when `scheme` cannot be written as pack-quantized (integer codes of
// 1..8 bits, tensor / channel / group scales in f32, f16 or bf16, integer zero points).
void CheckPackQuantized(const QuantScheme& scheme, const std::string& where);

// Appends P.weight_packed, P.weight_scale, P.weight_zero_point (asymmetric) and P.weight_shape.
void AddPackQuantizedLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q);

// The lowbit scheme a pack-quantized config group's "weights" QuantizationArgs describe, given the
// dtype its weight_scale is stored in. Throws Error naming the key for anything lowbit cannot run
// (float types here, block / token strategies).
QuantScheme PackQuantizedScheme(const JsonView& weights, DType scale_dtype);

// Reads linear `prefix` [rows x cols] of scheme `s` (from PackQuantizedScheme), validating every
// tensor's dtype and shape (either packing of 3/5/6/7-bit values, told apart by the row width). A
// weight_g_idx that is not column / group (actorder "group", which llm-compressor wrote until
// compressed-tensors 0.20 removed it) loads as a stored column order.
OrderedTensor ReadPackQuantizedLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                        uint64_t cols, const QuantScheme& s);

// The same for the unpacked formats (int-quantized, float-quantized, naive-quantized): 8-bit int or
// fp8_e4m3 weights, tensor / channel / group / block scales.
QuantScheme UnpackedScheme(const JsonView& weights, DType scale_dtype);
QuantizedTensor ReadUnpackedLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                                   const QuantScheme& s);
// The quantized input a config group's "input_activations" describe (int8 / fp8, symmetric, per token
// dynamic or per tensor static with P.input_scale; NVFP4, tensor_group 16 "local" with
// P.input_global_scale); Error naming the key otherwise.
InputQuant CompressedTensorsInput(const JsonView& args, const SafetensorsModel& st, const std::string& prefix);

}  // namespace lowbit
