// Accelerators the planner knows, with their datasheet memory, bandwidth and dense peak
// throughput, plus "cpu" (this machine). The planner's arithmetic is a roofline: decode time is
// bounded by bytes / bandwidth, prefill and large batches by FLOPs / peak, and the ridge point
// peak / bandwidth (FLOP per byte) says where one turns into the other.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

// Default for "cpu" when --cpu-bandwidth is not given: a conservative figure for one socket of
// dual-channel DDR4/DDR5 as a small cloud VM sees it. `lowbit bench memory` measures the real
// number for this machine; pass it with --cpu-bandwidth.
inline constexpr double kDefaultCpuBandwidthGBs = 20.0;

struct Hardware {
  std::string name;    // as typed on the command line, e.g. "H100-SXM"
  std::string vendor;  // "NVIDIA", "AMD", "Intel", "Huawei", "CPU"
  uint64_t memory_bytes = 0;
  double bandwidth = 0;    // bytes per second
  double bf16_flops = 0;   // dense BF16/FP16 tensor throughput, FLOP/s (no 2:4 sparsity)
  double fp8_flops = 0;    // dense FP8; 0 = no native FP8 matrix units
  double int8_ops = 0;     // dense INT8; 0 = not published / not supported
  double fp4_flops = 0;    // dense FP4 (NVFP4/MXFP4); 0 = no native FP4
  int cc_major = 0, cc_minor = 0;  // NVIDIA compute capability; 0.0 for other vendors
  std::string source;      // where the numbers come from

  bool is_cpu() const { return vendor == "CPU"; }
  bool fp8_native() const { return fp8_flops > 0; }
  bool fp4_native() const { return fp4_flops > 0; }
  bool is_nvidia() const { return vendor == "NVIDIA"; }
  std::string compute_capability() const;  // "9.0", or "-" for non-NVIDIA
};

// The accelerator table in display order (without "cpu").
const std::vector<Hardware>& HardwareTable();

// This machine: physical memory from the OS, `bandwidth_gbs` GB/s (decimal), and a rough FP32
// FMA peak from the core count (there are no matrix units to look up).
Hardware ThisCpu(double bandwidth_gbs = kDefaultCpuBandwidthGBs);

// Case-insensitive lookup; "cpu" gives ThisCpu(cpu_bandwidth_gbs). Throws Error listing the known
// names when `name` is unknown.
Hardware FindHardware(std::string_view name, double cpu_bandwidth_gbs = kDefaultCpuBandwidthGBs);

std::string KnownHardwareNames();  // "A100-40G, A100-80G, ..., cpu"

}  // namespace lowbit
