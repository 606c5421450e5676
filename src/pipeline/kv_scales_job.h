// Static FP8 KV-cache scales (per layer, K and V) from calibration text, written beside the model
// (kv_cache_scales.json) where ppl, compare, bench and the engine exports pick them up.
// `lowbit calibrate-kv` and `lowbit.calibrate_kv()` are two front doors to RunKvScalesJob.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace lowbit {

struct KvScalesJob {
  std::string model, calib, out;  // out empty: MODEL/kv_cache_scales.json
  std::string dtype = "fp8_e4m3";
  size_t samples = 32, length = 256, threads = 0;
  uint64_t seed = 0;
};

// Writes the scales and returns what `lowbit calibrate-kv --json` prints: out, dtype, k_scales,
// v_scales, windows.
nlohmann::json RunKvScalesJob(const KvScalesJob& job);

}  // namespace lowbit
