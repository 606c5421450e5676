// `inspect` as a library call: a checkpoint's facts with the kernel vLLM would pick on each GPU and
// the traps that await it, and the JSON `lowbit inspect --json` and `lowbit.inspect()` return.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/inspect.h"
#include "plan/kernel_rules.h"

namespace lowbit {

struct InspectReport {
  CheckpointInfo info;
  EngineFlags flags;
  std::vector<KernelPath> kernels;  // one per GPU
  std::vector<Trap> traps;
};

// `gpus` empty: DefaultInspectGpus(); `engine_flags`: vLLM flags as text (--quantization ..., ...).
InspectReport InspectWithKernels(const std::filesystem::path& path, const std::vector<std::string>& gpus,
                                 const std::vector<std::string>& engine_flags);
nlohmann::json InspectReportToJson(const InspectReport& report);

}  // namespace lowbit
