#include "plan/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"

namespace lowbit {
namespace {

// Memory sizes: HBM and GDDR capacities are binary even where datasheets print "GB" (an "80GB"
// H100 reports 81,559 MiB in nvidia-smi, a 24 GB RTX 4090 24,564 MiB), so the table stores GiB.
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr double kTB = 1e12, kGB = 1e9, kT = 1e12;

// Throughput is dense (the datasheets' headline "with sparsity" figures are halved) and is the
// tensor/matrix-unit peak with FP32 accumulation where the sheet distinguishes.
std::vector<Hardware> BuildTable() {
  std::vector<Hardware> t;
  auto add = [&](const char* name, const char* vendor, uint64_t mem_gib, double bw, double bf16, double fp8,
                 double int8, double fp4, int ccmaj, int ccmin, const char* source) {
    t.push_back({name, vendor, mem_gib * kGiB, bw, bf16 * kT, fp8 * kT, int8 * kT, fp4 * kT, ccmaj, ccmin, source});
  };
  // NVIDIA A100 Tensor Core GPU datasheet (2021): SXM4 40GB HBM2 1,555 GB/s, 80GB HBM2e 2,039 GB/s;
  // BF16 312 TFLOPS, INT8 624 TOPS dense; Ampere has no FP8.
  add("A100-40G", "NVIDIA", 40, 1555 * kGB, 312, 0, 624, 0, 8, 0, "NVIDIA A100 datasheet (SXM4 40GB)");
  add("A100-80G", "NVIDIA", 80, 2039 * kGB, 312, 0, 624, 0, 8, 0, "NVIDIA A100 datasheet (SXM4 80GB)");
  // NVIDIA H100 Tensor Core GPU datasheet: SXM 80GB 3.35 TB/s, BF16 1,979 / FP8 3,958 / INT8 3,958
  // with sparsity; PCIe 80GB 2 TB/s, BF16 1,513 / FP8 3,026 / INT8 3,026 with sparsity.
  add("H100-SXM", "NVIDIA", 80, 3.35 * kTB, 989, 1979, 1979, 0, 9, 0, "NVIDIA H100 datasheet (SXM5)");
  add("H100-PCIe", "NVIDIA", 80, 2.0 * kTB, 756, 1513, 1513, 0, 9, 0, "NVIDIA H100 datasheet (PCIe)");
  // NVIDIA H200 datasheet: 141GB HBM3e, 4.8 TB/s; same Hopper tensor cores as H100 SXM.
  add("H200", "NVIDIA", 141, 4.8 * kTB, 989, 1979, 1979, 0, 9, 0, "NVIDIA H200 datasheet (SXM)");
  // H20 (Hopper for the China market), NVIDIA partner spec sheet: 96GB HBM3, 4.0 TB/s, BF16 148,
  // FP8 296, INT8 296 dense.
  add("H20", "NVIDIA", 96, 4.0 * kTB, 148, 296, 296, 0, 9, 0, "NVIDIA H20 partner spec sheet");
  // NVIDIA DGX/HGX B200 datasheet: 1,440 GB and 64 TB/s for 8 GPUs = 180 GB and 8 TB/s each;
  // per GPU dense BF16 2.25 PF, FP8 4.5 PF, INT8 4.5 POPS, FP4 9 PF.
  add("B200", "NVIDIA", 180, 8.0 * kTB, 2250, 4500, 4500, 9000, 10, 0, "NVIDIA DGX B200 / HGX B200 datasheet");
  // NVIDIA L40S datasheet: 48GB GDDR6, 864 GB/s, BF16 362.05, FP8 733, INT8 733 dense.
  add("L40S", "NVIDIA", 48, 864 * kGB, 362.05, 733, 733, 0, 8, 9, "NVIDIA L40S datasheet");
  // NVIDIA Ada Lovelace architecture whitepaper (RTX 4090): 24GB GDDR6X, 1,008 GB/s; BF16 165.2,
  // FP8 330.3 (FP32 accumulate), INT8 660.6 dense.
  add("RTX-4090", "NVIDIA", 24, 1008 * kGB, 165.2, 330.3, 660.6, 0, 8, 9, "NVIDIA Ada Lovelace whitepaper");
  // NVIDIA Ampere GA102 whitepaper (RTX 3090): 24GB GDDR6X, 936 GB/s; BF16 71 (FP32 accumulate),
  // INT8 284 dense; compute capability 8.6 has no FP8.
  add("RTX-3090", "NVIDIA", 24, 936 * kGB, 71, 0, 284, 0, 8, 6, "NVIDIA Ampere GA102 whitepaper");
  // AMD Instinct MI300X datasheet: 192GB HBM3, 5.3 TB/s; BF16 1,307.4, FP8 2,614.9, INT8 2,614.9
  // dense. (CDNA3 FP8 is the FNUZ variant of E4M3.)
  add("MI300X", "AMD", 192, 5.3 * kTB, 1307.4, 2614.9, 2614.9, 0, 0, 0, "AMD Instinct MI300X datasheet");
  // Intel Gaudi 3 AI accelerator white paper: 128GB HBM2e, 3.7 TB/s; MME BF16 1,835 and FP8 1,835
  // TFLOPS; no INT8 matrix figure is published.
  add("Gaudi3", "Intel", 128, 3.7 * kTB, 1835, 1835, 0, 0, 0, 0, "Intel Gaudi 3 white paper");
  // Huawei publishes no datasheet for the 910B; these are the widely reported figures (64GB HBM2e,
  // 1.6 TB/s, FP16 320 TFLOPS, INT8 640 TOPS). No FP8 on the 910B.
  add("Ascend-910B", "Huawei", 64, 1.6 * kTB, 320, 0, 640, 0, 0, 0,
      "widely reported figures (no official Huawei datasheet)");
  return t;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::string Hardware::compute_capability() const {
  return is_nvidia() ? fmt::format("{}.{}", cc_major, cc_minor) : "-";
}

const std::vector<Hardware>& HardwareTable() {
  static const std::vector<Hardware> table = BuildTable();
  return table;
}

Hardware ThisCpu(double bandwidth_gbs) {
  if (!(bandwidth_gbs > 0)) Fail("--cpu-bandwidth must be a positive number of GB/s, got {}", bandwidth_gbs);
  Hardware cpu;
  cpu.name = "cpu";
  cpu.vendor = "CPU";
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  cpu.memory_bytes = pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
  cpu.bandwidth = bandwidth_gbs * kGB;
  // An order-of-magnitude peak: ~100 GFLOP/s per core (one 16-lane FP32 FMA unit at ~3 GHz). It
  // only places the ridge point; CPU decode is memory-bound long before it matters.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cpu.bf16_flops = cores * 100e9;
  cpu.source = fmt::format("this machine: {} cores, {} GB/s ({}; measure with `lowbit bench memory`)", cores,
                           bandwidth_gbs, bandwidth_gbs == kDefaultCpuBandwidthGBs ? "default" : "--cpu-bandwidth");
  return cpu;
}

std::string KnownHardwareNames() {
  std::string list;
  for (const Hardware& h : HardwareTable()) list += h.name + ", ";
  return list + "cpu";
}

Hardware FindHardware(std::string_view name, double cpu_bandwidth_gbs) {
  const std::string want = Lower(name);
  if (want == "cpu") return ThisCpu(cpu_bandwidth_gbs);
  for (const Hardware& h : HardwareTable())
    if (Lower(h.name) == want) return h;
  Fail("unknown hardware '{}' (known: {})", name, KnownHardwareNames());
}

}  // namespace lowbit
