// Calibration data and statistics for post-training quantization: random token windows from a
// text file (seeded), and Hessian accumulators H = sum over tokens of x x^T for a linear input.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace lowbit {

// Tokenizes one segment of text (no BOS).
using LineEncoder = std::function<std::vector<int32_t>(std::string_view line)>;

// `samples` windows of `length` tokens from `text`, seeded and reproducible. The text is read as
// the tokens of its segments one after another, a segment being a line, or ~2 KB of whole words
// of a longer line. A window starts in the segment holding a uniformly drawn byte, at a
// uniformly drawn token of it, and runs on through the following segments (one that would run
// past the end is drawn again). Only the segments the windows touch are tokenized: O(samples x
// length) work whatever the size of the file. Throws Error when the text holds no full window.
std::vector<std::vector<int32_t>> SampleTextWindows(std::string_view text, const LineEncoder& encode, size_t samples,
                                                    size_t length, uint64_t seed);

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
  std::vector<float> transposed_;  // a chunk of tokens, feature-major; kept across calls
};

}  // namespace lowbit
