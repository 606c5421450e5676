// `lowbit inspect`: what a checkpoint on disk is, without loading its weights. Reads config.json /
// quantize_config.json / quant_config.json / hf_quant_config.json and the safetensors or GGUF
// headers (only tiny side tensors such as a GPTQ qzeros word or a compressed-tensors weight_shape
// are read from the mapped data), and reports:
//   - the format: lowbit's own, GPTQ v1/v2 (AutoGPTQ/GPTQModel), AWQ GEMM, compressed-tensors
//     (pack-quantized, int/float-quantized, naive, nvfp4/mxfp4-pack-quantized), FP8 (quant_method
//     fp8, per-tensor or block), ModelOpt FP8/NVFP4 (hf_quant_config.json), GPT-OSS's MXFP4 experts
//     (quant_method mxfp4), GGUF, or plain floats;
//   - every linear's scheme (bits, group, symmetric, act-order, zero points) and the layers the
//     config leaves unquantized;
//   - bits per weight: all tensor bytes x 8 / parameters (a quantized linear counts its logical
//     out x in weights; scales, zero points, g_idx and other side tensors count as bytes only);
//   - KV-cache scales (k_scale / v_scale in any of the spellings engines accept).
// The summary it builds feeds the kernel rules in plan/kernel_rules.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/kernel_rules.h"

namespace lowbit {

enum class CheckpointFormat : uint8_t {
  kDense,
  kLowbit,
  kGptq,
  kAwq,
  kCompressedTensors,
  kFp8,
  kModelOpt,
  kGguf,
  kMxfp4,  // quant_method "mxfp4": GPT-OSS's experts as MXFP4 blocks, everything else in 16 bits
};

struct LayerInfo {
  std::string name;    // module path, e.g. model.layers.0.self_attn.q_proj (GGUF: blk.0.attn_q)
  std::string scheme;  // human spelling: "int4 g128 sym act-order", "fp8_e4m3 block128x128", "Q4_K", "F16"
  std::string type;    // element type: "int", "fp8", "fp4", "float", or the GGUF type name
  int bits = 16;
  int group = 0;                            // -1 per-channel, 0 per-tensor / none, > 0 group size
  uint32_t block_rows = 0, block_cols = 0;  // 2-D block scales (FP8 block)
  bool symmetric = true;
  bool zero_points = false;
  bool act_order = false;
  bool quantized = false;
  bool ignored = false;         // a linear the quantization config leaves in full precision
  uint64_t rows = 0, cols = 0;  // logical [out, in]
  uint64_t experts = 0;         // > 0: a stack of this many [out, in] matrices, one per expert (GPT-OSS's experts)
  uint64_t params = 0, bytes = 0;
  double bits_per_weight() const { return params ? 8.0 * double(bytes) / double(params) : 0; }
};

struct KvScaleInfo {
  size_t tensors = 0;    // k/v scale tensors found
  size_t layers = 0;     // decoder layers that have at least one
  std::string spelling;  // e.g. "self_attn.k_scale", "self_attn.k_proj.output_scale"
  std::string declared;  // KV dtype the config declares ("fp8"), "" when none
};

struct CheckpointInfo {
  std::string path;
  CheckpointFormat format = CheckpointFormat::kDense;
  std::string format_name;                       // "GPTQ v1", "compressed-tensors pack-quantized", "GGUF v3", ...
  std::string details;                           // one line of config facts (checkpoint_format, activation scheme, ...)
  std::vector<std::string> config_ignored;       // modules_to_not_convert / ignore / ignored_layers / exclude_modules
  std::vector<LayerInfo> layers;                 // every 2-D weight and expert stack (quantized or not), in name order
  uint32_t n_layers = 0;                         // decoder layers seen in tensor names
  uint64_t params = 0, bytes = 0;                // whole checkpoint
  uint64_t linear_params = 0, linear_bytes = 0;  // the quantized linears only
  KvScaleInfo kv;
  QuantSummary summary;
  std::vector<std::string> notes;

  double bits_per_weight() const { return params ? 8.0 * double(bytes) / double(params) : 0; }
  double linear_bits_per_weight() const {
    return linear_params ? 8.0 * double(linear_bytes) / double(linear_params) : 0;
  }
};

// PATH: a checkpoint folder (config.json + *.safetensors, or a folder with one .gguf file), a
// .safetensors file or a .gguf file. Throws Error naming the file and field on anything it cannot
// read or that contradicts itself (a GPTQ qweight whose shape does not match bits x g_idx, ...).
CheckpointInfo InspectCheckpoint(const std::filesystem::path& path);

nlohmann::json CheckpointToJson(const CheckpointInfo& info);

}  // namespace lowbit
