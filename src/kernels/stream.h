// STREAM-style memory bandwidth: the physical limit every kernel figure is compared with.
// Copy (c = a) and triad (a = b + s * c) over arrays far larger than any cache, counted as
// STREAM counts bytes (copy: 16 per element, triad: 24), best of several passes.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace lowbit {

struct MemoryBandwidth {
  double copy_gbps = 0, triad_gbps = 0;
  size_t bytes = 0;  // total size of the three arrays
};

MemoryBandwidth MeasureMemoryBandwidth(size_t total_bytes, int passes, ThreadPool& pool);

}  // namespace lowbit
