// Static FP8 KV-cache scales: the largest |K| and |V| of each layer over calibration windows,
// divided by the FP8 format's largest finite value, so the cache uses its whole range (as vLLM's
// calibrated k_scale / v_scale). Stored beside the model as kv_cache_scales.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "model/kv_cache.h"
#include "model/weights.h"

namespace lowbit {

struct KvScales {
  KvDtype dtype = KvDtype::kFp8E4M3;
  std::vector<float> k, v;  // per layer
};

KvScales CalibrateKvScales(const Model& model, const std::vector<std::vector<int32_t>>& windows, KvDtype dtype,
                           size_t threads);

// The file beside a model folder ("kv_cache_scales.json").
std::filesystem::path KvScalesPathFor(const std::filesystem::path& model);
void WriteKvScales(const KvScales& scales, const std::filesystem::path& path);
// Throws Error naming the file and field when it is malformed or has the wrong number of layers.
KvScales ReadKvScales(const std::filesystem::path& path, uint32_t n_layers);

}  // namespace lowbit
