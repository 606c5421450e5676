// Checkpoints of quant_method "fp8", as vLLM's Fp8Config and transformers' FineGrainedFP8 read them:
// DeepSeek-V3/R1, Qwen3-*-FP8 and their kin (weight_block_size [128, 128]: F8_E4M3 `weight` with a
// `weight_scale_inv` per block, W = code * scale_inv) and the older per-tensor FP8 checkpoints
// (`weight_scale` and, with activation_scheme static, `input_scale`; in transformers' names, as Ministral 3's
// checkpoints have them, `weight_scale_inv` and `activation_scale`). Linears listed as not
// converted stay in 16 bits. Inputs run as vLLM quantizes them: FP8 per 1 x weight_block_size[0]
// group per call for block weights, per token (dynamic) or with input_scale (static) otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "core/json_util.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

struct Fp8MethodParams {
  uint32_t block_rows = 0, block_cols = 0;  // weight_block_size; 0: one scale per tensor
  bool static_inputs = false;               // activation_scheme "static": input_scale per linear
};

// quantization_config of quant_method fp8; Error naming the key for what vLLM would not run either
// (fmt other than e4m3, static inputs on block weights, a malformed weight_block_size).
Fp8MethodParams ParseFp8Method(const JsonView& quantization_config);

// Whether linear `prefix` is stored in FP8 (its weight is F8_E4M3; not-converted ones are 16-bit).
bool IsFp8MethodLinear(const SafetensorsModel& st, const std::string& prefix);

// Linear `prefix` [rows x cols]: its E4M3 bytes as codes, its scales as stored (fp32, bf16 or fp16).
QuantizedTensor ReadFp8MethodLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                                    const Fp8MethodParams& p);

// The input quantization vLLM applies in front of linear `prefix`.
InputQuant Fp8MethodInput(const SafetensorsModel& st, const std::string& prefix, const Fp8MethodParams& p);

}  // namespace lowbit
