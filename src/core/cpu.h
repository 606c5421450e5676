// The instruction-set levels lowbit's kernels dispatch on, and a cap on them. LOWBIT_CPU=avx2 runs
// the paths a CPU without AVX-512 takes (Zen 2/3, Haswell to Raptor Lake), LOWBIT_CPU=sse4 those of
// one without AVX2, on any CPU that has more: so those paths can be tested end to end and measured on
// this one. Unset or `native`: every level the CPU has.
#pragma once

#include <string_view>

namespace lowbit {

enum class CpuLevel { kSse4, kAvx2, kAvx512 };

// The cap: LOWBIT_CPU as read at the first call (an unknown value is an Error naming the variable),
// or what SetCpuLevelCap set since. Read it before the first kernel runs (main does): Highway's
// dispatch follows the cap from then on.
CpuLevel CpuLevelCap();

// Kernels of `level` may run: the cap allows them. Each kernel's own hardware check stays beside this.
bool CpuLevelAllowed(CpuLevel level);

// Caps the levels for this process (tests). Set it before a model is loaded: a loaded weight keeps
// the layout its load-time kernel choice gave it.
void SetCpuLevelCap(CpuLevel cap);

std::string_view CpuLevelName(CpuLevel level);

}  // namespace lowbit
