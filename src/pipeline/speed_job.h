// `lowbit bench decode|prefill` as a library call, for the CLI and the Python package: one loaded
// model measured in several weight formats in one run, so their ratios share the machine's state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "eval/speed.h"

namespace lowbit {

struct SpeedJob {
  std::string model;
  bool decode = true;                        // false: prefill
  std::vector<std::string> formats{"loaded"};  // "loaded", "fp32", or a scheme (RTN of every linear, lm_head too)
  std::vector<size_t> batches{1};
  size_t ctx = 512;    // decode: cached positions before the timed steps; prefill: prompt length
  size_t steps = 8;    // decode only
  size_t rounds = 1;   // > 1: every format's model built first, measured round-robin, best of each
  size_t threads = 0;  // 0: all cores
  std::string kv_cache_dtype = "fp32";
};

struct FormatSpeeds {
  std::string format;
  uint64_t weight_bytes = 0;  // every linear's weights, lm_head included
  std::vector<BatchSpeed> speeds;  // one per batch size, in the job's order
};

// Throws Error naming the model or format that cannot be loaded or built.
std::vector<FormatSpeeds> RunSpeedJob(const SpeedJob& job);

// What `--json` prints: one object per format and batch.
nlohmann::json SpeedsJson(const std::vector<FormatSpeeds>& results);

}  // namespace lowbit
