// Walsh–Hadamard transforms for rotation-based quantization (QuaRot, SpinQuant): an orthogonal
// change of basis spreads an outlier channel's energy over all channels, so per-token and
// per-group scales fit the values better. Normalized (1/sqrt(n)), the n x n Hadamard matrix H is
// symmetric and orthogonal, hence its own inverse: H H = I.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lowbit {

// The largest power of two that divides n (the block size of a block-diagonal Hadamard).
size_t LargestPowerOfTwoDivisor(size_t n);

// x <- x H in place for every consecutive block of `block` values of x (block a power of two
// dividing x.size()), H the normalized block x block Walsh–Hadamard matrix. O(n log block).
void HadamardBlocks(std::span<float> x, size_t block);

// Applies HadamardBlocks(row, block) to each of the `rows` rows of a row-major [rows x cols] matrix.
void HadamardRows(std::span<float> m, size_t rows, size_t cols, size_t block);

// A randomized Hadamard rotation Q = diag(signs) H of size n (a power of two): x Q = (x * signs) H.
struct RandomHadamard {
  std::vector<float> signs;  // +-1, [n]
  static RandomHadamard Make(size_t n, uint64_t seed);  // Fail unless n is a power of two
  size_t size() const { return signs.size(); }
  void ApplyRow(std::span<float> x) const;  // x <- x Q
};

}  // namespace lowbit
