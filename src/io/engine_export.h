// Exports a model as a checkpoint the serving engines load: GPTQ (v1 or v2 zeros), AWQ GEMM or
// compressed-tensors (pack-quantized integers, int-quantized W8A8, float-/naive-quantized FP8), each a Hugging Face folder (safetensors shards of at most
// 5 GB with model.safetensors.index.json, config.json with the engine's quantization_config,
// tokenizer and generation files, and lowbit's recipe card as recipe.json).
//
// Quantized linears are repacked, never re-quantized: the codes lowbit measured are the codes the
// engine serves. Dense linears of a float source are first quantized with `scheme` (RTN) when one
// is given; linears left dense are listed as unquantized (GPTQ "dynamic" exclusions, AWQ
// modules_to_not_convert, compressed-tensors "ignore"). Anything the format cannot express exactly
// (element format, bits, granularity, scale or zero type, shapes that do not pack, activation
// quantization outside compressed-tensors' W8A8 forms, online Hadamard rotations, LLM.int8()
// columns) is an Error naming the linear and the field, before anything is written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_folder.h"
#include "io/model_loader.h"
#include "quant/scheme.h"

namespace lowbit {

enum class EngineFormat { kGptq, kAwq, kCompressedTensors };

// "gptq", "awq", "compressed-tensors" (case-insensitive); Error listing them otherwise.
EngineFormat ParseEngineFormat(std::string_view name);
std::string_view EngineFormatName(EngineFormat f);

// Throws Error naming the field when `scheme` has no exact form in format `f` (checked before any
// quantization work: bits, granularity, scale and zero types).
void CheckEngineScheme(EngineFormat f, const QuantScheme& scheme, const std::string& where);

// Why linear `prefix` cannot be written in format `f` as it is stored (the Error the export would
// throw, naming the field), or nullopt when its codes would go out unchanged.
std::optional<std::string> EngineLinearMismatch(EngineFormat f, bool gptq_v2, const Linear& linear,
                                                const std::string& prefix);

struct EngineExportOptions {
  EngineFormat format = EngineFormat::kCompressedTensors;
  bool gptq_v2 = false;                // GPTQ: true zero points, checkpoint_format "gptq_v2"
  std::optional<QuantScheme> scheme;   // quantize the dense block linears with RTN first
  // Lossy conversion (`lowbit convert --scheme`): a quantized block linear the format cannot hold as
  // stored is quantized again with this scheme (RTN, from its values in input order), and a quantized
  // lm_head it cannot hold is stored dense; each is listed in the result with the reason. Without it
  // such a linear is an Error.
  std::optional<QuantScheme> requantize;
  uint64_t max_shard_bytes = kDefaultShardBytes;
  std::function<void(size_t done, size_t total)> progress;  // per block
};

// A linear written in another form than its source's, and why (EngineLinearMismatch's message).
struct ChangedLinear {
  std::string prefix, reason;
  std::string to;  // the scheme it was quantized again with, or "dense"
};

struct EngineExportResult {
  std::string quant_method;  // the quantization_config's, e.g. "gptq"
  std::string format;        // its checkpoint format, e.g. "gptq_v2", "gemm", "pack-quantized"
  size_t quantized_linears = 0, dense_linears = 0, shards = 0;
  uint64_t quantized_weights = 0, quantized_bytes = 0;  // the quantized linears' packed tensors
  uint64_t file_bytes = 0;                              // all safetensors shards
  std::vector<ChangedLinear> changed;                   // options.requantize's work
  double bits_per_weight() const {
    return quantized_weights ? 8.0 * static_cast<double>(quantized_bytes) / static_cast<double>(quantized_weights) : 0;
  }
};

// Writes `model` (Hugging Face folder source `source_dir`, which provides config.json and the side
// files) to `out_dir`, all or nothing. `recipe_card` is written as recipe.json unless null.
EngineExportResult ExportEngineCheckpoint(StreamedModel& model, const std::filesystem::path& source_dir,
                                          const std::filesystem::path& out_dir, const nlohmann::json& recipe_card,
                                          const EngineExportOptions& options);

}  // namespace lowbit
