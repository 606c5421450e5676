#include "kernels/gemm_f32.h"

// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports inside the inlined intrinsics; the values are all written first.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // GCC's name only
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "core/cpu.h"
#include "core/error.h"

namespace lowbit {
namespace {

#define LOWBIT_F32GEMM __attribute__((target("avx512f")))

constexpr size_t kTile = F32TokenTiles::kTokens;
constexpr size_t kBandRows = 6, kBandTiles = 2;  // 12 accumulators, 2 input vectors, a broadcast
// A block of rows (fp32) that stays in L2 while every tile of tokens passes it.
constexpr size_t kBlockBytes = 1 << 20;

template <size_t kRows, size_t kTiles>
LOWBIT_F32GEMM void Band(const float* w, size_t cols, const float* x, size_t tile_floats, size_t t0, size_t n_tokens,
                         float* y, size_t y_stride) {
  __m512 acc[kRows][kTiles];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t t = 0; t < kTiles; ++t) acc[r][t] = _mm512_setzero_ps();
  for (size_t k = 0; k < cols; ++k) {
    __m512 xv[kTiles];
    for (size_t t = 0; t < kTiles; ++t) xv[t] = _mm512_load_ps(x + t * tile_floats + k * kTile);
    for (size_t r = 0; r < kRows; ++r) {
      const __m512 wv = _mm512_set1_ps(w[r * cols + k]);
      for (size_t t = 0; t < kTiles; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  const __m512i token_offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32(static_cast<int>(y_stride)));
  for (size_t t = 0; t < kTiles; ++t) {
    const size_t first = t0 + t * kTile, tokens = std::min(kTile, n_tokens - first);
    const __mmask16 valid = static_cast<__mmask16>((1u << tokens) - 1);
    for (size_t r = 0; r < kRows; ++r) _mm512_mask_i32scatter_ps(y + first * y_stride + r, valid, token_offsets, acc[r][t], 4);
  }
}

// The AVX2 form (CPUs without AVX-512): one tile of 16 tokens as two 8-lane halves against 6 rows,
// 12 accumulators, the rest of the 16 registers for the inputs and the broadcast; no scatter, so
// the sums go out through a buffer.
#define LOWBIT_F32GEMM_AVX2 __attribute__((target("avx2,fma")))

template <size_t kRows>
LOWBIT_F32GEMM_AVX2 void BandAvx2(const float* w, size_t cols, const float* x, size_t t0, size_t n_tokens, float* y,
                                  size_t y_stride) {
  __m256 acc[kRows][2];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t h = 0; h < 2; ++h) acc[r][h] = _mm256_setzero_ps();
  for (size_t k = 0; k < cols; ++k) {
    __m256 xv[2];
    for (size_t h = 0; h < 2; ++h) xv[h] = _mm256_load_ps(x + k * kTile + 8 * h);
    for (size_t r = 0; r < kRows; ++r) {
      // set1 of a loaded float, not _mm256_broadcast_ss(pointer): a builtin that reads through a
      // pointer may read the accumulators, which were then stored back at every step.
      const __m256 wv = _mm256_set1_ps(w[r * cols + k]);
      for (size_t h = 0; h < 2; ++h) acc[r][h] = _mm256_fmadd_ps(wv, xv[h], acc[r][h]);
    }
  }
  alignas(32) float sums[kRows][kTile];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t h = 0; h < 2; ++h) _mm256_store_ps(sums[r] + 8 * h, acc[r][h]);
  const size_t tokens = std::min(kTile, n_tokens - t0);
  for (size_t t = 0; t < tokens; ++t)
    for (size_t r = 0; r < kRows; ++r) y[(t0 + t) * y_stride + r] = sums[r][t];
}

LOWBIT_F32GEMM_AVX2 void BandsAvx2(const float* w, size_t cols, size_t rows, const float* x, size_t t0, size_t n_tokens,
                                   float* y, size_t y_stride) {
  size_t r = 0;
  for (; r + kBandRows <= rows; r += kBandRows) BandAvx2<kBandRows>(w + r * cols, cols, x, t0, n_tokens, y + r, y_stride);
  for (; r < rows; ++r) BandAvx2<1>(w + r * cols, cols, x, t0, n_tokens, y + r, y_stride);
}

bool CpuHasAvx512Gemm() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && CpuLevelAllowed(CpuLevel::kAvx512);
}

template <size_t kTiles>
LOWBIT_F32GEMM void Bands(const float* w, size_t cols, size_t rows, const float* x, size_t tile_floats, size_t t0,
                          size_t n_tokens, float* y, size_t y_stride) {
  size_t r = 0;
  for (; r + kBandRows <= rows; r += kBandRows)
    Band<kBandRows, kTiles>(w + r * cols, cols, x, tile_floats, t0, n_tokens, y + r, y_stride);
  for (; r < rows; ++r) Band<1, kTiles>(w + r * cols, cols, x, tile_floats, t0, n_tokens, y + r, y_stride);
}

}  // namespace

bool CpuHasF32Gemm() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return CpuHasAvx512Gemm() || (avx2 && CpuLevelAllowed(CpuLevel::kAvx2));
}

size_t F32GemmBlockRows(size_t cols) {
  return std::clamp<size_t>(kBlockBytes / (cols * sizeof(float)) / kBandRows * kBandRows, kBandRows, 16 * kBandRows);
}

F32TokenTiles::F32TokenTiles(size_t n_tokens, size_t cols)
    : n_tokens(n_tokens), cols(cols), values(tiles() * cols * kTile, 0.0f) {}

void F32TokenTiles::Fill(const float* x, size_t tile_begin, size_t tile_end) {
  for (size_t t = tile_begin * kTile; t < std::min(n_tokens, tile_end * kTile); ++t) {
    float* to = values.data() + t / kTile * cols * kTile + t % kTile;
    for (size_t k = 0; k < cols; ++k) to[k * kTile] = x[t * cols + k];
  }
}

void F32GemmRows(const float* w, size_t cols, const F32TokenTiles& x, size_t row_begin, size_t row_end, float* y,
                 size_t y_stride) {
  LOWBIT_CHECK(CpuHasF32Gemm() && x.cols == cols);
  const size_t block = F32GemmBlockRows(cols), tile_floats = cols * kTile, tiles = x.tiles();
  for (size_t r0 = row_begin; r0 < row_end; r0 += block) {
    const size_t rows = std::min(block, row_end - r0);
    if (!CpuHasAvx512Gemm()) {
      for (size_t tile = 0; tile < tiles; ++tile)
        BandsAvx2(w + r0 * cols, cols, rows, x.values.data() + tile * tile_floats, tile * kTile, x.n_tokens, y + r0,
                  y_stride);
      continue;
    }
    size_t tile = 0;
    for (; tile + kBandTiles <= tiles; tile += kBandTiles)
      Bands<kBandTiles>(w + r0 * cols, cols, rows, x.values.data() + tile * tile_floats, tile_floats, tile * kTile,
                        x.n_tokens, y + r0, y_stride);
    for (; tile < tiles; ++tile)
      Bands<1>(w + r0 * cols, cols, rows, x.values.data() + tile * tile_floats, tile_floats, tile * kTile, x.n_tokens,
               y + r0, y_stride);
  }
}

}  // namespace lowbit
