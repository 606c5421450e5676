// Calibration data and statistics for post-training quantization: random token windows from a
// text file (seeded), and Hessian accumulators H = sum over tokens of x x^T for a linear input.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace lowbit {

// `samples` windows of `length` tokens at random offsets of `tokens` (seeded, reproducible).
// Throws Error when the text is shorter than one window.
std::vector<std::vector<int32_t>> SampleWindows(const std::vector<int32_t>& tokens, size_t samples, size_t length,
                                                uint64_t seed);

class HessianAccumulator {
 public:
  explicit HessianAccumulator(size_t cols) : cols_(cols), h_(cols * cols, 0.0) {}
  // Adds x^T x for x [n_tokens x cols] (row-major).
  void Add(const float* x, size_t n_tokens, ThreadPool& pool);
  size_t tokens() const { return tokens_; }
  const std::vector<double>& sum() const { return h_; }  // [cols x cols]

 private:
  size_t cols_, tokens_ = 0;
  std::vector<double> h_;
};

}  // namespace lowbit
