// Synthetic checkpoints: a preset architecture's real shapes filled with deterministic random
// weights, written as a Hugging Face folder (config.json + model.safetensors), so speed and
// memory can be measured on realistic matrix sizes without downloading a model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/dtype.h"
#include "plan/arch.h"

namespace lowbit {

struct SynthOptions {
  std::string preset;       // a Llama-family, Mixtral / Qwen3-MoE, DeepSeek or GPT-OSS preset (plan/presets.h)
  uint32_t layers = 0;      // 0 = the preset's
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  size_t threads = 0;
};

struct SynthResult {
  ModelArch arch;
  uint64_t parameters = 0, bytes = 0;
};

// Writes OUT/config.json and OUT/model.safetensors (atomically each). Throws Error for a preset whose
// shared experts, leading dense layers or MoE biases no architecture the engine runs expresses.
SynthResult WriteSynthModel(const SynthOptions& options, const std::filesystem::path& out);

// The tensors (name, shape) a synthetic folder of `arch` holds, as lowbit's loader names them: what
// WriteSynthModel fills, so their sizes add up to the preset's parameter count.
std::vector<std::pair<std::string, std::vector<uint64_t>>> SynthTensorShapes(const ModelArch& arch);

// What `lowbit synth --json` prints for a model written to `out`.
nlohmann::json SynthJson(const SynthResult& result, const std::filesystem::path& out);

}  // namespace lowbit
