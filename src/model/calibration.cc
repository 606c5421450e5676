#include "model/calibration.h"

#include <random>

#include "core/error.h"
#include "kernels/dot.h"

namespace lowbit {

std::vector<std::vector<int32_t>> SampleWindows(const std::vector<int32_t>& tokens, size_t samples, size_t length,
                                                uint64_t seed) {
  if (length == 0 || samples == 0) Fail("calibration needs at least one window of at least one token");
  if (tokens.size() < length)
    Fail("calibration text has {} tokens, fewer than one window of {}", tokens.size(), length);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> start(0, tokens.size() - length);
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i < samples; ++i) {
    const size_t s = start(rng);
    windows.emplace_back(tokens.begin() + static_cast<ptrdiff_t>(s), tokens.begin() + static_cast<ptrdiff_t>(s + length));
  }
  return windows;
}

void HessianAccumulator::Add(const float* x, size_t n_tokens, ThreadPool& pool) {
  // Transpose a chunk of tokens so each input feature is a contiguous vector; then every entry
  // is one SIMD dot product of two such vectors (DotRows blocks four of them per weight load).
  constexpr size_t kChunk = 512;
  std::vector<float> xt(cols_ * kChunk), partial(cols_ * cols_);
  for (size_t t0 = 0; t0 < n_tokens; t0 += kChunk) {
    const size_t n = std::min(kChunk, n_tokens - t0);
    for (size_t t = 0; t < n; ++t)
      for (size_t c = 0; c < cols_; ++c) xt[c * n + t] = x[(t0 + t) * cols_ + c];
    pool.ParallelFor(cols_, [&](size_t begin, size_t end) {
      DotRows(xt.data(), n, begin, end, xt.data(), cols_, partial.data(), cols_);
    });
    for (size_t i = 0; i < h_.size(); ++i) h_[i] += partial[i];
  }
  tokens_ += n_tokens;
}

}  // namespace lowbit
