// The fp32 prefill GEMM (tokens in vector lanes) against the scalar dot-product reference.
#include "kernels/gemm_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/dot.h"
#include "test_util.h"

namespace lowbit {
namespace {

// At each CPU level that has the GEMM: AVX-512's two-tile bands and AVX2's one-tile bands.
TEST(F32Gemm, MatchesReferenceOverBlocksBandsAndTokenTiles) {
  if (!CpuHasF32Gemm()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // 37 tokens: a pair of tiles and a padded single one; 4099 columns (not a multiple of 16); 2 x
  // F32GemmBlockRows + 7 rows: whole blocks, then a band of 6 and a single row.
  const size_t cols = 4099, n_tokens = 37, rows = 2 * F32GemmBlockRows(cols) + 7, first = 5;
  std::vector<float> w(rows * cols), x(n_tokens * cols);
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  std::vector<float> want(n_tokens * rows);
  DotRowsRef(w.data(), cols, 0, rows, x.data(), n_tokens, want.data(), rows);
  F32TokenTiles tiles(n_tokens, cols);
  tiles.Fill(x.data(), 0, 1);  // in two shares, as a pool's threads fill it
  tiles.Fill(x.data(), 1, tiles.tiles());
  testing_util::ForEachCpuLevel([&](CpuLevel level) {
    if (!CpuHasF32Gemm()) return;
    std::vector<float> got(n_tokens * rows, NAN);
    F32GemmRows(w.data(), cols, tiles, first, rows, got.data(), rows);
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t r = 0; r < rows; ++r) {
        const size_t i = t * rows + r;
        if (r < first) {
          EXPECT_TRUE(std::isnan(got[i])) << "row " << r << " is not the caller's: nothing is written there";
        } else {
          // fp32 sums of 4099 products of unit Gaussians: rounding about 1e-6 of sqrt(cols) * |terms|.
          ASSERT_NEAR(got[i], want[i], 2e-3) << CpuLevelName(level) << " token " << t << " row " << r;
        }
      }
  });
}

}  // namespace
}  // namespace lowbit
