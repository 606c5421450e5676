// Quantized checkpoints: a Hugging Face-style folder that holds a quantized model exactly as lowbit
// keeps it in memory, so `lowbit ppl --model OUT` runs the same bits that were measured at
// quantization time.
//
//   OUT/model.safetensors   dense tensors (embeddings, norms, unquantized linears, biases) in the
//                           narrowest of BF16, F16 and F32 that holds their values exactly (a bf16
//                           source stays bf16; the round trip of the in-memory fp32 values is exact),
//                           and per quantized linear P (e.g. model.layers.0.self_attn.q_proj):
//       P.weight_packed       U8  [rows, row_bytes]   codes exactly as QuantizedTensor holds them
//       P.weight_scale        F32|F16|BF16 (U8 for e8m0 / ue4m3) [grid_rows, grid_cols]
//       P.weight_zero_point   asymmetric only: U8 [grid_rows, packed bytes] for integer zeros,
//                             F32|F16|BF16 [grid_rows, grid_cols] for float zeros
//       P.weight_global_scale F32 [1], schemes with a tensor scale (NVFP4). NOTE: lowbit's tensor
//                             scale MULTIPLIES (value = code * scale * global); compressed-tensors'
//                             NVFP4 weight_global_scale divides. Same name, opposite meaning.
//       P.weight_g_idx        I32 [cols] = column / group size, grouped schemes only
//       P.bias                F32 [rows], when the linear has a bias
//       P.outlier_columns     I32 [k], P.outlier_weight F32 [rows, k]: LLM.int8() columns kept in
//                             full precision (the packed weight is zero there); any linear
//       P.input_order         I32 [cols], act-order linears: the input column each stored column
//                             multiplies (packed columns, scales and g_idx follow the stored order)
//     __metadata__: "format": "pt", "lowbit.format_version": "1",
//                   "lowbit.scheme.<P>": scheme string (ParseScheme round trip)
//   OUT/config.json         the source config.json plus "quantization_config" (see below)
//   OUT/recipe.json         the recipe card, pretty printed
//   OUT/tokenizer.*, special_tokens_map.json, generation_config.json, ...  copied when present
//
// quantization_config follows the compressed-tensors schema (docs/formats.md section 5) where a
// scheme exists there, but its "format" is "lowbit-packed": our codes are bit-packed LSB-first
// per row in bytes (3/5/6/7-bit codes straddle bytes) with offset-binary integers, not
// compressed-tensors' int32 "pack-quantized" words, and zero-points / global scales differ too.
// So no compressed-tensors reader (vLLM, transformers) may load this folder as if it were theirs;
// a vLLM-loadable export is a separate interop issue. The "lowbit" sub-object lists every
// quantized linear with its exact scheme string, which is the only thing our loader reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_folder.h"  // CheckQuantizedModelTarget
#include "io/safetensors.h"
#include "model/weights.h"

namespace lowbit {

inline constexpr int kQuantizedCheckpointVersion = 1;

// Writes `model` as a quantized checkpoint folder at `out_dir`. config.json comes from
// `source_dir/config.json` (which must describe the same architecture); tokenizer files are copied
// from `source_dir`. The folder is assembled in the sibling `out_dir.tmp-<pid>` and renamed into
// place, so `out_dir` either appears complete or not at all. An existing non-empty `out_dir` (or a
// file of that name) is an Error naming it -- never overwritten; an existing empty directory is
// replaced (rename(2) allows that atomically). Throws Error on any failure, leaving nothing behind.
// `block_count` below n_layers writes only the first decoder blocks, as a model of that depth
// (num_hidden_layers in config.json says so): the finished part of an interrupted run.
void SaveQuantizedModel(const Model& model, const std::filesystem::path& out_dir,
                        const std::filesystem::path& source_dir, const nlohmann::json& recipe_card,
                        size_t block_count = SIZE_MAX);

// Whether a config.json is GPT-OSS as released (quantization_config.quant_method "mxfp4": its experts' MXFP4
// blocks, io/stacked_experts.h); its other linears are dense.
bool IsGptOssMxfp4(const nlohmann::json& config);

// True when dir/config.json carries quantization_config.lowbit. False when there is no
// config.json; throws Error if config.json is not valid JSON.
bool IsQuantizedCheckpoint(const std::filesystem::path& dir);

// The quantized linears a checkpoint folder declares, read from its config.json. Used by
// LoadHfModel: a linear listed here is loaded from P.weight_packed & co., everything else dense.
class QuantizedLinears {
 public:
  // Reads folder/config.json. No quantization_config, or a GPTQ / AWQ / compressed-tensors one (read
  // by io/engine_checkpoint.h): an empty set. Any other foreign quantization_config (fp8,
  // bitsandbytes, ...): Error saying that format is not supported yet, instead of a confusing
  // missing-tensor error later.
  static QuantizedLinears FromFolder(const std::filesystem::path& folder);

  bool empty() const { return schemes_.empty(); }
  bool Has(std::string_view prefix) const { return schemes_.find(prefix) != schemes_.end(); }
  const std::map<std::string, std::string, std::less<>>& schemes() const { return schemes_; }
  // The input (activation) quantization recorded for linear `prefix`, if any.
  std::optional<InputQuant> InputQuantOf(std::string_view prefix) const {
    const auto it = input_quant_.find(prefix);
    return it == input_quant_.end() ? std::nullopt : std::optional<InputQuant>(it->second);
  }

  // The online Hadamard block recorded for linear `prefix` (0 = none).
  uint32_t InputHadamardOf(std::string_view prefix) const {
    const auto it = input_hadamard_.find(prefix);
    return it == input_hadamard_.end() ? 0 : it->second;
  }
  // LLM.int8() full-precision columns of linear `prefix` ([rows x cols]) from P.outlier_columns
  // (I32 [k], ascending) and P.outlier_weight (F32 [rows, k]), when the config lists it.
  std::optional<OutlierColumns> LoadOutliers(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                             uint64_t cols) const;
  // The stored column order of act-order linear `prefix` (P.input_order I32 [cols], a permutation),
  // when the config lists it; empty otherwise.
  std::vector<uint32_t> LoadInputOrder(const SafetensorsModel& st, const std::string& prefix, uint64_t cols) const;

  // Checks that the safetensors agree with the config: every P listed has P.weight_packed and no
  // dense P.weight, every P.weight_packed is listed, and the per-file metadata (format version,
  // scheme strings) matches. Throws Error naming the file and tensor.
  void CheckTensors(const SafetensorsModel& st) const;

  // Loads linear `prefix` ([rows x cols] from the architecture) as a QuantizedTensor after
  // validating dtypes and shapes of every side tensor against the scheme's grid and row bytes.
  QuantizedTensor Load(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                       uint64_t cols) const;

 private:
  std::string config_path_;  // for messages
  bool engine_checkpoint_ = false;  // a GPTQ / AWQ / compressed-tensors folder: none of this applies
  std::map<std::string, std::string, std::less<>> schemes_;  // prefix -> scheme string
  std::map<std::string, InputQuant, std::less<>> input_quant_;
  std::map<std::string, uint32_t, std::less<>> input_hadamard_;
  std::map<std::string, uint64_t, std::less<>> outlier_counts_;
  std::map<std::string, uint64_t, std::less<>> order_lengths_;
};

}  // namespace lowbit
