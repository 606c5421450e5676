// Reads the engines' quantized checkpoints, lowbit's exports or anyone's: GPTQ (v1 / v2 zeros),
// AWQ GEMM, compressed-tensors (pack-quantized, int-quantized W8A8, float- and naive-quantized FP8)
// and quant_method fp8 (block or per-tensor FP8: io/fp8_method.h). Each quantized linear is repacked at load into a
// QuantizedTensor (no fp32 copy of the matrix), so ppl, compare, generate, bench and inspect run
// them through lowbit's fast kernels.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/fp8_method.h"
#include "io/gptq_awq.h"
#include "io/safetensors.h"
#include "model/kv_calibration.h"
#include "model/weights.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// True when `quantization_config` names a format this reader takes (quant_method gptq, awq,
// compressed-tensors or fp8), so that the lowbit-format reader leaves the folder to this one.
bool IsEngineQuantizationConfig(const nlohmann::json& quantization_config);

class EngineLinears {
 public:
  // The config of `folder` (config.json's quantization_config, or quantize_config.json /
  // quant_config.json beside it); nullopt when it has none of these formats. Error naming the key
  // for variants lowbit cannot run (GPTQ marlin / per-module overrides, AWQ gemv, compressed-tensors
  // formats lowbit does not read).
  static std::optional<EngineLinears> FromFolder(const std::filesystem::path& folder);

  std::string_view quant_method() const { return method_; }
  const std::string& config_path() const { return config_path_; }
  // Whether any tensor of `st` belongs to a quantized linear of this format.
  bool AnyQuantized(const SafetensorsModel& st) const;
  // Whether linear `prefix` is stored quantized (its packed tensor is in the checkpoint).
  bool Has(const SafetensorsModel& st, std::string_view prefix) const;
  // The tensor suffixes a quantized linear may have (for the consistency check).
  const std::vector<std::string>& suffixes() const { return suffixes_; }
  // Linear `prefix` [rows x cols], with its stored column order when the checkpoint is act-order
  // (GPTQ desc_act, compressed-tensors actorder "group").
  OrderedTensor Load(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols) const;
  // The quantized input of linear `prefix` (compressed-tensors W8A8: int8 / fp8 per token or per tensor).
  std::optional<InputQuant> InputQuantOf(const SafetensorsModel& st, const std::string& prefix) const;

 private:
  struct Group {  // a compressed-tensors config group
    std::string format;  // pack-quantized, int-quantized, float-quantized or naive-quantized
    std::vector<std::string> targets;
    nlohmann::json weights, input;  // input: null when the inputs are not quantized
    std::string path, input_path;   // "quantization_config.config_groups.group_0.weights", for messages
  };
  const Group& GroupOf(std::string_view prefix) const;

  std::string method_;  // "gptq", "awq", "compressed-tensors" or "fp8"
  std::string config_path_;
  std::vector<std::string> suffixes_;
  QweightParams qweight_;       // GPTQ / AWQ
  Fp8MethodParams fp8_;         // quant_method fp8
  std::vector<Group> groups_;   // compressed-tensors
  std::vector<std::string> ignore_;
};

// The tensor names, after "model.layers.N.self_attn.", of a K ('k') or V ('v') cache scale: every spelling
// vLLM's maybe_remap_kv_scale_name accepts (formats.md 6.2), the deprecated kv_scale (both K and V) last.
std::vector<std::string> KvScaleSuffixes(char which);

// The FP8 KV-cache scales an engine checkpoint carries (x = fp8 value * scale, lowbit's convention too):
// - compressed-tensors with a `kv_cache_scheme` (8-bit float, per tensor): every layer's K and V scale,
//   as llm-compressor writes them; a missing one is an error naming the file and tensor;
// - quant_method fp8: whatever the layers hold, as vLLM's Fp8KVCacheMethod takes them (one of the two
//   serves both, none is 1.0); nullopt when no layer holds one.
// nullopt for every other checkpoint. Error naming the key for other schemes, the tensor for a bad scale.
std::optional<KvScales> ReadCheckpointKvScales(const std::filesystem::path& folder, uint32_t n_layers);

}  // namespace lowbit
