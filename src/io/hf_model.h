// Loads a Hugging Face Llama / Mistral / Qwen2 checkpoint folder (config.json + safetensors,
// sharded or not) into a Model with fp32 dense weights.
#pragma once

#include <filesystem>

#include "io/model_loader.h"
#include "model/weights.h"

namespace lowbit {

// Reads the config and everything outside the decoder blocks, and keeps the safetensors mapped
// so that read_layer converts one block at a time.
StreamedModel OpenHfModel(const std::filesystem::path& folder);

Model LoadHfModel(const std::filesystem::path& folder);

}  // namespace lowbit
