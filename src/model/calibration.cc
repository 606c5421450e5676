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
  // H is symmetric: each row block computes only the columns from its own first row on, and the
  // lower triangle is mirrored at the end.
  constexpr size_t kChunk = 512, kTile = 16, kRowBlock = 16;
  std::vector<float> xt(cols_ * kChunk), partial(cols_ * cols_);
  for (size_t t0 = 0; t0 < n_tokens; t0 += kChunk) {
    const size_t n = std::min(kChunk, n_tokens - t0);
    for (size_t tb = 0; tb < n; tb += kTile)  // tiled transpose: both sides stay in cache
      for (size_t cb = 0; cb < cols_; cb += kTile)
        for (size_t t = tb; t < std::min(n, tb + kTile); ++t)
          for (size_t c = cb; c < std::min(cols_, cb + kTile); ++c) xt[c * n + t] = x[(t0 + t) * cols_ + c];
    const size_t blocks = (cols_ + kRowBlock - 1) / kRowBlock;
    pool.ParallelFor(blocks, [&](size_t begin, size_t end) {
      for (size_t b = begin; b < end; ++b) {
        const size_t r0 = b * kRowBlock, r1 = std::min(cols_, r0 + kRowBlock);
        // rows [r0, r1) against features [r0, cols): y[(c - r0) * cols + r] = H[r][c]
        DotRows(xt.data(), n, r0, r1, xt.data() + r0 * n, cols_ - r0, partial.data() + r0 * cols_, cols_);
      }
    });
    for (size_t r = 0; r < cols_; ++r)
      for (size_t c = r; c < cols_; ++c) h_[r * cols_ + c] += partial[c * cols_ + r];
  }
  for (size_t r = 0; r < cols_; ++r)
    for (size_t c = 0; c < r; ++c) h_[r * cols_ + c] = h_[c * cols_ + r];
  tokens_ += n_tokens;
}

}  // namespace lowbit
