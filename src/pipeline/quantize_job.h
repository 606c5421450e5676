// A whole-model quantization run as one library call: the recipe (model/recipe.h) applied to a model
// through the method registry, with calibration, resumable checkpoints (OUT.partial), an optional
// evaluation against the base, and the output written atomically as a lowbit folder, a GGUF file or an
// engine checkpoint (GPTQ, AWQ, compressed-tensors), the recipe card inside. `lowbit quantize` and
// `lowbit.quantize()` are two front doors to RunQuantizeJob.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "io/model_loader.h"
#include "model/recipe.h"

namespace lowbit {

struct QuantizeJob {
  std::string model, out;
  Recipe recipe;  // format empty with save_as gguf:T: T's grid (DefaultFormatFor)
  // lowbit (a quantized folder), gguf:TYPE (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4), gptq, gptq_v2, awq, compressed-tensors
  std::string save_as = "lowbit";
  // gguf:TYPE only: llama-quantize's --token-embedding-type / --output-tensor-type (empty: the mix's choice).
  std::string token_embedding_type, output_tensor_type;
  std::string eval;  // text to measure PPL / KL / top-1 against the base with (into the card)
  size_t eval_ctx = 256, threads = 0;
  std::string max_ram;  // calibration activations held in memory before spilling beside OUT, e.g. "2G"
  bool resume = false;
  size_t stop_after = 0;         // stop after this many blocks, leaving OUT.partial (0: run to the end)
  double checkpoint_every = 60;  // seconds between saves of OUT.partial (0: after every block)
  LoadOptions load;
  // Called before each tensor with (block, blocks, tensor) and once with (blocks, blocks, "") at the
  // end. It may throw to abandon the run: nothing is written but OUT.partial's last checkpoint.
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct QuantizeOutcome {
  nlohmann::json card;        // the recipe card written with the output; null when stopped early
  size_t stopped_after = 0;   // blocks finished when stop_after ended the run
  std::filesystem::path partial;  // where a stopped run's state is
};

// The grid scheme a `gguf:TYPE` target quantizes onto (Q4_0 -> int4:g32:scale=f16, ...); empty for
// other targets. Errors for an unknown type or one --save-as cannot write.
std::string DefaultFormatFor(const std::string& save_as, const std::string& out);

// Validates everything (recipe against the target, output path, resume state) before any work.
QuantizeOutcome RunQuantizeJob(const QuantizeJob& job);

}  // namespace lowbit
