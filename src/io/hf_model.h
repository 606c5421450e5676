// Loads a Hugging Face Llama / Mistral / Qwen2 checkpoint folder (config.json + safetensors,
// sharded or not) into a Model with fp32 dense weights.
#pragma once

#include <filesystem>

#include "io/model_loader.h"
#include "model/weights.h"

namespace lowbit {

// Reads the config and everything outside the decoder blocks, and keeps the safetensors mapped
// so that read_layer converts one block at a time. Every tensor of the checkpoint is checked
// against the config first, from the headers: the ones the model reads have the config's shapes,
// unused ones that look like weights of the architecture (a block past num_hidden_layers, an
// undeclared bias, an lm_head beside tie_word_embeddings that differs from the embeddings) are
// Errors naming the file, the tensor and the config field, and other unused tensors a warning
// on stderr. NaN / Inf weights are Errors naming the tensor unless options.allow_nonfinite.
StreamedModel OpenHfModel(const std::filesystem::path& folder, const LoadOptions& options = {});

Model LoadHfModel(const std::filesystem::path& folder, const LoadOptions& options = {});

}  // namespace lowbit
