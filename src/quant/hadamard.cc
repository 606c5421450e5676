#include "quant/hadamard.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace lowbit {

size_t LargestPowerOfTwoDivisor(size_t n) { return n == 0 ? 0 : n & (~n + 1); }

void HadamardBlocks(std::span<float> x, size_t block) {
  LOWBIT_CHECK(block > 0 && (block & (block - 1)) == 0 && x.size() % block == 0);
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (size_t start = 0; start < x.size(); start += block) {
    float* v = x.data() + start;
    for (size_t h = 1; h < block; h *= 2)  // butterflies of span h
      for (size_t i = 0; i < block; i += 2 * h)
        for (size_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (size_t i = 0; i < block; ++i) v[i] *= norm;
  }
}

void HadamardRows(std::span<float> m, size_t rows, size_t cols, size_t block) {
  LOWBIT_CHECK(m.size() == rows * cols);
  for (size_t r = 0; r < rows; ++r) HadamardBlocks(m.subspan(r * cols, cols), block);
}

RandomHadamard RandomHadamard::Make(size_t n, uint64_t seed) {
  if (n == 0 || (n & (n - 1)) != 0)
    Fail("Hadamard rotation of size {}: only powers of two are supported (QuaRot's 12/20/28 x 2^k "
         "constructions are not implemented)", n);
  RandomHadamard q;
  q.signs.resize(n);
  std::mt19937_64 rng(seed);
  for (float& s : q.signs) s = (rng() & 1) ? 1.0f : -1.0f;
  return q;
}

void RandomHadamard::ApplyRow(std::span<float> x) const {
  LOWBIT_CHECK(x.size() == signs.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] *= signs[i];
  HadamardBlocks(x, x.size());
}

}  // namespace lowbit
