// Internals of `lowbit inspect` shared by inspect.cc (config detection, GGUF, summary) and
// inspect_layers.cc (the per-layer walk over safetensors headers).
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "io/safetensors.h"
#include "plan/inspect.h"

namespace lowbit::inspect_detail {

// The quantization config a folder declares, after resolving where it lives.
struct QuantConfig {
  CheckpointFormat format = CheckpointFormat::kDense;
  nlohmann::json qc;  // quantization_config (GPTQ/AWQ/CT/FP8/lowbit) or hf_quant_config's "quantization"
  std::string where;  // "path/config.json: quantization_config", for messages
  bool experts_input_major = false;  // 3-D expert stacks are [E, in, out], applied as x W (GPT-OSS)
};

// What the walk saw of compressed-tensors config groups in use.
struct CtUse {
  std::set<std::string> formats;      // per-group formats ("pack-quantized", ...)
  std::set<std::string> activations;  // activation types of groups that quantize them: "int8", "float8", "float4"
  bool token_inputs = false;          // some group quantizes its inputs per token
};

// Walks every tensor of `st`: fills info.layers, params/bytes, KV scales and n_layers, checking
// each quantized linear's tensors against `cfg`. Errors name the file and tensor.
CtUse CollectSafetensors(const SafetensorsModel& st, const QuantConfig& cfg, CheckpointInfo& info);

}  // namespace lowbit::inspect_detail
