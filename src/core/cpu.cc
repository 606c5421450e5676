#include "core/cpu.h"

#include <hwy/targets.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace lowbit {
namespace {

constexpr int kUnread = -1;
std::atomic<int> cap_level{kUnread};

CpuLevel FromEnvironment() {
  const char* value = std::getenv("LOWBIT_CPU");
  if (value == nullptr || *value == '\0') return CpuLevel::kAvx512;
  const std::string name = value;
  if (name == "native" || name == "avx512") return CpuLevel::kAvx512;
  if (name == "avx2") return CpuLevel::kAvx2;
  if (name == "sse4") return CpuLevel::kSse4;
  throw Error("LOWBIT_CPU=" + name + ": unknown level (native, avx512, avx2 or sse4)", "", "LOWBIT_CPU");
}

}  // namespace

CpuLevel CpuLevelCap() {
  int level = cap_level.load(std::memory_order_relaxed);
  if (level == kUnread) {
    static std::once_flag read;
    std::call_once(read, [] { SetCpuLevelCap(FromEnvironment()); });
    level = cap_level.load(std::memory_order_relaxed);
  }
  return static_cast<CpuLevel>(level);
}

bool CpuLevelAllowed(CpuLevel level) { return level <= CpuLevelCap(); }

void SetCpuLevelCap(CpuLevel cap) {
  // Highway numbers x86 targets from the best (lowest bit) down: every bit below a target's is a
  // better one, AVX-512's variants below AVX2's.
  int64_t disabled = 0;
  if (cap < CpuLevel::kAvx512) disabled |= HWY_AVX2 - 1;
  if (cap < CpuLevel::kAvx2) disabled |= HWY_SSE4 - 1;
  hwy::DisableTargets(disabled);
  cap_level.store(static_cast<int>(cap), std::memory_order_relaxed);
}

std::string_view CpuLevelName(CpuLevel level) {
  switch (level) {
    case CpuLevel::kSse4: return "sse4";
    case CpuLevel::kAvx2: return "avx2";
    case CpuLevel::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace lowbit
