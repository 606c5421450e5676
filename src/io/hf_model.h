// Loads a Hugging Face Llama / Mistral / Qwen2 checkpoint folder (config.json + safetensors,
// sharded or not) into a Model with fp32 dense weights.
#pragma once

#include <filesystem>

#include "model/weights.h"

namespace lowbit {

Model LoadHfModel(const std::filesystem::path& folder);

}  // namespace lowbit
