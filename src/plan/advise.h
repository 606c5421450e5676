// `lowbit advise`: walks the format decision tree for a model on a hardware target and returns a
// recipe (a quantization method and a lowbit format string, plus a KV-cache dtype) with the
// reason for every branch and the plan figures of the result.
//
// The tree, in order:
//   1. FP8 kernel on this hardware?   FP8 matrix units (NVIDIA compute capability >= 8.9, MI300X,
//                                     Gaudi 3); without them FP8 weights only run dequantized.
//   2. Memory tight?                  bf16 weights above kMaxWeightShare of the usable memory, or
//                                     weights + KV + activations above it.
//   3. 2x or 4x compression needed?   the least-compressed tier whose weights fit in that share:
//                                     8-bit (FP8 where native, else INT8), then 4-bit (NVFP4 on
//                                     Blackwell, else INT4 group 128). When memory is not tight the
//                                     8-bit tier is still recommended, because decode is bound by
//                                     weight bytes: FP8 where native (W8A8, near-lossless), INT8
//                                     weight-only elsewhere (or SmoothQuant W8A8 once the batch is
//                                     compute-bound and INT8 tensor cores exist).
//   4. Trusted pre-quantized checkpoint (--checkpoint FORMAT)?  Used instead of calibrating when it
//                                     fits the same budget and is not less precise than the tier.
//   5. KV the bottleneck at ctx x batch?  fp16 KV reads exceed the weight reads, or the cache does
//                                     not fit: quantize the cache (FP8 where native, else INT8, then
//                                     INT4 KIVI-style), dropping a weight tier only if even that
//                                     does not fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/hardware.h"
#include "plan/plan.h"

namespace lowbit {

// Weights may take at most this share of the usable memory: the rest is KV cache for batching
// and prefix caching. A 70B model in FP8 on one 80 GB card technically loads but leaves a few GB
// of cache, which is not a deployment.
inline constexpr double kMaxWeightShare = 0.8;

struct AdviseOptions {
  PlanOptions plan;               // ctx, batch, memory_utilization (kv_cache_dtype is chosen here)
  uint32_t devices = 1;           // devices available (tensor parallel)
  std::string checkpoint_format;  // a trusted pre-quantized checkpoint in this format; "" = none
};

struct AdviceStep {
  std::string question, answer, reason;
};

struct Advice {
  std::string method;          // "none", "rtn", "gptq", "smoothquant", "pre-quantized"
  std::string format;          // lowbit format string
  std::string kv_cache_dtype;  // lowbit format string
  bool fits = false;           // on the given number of devices
  std::vector<AdviceStep> steps;
  std::vector<std::string> notes;
  FormatPlan plan;             // the recommended format with the recommended KV dtype

  std::string recipe() const { return method == "none" ? format : method + " " + format; }
};

Advice Advise(const ModelSpec& spec, const Hardware& hw, const AdviseOptions& options);
nlohmann::json AdviceToJson(const Advice& advice);

}  // namespace lowbit
