// One entry point for every model file lowbit reads.
#pragma once

#include <filesystem>
#include <functional>

#include "model/weights.h"

namespace lowbit {

// A Hugging Face folder (config.json + safetensors), a .gguf file, or a llama2.c .bin checkpoint.
// Non-finite weights are Errors naming the tensor unless options.allow_nonfinite.
Model LoadModel(const std::filesystem::path& path, const LoadOptions& options = {});

// A model whose decoder blocks are read on demand, so that work done one block at a time
// (`lowbit quantize`) holds one block in full precision instead of the whole model: a 7B model
// is 27 GB in fp32. Everything outside the blocks (embeddings, final norm, lm_head) is loaded.
struct StreamedModel {
  Model model;  // weights.layers has n_layers empty slots while read_layer is set
  // Reads, converts to fp32 and validates block i; null when the blocks are already in `model`.
  std::function<LayerWeights(size_t)> read_layer;
};

// Hugging Face folders are read block by block; GGUF and llama2.c files are loaded whole.
StreamedModel OpenModel(const std::filesystem::path& path, const LoadOptions& options = {});

}  // namespace lowbit
