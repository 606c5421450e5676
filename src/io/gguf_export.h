// Writes a model lowbit can open (a Hugging Face folder, a lowbit quantized folder, a GGUF or a
// llama2.c file) as a GGUF file llama.cpp runs: llama.cpp's converter metadata for the `llama`
// architecture (`qwen2` for Qwen2 models), its tensor names and the Q/K row permutation, and the
// tensor types of a llama-quantize file type (gguf_mix.h), encoded by gguf_quantize.h.
//
// Streaming: the header is written from the config alone, then one decoder block is read,
// encoded and written at a time, so the peak is one block in fp32 plus the embeddings (calibrated
// exports hold the whole model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_mix.h"
#include "io/model_loader.h"
#include "quant/gptq.h"

namespace lowbit {

struct GgufExportOptions {
  std::string type = "Q8_0";  // a GgufFileType name
  bool pure = false;          // every matrix in the base type (llama-quantize --pure)
  GgufTableTypes table_types;  // --token-embedding-type / --output-tensor-type
  std::string name;           // general.name; empty = the model folder's name
  // More keys, written after the model's own: the tokenizer's (tokenizer/gguf_vocab_export.h), a
  // recipe card.
  std::vector<GgufKeyValue> metadata;
  // Per GGUF tensor name, one importance weight per input column (an importance matrix).
  const std::map<std::string, std::vector<float>, std::less<>>* imatrix = nullptr;
  // Calibrated GGUF: token windows to calibrate GPTQ on the ggml grids (io/gguf_calibrate.h); empty =
  // llama-quantize's encoding. Calibration holds the whole model in fp32.
  std::vector<std::vector<int32_t>> calibration;
  GptqOptions gptq;
  // A quantized source linear whose grid a ggml type holds exactly (gguf_pack.h) keeps its codes
  // where the mix chooses that very type; with keep_source_grids, wherever the mix would choose
  // another (`quantize --save-as gguf:T`: the calibrated codes are the point).
  bool keep_source_grids = false;
  size_t threads = 0;  // 0 = all cores
  std::function<void(size_t done, size_t total, std::string_view tensor)> progress;
};

struct GgufExportedTensor {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<uint64_t> ne;
  uint64_t bytes = 0;
  bool repacked = false;  // the source's codes and scales were carried over exactly
  bool gptq = false;      // calibrated: GPTQ onto the type's grid
};

struct GgufExportResult {
  std::string architecture;  // general.architecture written
  uint32_t file_type = 0;    // general.file_type
  uint64_t file_bytes = 0;
  uint64_t weights = 0;      // elements of all tensors
  std::vector<GgufExportedTensor> tensors;
  double bits_per_weight() const { return weights ? 8.0 * static_cast<double>(file_bytes) / static_cast<double>(weights) : 0; }
};

// The general.architecture a GGUF export of config `c` writes ("llama", "qwen2", "phi3", ...); Error for an
// architecture lowbit does not export.
std::string GgufArchitectureOf(const ModelConfig& c);

// Consumes `model`: the embeddings and the output matrix are freed once written (not when
// calibrating), and read_layer's blocks are dropped one by one.
GgufExportResult ExportGguf(StreamedModel& model, const std::filesystem::path& out, const GgufExportOptions& options);

}  // namespace lowbit
