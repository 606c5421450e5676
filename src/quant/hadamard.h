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

// The +-1 Hadamard matrix [order x order] (row-major) of Paley's constructions: order q + 1 for a prime
// q = 3 mod 4 (12, 20, 24, 44, 48, 60, 84, ...) or 2 (q + 1) for a prime q = 1 mod 4 (12, 28, 36, 60, 76,
// ...); empty for any other order. H H^T = order I.
std::vector<float> PaleyHadamard(size_t order);

// A randomized Hadamard rotation Q = diag(signs) (H_k (x) H_b) of size n = k b, b a power of two and k
// 1 or a Paley order (the smallest that divides n by a power of two), both normalized: so the residual
// widths that are not powers of two (3584 = 28 x 128, 5120 = 20 x 256, 7168 = 28 x 256) rotate as
// QuaRot rotates them. x Q = ((x * signs) (I_k (x) H_b)) (H_k (x) I_b).
struct RandomHadamard {
  std::vector<float> signs;  // +-1, [n]
  std::vector<float> small;  // H_k / sqrt(k), [k x k]; empty when n is a power of two (k = 1)
  static RandomHadamard Make(size_t n, uint64_t seed);  // Fail where no such k exists (up to 256)
  size_t size() const { return signs.size(); }
  size_t small_order() const;  // k
  void ApplyRow(std::span<float> x) const;  // x <- x Q
};

}  // namespace lowbit
