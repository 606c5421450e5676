// What the model-running commands share: loading a model with its tokenizer, and thread count.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "model/kv_cache.h"
#include "model/sampler.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace lowbit::cli {

// --kv-cache-dtype (and --kv-scales) of the model at `model_path`. FP8 uses static scales from
// `scales_file`, else from the model's kv_cache_scales.json (lowbit calibrate-kv), else 1.0 with
// a warning on stderr, as vLLM does.
KvCacheOptions KvCacheOptionsFor(const std::string& dtype, const std::string& model_path,
                                 const std::string& scales_file, uint32_t n_layers);

struct LoadedModel {
  Model model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// `tokenizer_path` empty = the model's own (its folder's tokenizer.model or the GGUF vocabulary);
// Error when it has more tokens than the model.
std::unique_ptr<Tokenizer> LoadTokenizerFor(const ModelConfig& config, const std::string& model_path,
                                            const std::string& tokenizer_path);

// `tokenizer_path` empty = the model's own (its folder's tokenizer.model or the GGUF vocabulary).
// `quantize` non-empty = RTN-quantize the decoder linears in memory with that format first.
// `options`: --allow-nonfinite (AllowNonfiniteFlag).
LoadedModel LoadModelWithTokenizer(const std::string& model_path, const std::string& tokenizer_path,
                                   const std::string& quantize = "", const LoadOptions& options = {});

// Adds --allow-nonfinite (load weights holding NaN / Inf instead of failing) to a model-loading command.
void AddAllowNonfiniteFlag(CLI::App* cmd, LoadOptions& options);

// Reads a text file and tokenizes it with BOS (the llama-perplexity protocol).
std::vector<int32_t> TokenizeFile(const Tokenizer& tokenizer, const std::string& path);

// Tokenizes a large text line by line on all threads (BOS first, lines concatenated): for
// calibration, where whole-text tokenization of megabytes would dominate the run time.
// "512M", "2G", "1.5G", "64K" (powers of 1024) or plain bytes; errors name `flag`.
uint64_t ParseByteSize(const std::string& text, const std::string& flag);

// Calibration windows from `text` (read from `file`, named in errors): model/calibration.h.
std::vector<std::vector<int32_t>> CalibrationWindows(const Tokenizer& tokenizer, std::string_view text,
                                                     const std::string& file, size_t samples, size_t length,
                                                     uint64_t seed);

struct GenerationResult {
  std::string text;
  size_t prompt_tokens = 0, generated = 0;
  double prompt_tps = 0, decode_tps = 0;
};

// Prefills the prompt (with BOS), then samples up to n tokens (stopping at EOS), streaming each
// piece to `stream` when it is not null.
// The prompt text for one user message (after an optional system message) under the chat template of
// `model_path` (a folder, tokenizer_config.json or GGUF), with the assistant's turn opened.
std::string ChatPrompt(const std::string& model_path, const std::string& system, const std::string& user);

// `prompt` is plain text (BOS is added as the tokenizer's model expects) or, with `chat`, the output of
// ApplyChatTemplate (which carries its own special tokens: nothing is added).
GenerationResult Generate(const LoadedModel& m, const std::string& prompt, bool chat, size_t n, const SamplerOptions& sampler,
                          size_t threads, std::FILE* stream);

}  // namespace lowbit::cli
