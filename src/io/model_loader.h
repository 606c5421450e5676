// One entry point for every model file lowbit reads.
#pragma once

#include <filesystem>

#include "model/weights.h"

namespace lowbit {

// A Hugging Face folder (config.json + safetensors), a .gguf file, or a llama2.c .bin checkpoint.
Model LoadModel(const std::filesystem::path& path);

}  // namespace lowbit
