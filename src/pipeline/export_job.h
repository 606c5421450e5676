// A model written for another engine as one library call: a GGUF file llama.cpp runs (any type or
// llama-quantize mix, with an importance matrix or GPTQ calibration, io/gguf_export.h), or a GPTQ /
// AWQ / compressed-tensors folder vLLM and transformers load (io/engine_export.h). `lowbit export` and
// `lowbit.export()` are two front doors to RunExportJob.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/model_loader.h"

namespace lowbit {

struct ExportJob {
  std::string model, out;
  std::string to;  // empty or "gguf": a .gguf file; gptq, awq, compressed-tensors: a folder
  // GGUF: the file type or mix (Q4_K_M, ...), --pure, the tokenizer and name it carries, and
  // either an importance matrix or a calibration text (GPTQ onto the type's grid).
  std::string type = "Q8_0", tokenizer, name, imatrix, calib;
  // llama-quantize's --token-embedding-type / --output-tensor-type (empty: the mix's choice).
  std::string token_embedding_type, output_tensor_type;
  bool pure = false;
  size_t calib_samples = 128, calib_len = 256;
  uint64_t seed = 0;
  double damp = 0.01;
  // Engine folders: the checkpoint format (gptq or gptq_v2 for --to gptq), the RTN scheme for a
  // float source, and the largest safetensors shard.
  std::string format, scheme, max_shard = "5G";
  // `lowbit convert`: the scheme a quantized linear the engine format cannot hold is quantized again
  // with (EngineExportOptions::requantize); for GGUF, every quantized linear a ggml type holds keeps
  // its codes whatever the mix would choose.
  std::string requantize;
  bool keep_source_grids = false;
  size_t threads = 0;
  LoadOptions load;
  // (done, total, tensor or "") as the export goes; total is known once the output is planned.
  std::function<void(size_t, size_t, std::string_view)> progress;
};

// Writes job.out atomically and returns what `lowbit export --json` prints: for GGUF out, type,
// architecture, file_type, file_bytes, weights, bits_per_weight and every tensor's name, type, ne
// and bytes; for engine folders out, quant_method, format, the linears quantized and left dense,
// quantized_weights / _bytes, bits_per_weight, file_bytes, shards and the linears changed by
// `requantize` (linear, reason, to). Bad options fail before the
// model is read, naming the option.
nlohmann::json RunExportJob(const ExportJob& job);

}  // namespace lowbit
