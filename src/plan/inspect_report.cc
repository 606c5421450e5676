#include "plan/inspect_report.h"

#include "plan/hardware.h"

namespace lowbit {

InspectReport InspectWithKernels(const std::filesystem::path& path, const std::vector<std::string>& gpus,
                                 const std::vector<std::string>& engine_flags) {
  InspectReport r{InspectCheckpoint(path), ParseEngineFlags(engine_flags), {}, {}};
  std::vector<Hardware> hardware;
  for (const std::string& name : gpus.empty() ? DefaultInspectGpus() : gpus) hardware.push_back(FindHardware(name));
  for (const Hardware& hw : hardware) r.kernels.push_back(ChooseKernel(r.info.summary, hw, r.flags));
  r.traps = FindTraps(r.info.summary, hardware, r.flags);
  return r;
}

nlohmann::json InspectReportToJson(const InspectReport& r) {
  nlohmann::json out = CheckpointToJson(r.info);
  nlohmann::json kernels = nlohmann::json::array(), traps = nlohmann::json::array();
  for (const KernelPath& k : r.kernels) kernels.push_back(KernelPathToJson(k));
  for (const Trap& t : r.traps) traps.push_back(TrapToJson(t));
  out["engine_flags"] = {{"quantization", r.flags.quantization},
                         {"kv_cache_dtype", r.flags.kv_cache_dtype},
                         {"tensor_parallel_size", r.flags.tensor_parallel},
                         {"ignored", r.flags.ignored}};
  out["kernels"] = kernels;
  out["traps"] = traps;
  return out;
}

}  // namespace lowbit
