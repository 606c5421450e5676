#include "kernels/stream.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace lowbit {

MemoryBandwidth MeasureMemoryBandwidth(size_t total_bytes, int passes, ThreadPool& pool) {
  const size_t n = total_bytes / 3 / sizeof(double);
  // Uninitialised storage, first touched by the threads that use it (page placement follows).
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  pool.ParallelFor(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      a[i] = 1.0;
      b[i] = 2.0;
      c[i] = 0.5;
    }
  });
  using Clock = std::chrono::steady_clock;
  auto best = [&](auto&& body) {
    double fastest = 1e30;
    for (int p = 0; p < passes; ++p) {
      const auto start = Clock::now();
      pool.ParallelFor(n, body);
      fastest = std::min(fastest, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return fastest;
  };
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  const double copy_s = best([&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) pc[i] = pa[i];
  });
  const double triad_s = best([&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) pa[i] = pb[i] + 3.0 * pc[i];
  });
  MemoryBandwidth m;
  m.bytes = 3 * n * sizeof(double);
  m.copy_gbps = 16.0 * static_cast<double>(n) / copy_s / 1e9;
  m.triad_gbps = 24.0 * static_cast<double>(n) / triad_s / 1e9;
  return m;
}

}  // namespace lowbit
