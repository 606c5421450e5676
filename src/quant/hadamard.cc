#include "quant/hadamard.h"

#include <algorithm>
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

namespace {

bool IsOddPrime(size_t q) {
  if (q < 3 || q % 2 == 0) return false;
  for (size_t d = 3; d * d <= q; d += 2)
    if (q % d == 0) return false;
  return true;
}

// The Jacobsthal matrix's entry chi(j - i) over GF(q): the quadratic character, 0 on the diagonal.
std::vector<int> QuadraticCharacter(size_t q) {
  std::vector<int> chi(q, -1);
  chi[0] = 0;
  for (size_t x = 1; x < q; ++x) chi[x * x % q] = 1;
  return chi;
}

// The core of both constructions: [0, 1^T; sign 1, Q], Q[i][j] = chi(j - i). Paley I's (sign -1) is
// skew, Paley II's (sign +1) a symmetric conference matrix.
std::vector<int> PaleyCore(size_t q, int sign) {
  const std::vector<int> chi = QuadraticCharacter(q);
  const size_t m = q + 1;
  std::vector<int> c(m * m, 0);
  for (size_t j = 1; j < m; ++j) c[j] = 1, c[j * m] = sign;
  for (size_t i = 0; i < q; ++i)
    for (size_t j = 0; j < q; ++j) c[(i + 1) * m + j + 1] = chi[(j + q - i) % q];
  return c;
}

constexpr size_t kLargestSmallOrder = 256;

}  // namespace

std::vector<float> PaleyHadamard(size_t order) {
  std::vector<float> h;
  if (order >= 4 && IsOddPrime(order - 1) && (order - 1) % 4 == 3) {  // Paley I: I + core
    const std::vector<int> c = PaleyCore(order - 1, -1);
    h.resize(order * order);
    for (size_t i = 0; i < order; ++i)
      for (size_t j = 0; j < order; ++j) h[i * order + j] = static_cast<float>(c[i * order + j] + (i == j));
  } else if (order % 2 == 0 && IsOddPrime(order / 2 - 1) && (order / 2 - 1) % 4 == 1) {
    // Paley II: each 0 of the core becomes [1 -1; -1 -1], each +-1 becomes +-[1 1; 1 -1].
    const size_t m = order / 2;
    const std::vector<int> c = PaleyCore(m - 1, 1);
    h.resize(order * order);
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < m; ++j) {
        const int e = c[i * m + j];
        const float block[2][2] = {{e == 0 ? 1.0f : e, e == 0 ? -1.0f : e},
                                   {e == 0 ? -1.0f : e, e == 0 ? -1.0f : -e}};
        for (size_t a = 0; a < 2; ++a)
          for (size_t b = 0; b < 2; ++b) h[(2 * i + a) * order + 2 * j + b] = block[a][b];
      }
  }
  return h;
}

RandomHadamard RandomHadamard::Make(size_t n, uint64_t seed) {
  if (n == 0) Fail("Hadamard rotation of size 0");
  // The smallest k = n / 2^j that is 1 or a Paley order.
  size_t k = n / LargestPowerOfTwoDivisor(n);
  std::vector<float> small;
  while (k != 1 && k <= kLargestSmallOrder && (small = PaleyHadamard(k)).empty() && n % (2 * k) == 0) k *= 2;
  if (k != 1 && small.empty())
    Fail("Hadamard rotation of size {}: {} is not k x 2^j for k 1 or a Paley order up to {} (q + 1 for a prime "
         "q = 3 mod 4, 2 (q + 1) for a prime q = 1 mod 4)", n, n, kLargestSmallOrder);
  RandomHadamard q;
  q.signs.resize(n);
  std::mt19937_64 rng(seed);
  for (float& s : q.signs) s = (rng() & 1) ? 1.0f : -1.0f;
  const float norm = 1.0f / std::sqrt(static_cast<float>(k));
  for (float& v : small) v *= norm;
  q.small = std::move(small);
  return q;
}

size_t RandomHadamard::small_order() const {
  size_t k = 1;
  while (k * k < small.size()) ++k;
  return k;
}

void RandomHadamard::ApplyRow(std::span<float> x) const {
  LOWBIT_CHECK(x.size() == signs.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] *= signs[i];
  const size_t k = small_order(), b = x.size() / k;
  HadamardBlocks(x, b);  // x as [k x b]: each row through H_b
  if (k == 1) return;
  // then each column through H_k: row a' of the result is sum_a H_k[a][a'] x[a], contiguous over b.
  std::vector<float> y(x.size(), 0.0f);
  for (size_t out = 0; out < k; ++out) {
    float* dst = y.data() + out * b;
    for (size_t in = 0; in < k; ++in) {
      const float h = small[in * k + out];
      const float* src = x.data() + in * b;
      for (size_t j = 0; j < b; ++j) dst[j] += h * src[j];
    }
  }
  std::copy(y.begin(), y.end(), x.begin());
}

}  // namespace lowbit
