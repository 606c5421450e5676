// What every front end (the CLI, the Python package) does before running a model: loading it with
// its tokenizer, choosing the KV cache, reading text and sampling calibration windows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/model_loader.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {

// A KV cache dtype name (fp32, fp16, fp8_e4m3, ...) for the model at `model_path`. FP8 uses static
// scales from `scales_file`, else from the model's kv_cache_scales.json (lowbit calibrate-kv), else the
// k_scale / v_scale tensors of a compressed-tensors checkpoint with a kv_cache_scheme, else 1.0 with a
// warning on stderr, as vLLM does.
KvCacheOptions KvCacheOptionsFor(const std::string& dtype, const std::string& model_path,
                                 const std::string& scales_file, uint32_t n_layers);

struct LoadedModel {
  Model model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// `tokenizer_path` empty = the model's own (its folder's tokenizer.json or tokenizer.model, or the
// GGUF vocabulary); Error when it has more tokens than the model.
std::unique_ptr<Tokenizer> LoadTokenizerFor(const ModelConfig& config, const std::string& model_path,
                                            const std::string& tokenizer_path);

// The model as the runtime commands run it: BF16 / F16 linears stay in 16 bits (LoadOptions::keep_16bit).
// `quantize` non-empty = RTN-quantize the decoder linears in memory with that scheme first.
LoadedModel LoadModelWithTokenizer(const std::string& model_path, const std::string& tokenizer_path,
                                   const std::string& quantize = "", const LoadOptions& options = {});

// Reads a text file and tokenizes it with BOS (the llama-perplexity protocol).
std::vector<int32_t> TokenizeFile(const Tokenizer& tokenizer, const std::string& path);

// "512M", "2G", "1.5G", "64K" (powers of 1024) or plain bytes; errors name `flag`.
uint64_t ParseByteSize(const std::string& text, const std::string& flag);

// Calibration windows from `text` (read from `file`, named in errors): model/calibration.h.
std::vector<std::vector<int32_t>> CalibrationWindows(const Tokenizer& tokenizer, std::string_view text,
                                                     const std::string& file, size_t samples, size_t length,
                                                     uint64_t seed);

// The prompt text for one user message (after an optional system message) under the chat template of
// `model_path` (a folder, tokenizer_config.json or GGUF), with the assistant's turn opened.
std::string ChatPrompt(const std::string& model_path, const std::string& system, const std::string& user);

}  // namespace lowbit
