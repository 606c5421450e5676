// fp32 dot-product and activation kernels against their scalar references, on every SIMD target
// this CPU runs, with row and token tails and lengths that are not a multiple of the vector.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <numbers>

#include "formats/minifloat.h"
#include "kernels/activation.h"
#include "kernels/attention_kivi_int8.h"
#include "kernels/attention_tile.h"
#include "kernels/dot.h"
#include "test_util.h"

namespace lowbit {
namespace {

using testing_util::ForEachTarget;

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// `tiles` tiles of up to `per_tile` positions (tile_at(t) gives tile t) through AttendTile or its
// reference, from an empty online softmax: each head's output, acc / sum.
std::vector<float> AttendTiles(bool reference, const std::vector<float>& q, size_t heads, size_t head_dim,
                               size_t tiles, size_t per_tile, const std::function<AttentionTile(size_t)>& tile_at) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> max(heads, -INFINITY), sum(heads, 0.0f), acc(heads * head_dim, 0.0f), scores(per_tile);
  for (size_t t = 0; t < tiles; ++t)
    (reference ? AttendTileRef : AttendTile)(q.data(), heads, head_dim, scale, 0.0f, tile_at(t),
                                             {max.data(), sum.data(), acc.data()}, scores.data());
  for (size_t h = 0; h < heads; ++h)
    for (size_t j = 0; j < head_dim; ++j) acc[h * head_dim + j] /= sum[h];
  return acc;
}

TEST(DotRows, MatchesReferenceOnEveryTarget) {
  for (const size_t cols : {size_t{7}, size_t{32}, size_t{256}, size_t{300}})
    for (const size_t rows : {size_t{1}, size_t{4}, size_t{9}})
      for (const size_t tokens : {size_t{1}, size_t{4}, size_t{6}, size_t{37}}) {
        const std::vector<float> w = Gaussian(rows * cols, 1), x = Gaussian(tokens * cols, 2);
        const size_t stride = rows + 3;  // y rows wider than the block: the kernel must not touch the gap
        std::vector<float> want(tokens * stride, -7.0f);
        DotRowsRef(w.data(), cols, 0, rows, x.data(), tokens, want.data(), stride);
        ForEachTarget([&](const std::string& target) {
          std::vector<float> got(tokens * stride, -7.0f);
          DotRows(w.data(), cols, 0, rows, x.data(), tokens, got.data(), stride);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-4 * std::sqrt(static_cast<double>(cols)))
                << fmt::format("rows {} cols {} tokens {} on {} at {}", rows, cols, tokens, target, i);
        });
      }
}

TEST(DotRows, RowRangeWritesOnlyItsRows) {
  const size_t rows = 12, cols = 64, tokens = 5;
  const std::vector<float> w = Gaussian(rows * cols, 3), x = Gaussian(tokens * cols, 4);
  std::vector<float> y(tokens * rows, -7.0f), want(tokens * rows, -7.0f);
  DotRows(w.data(), cols, 3, 10, x.data(), tokens, y.data(), rows);
  DotRowsRef(w.data(), cols, 3, 10, x.data(), tokens, want.data(), rows);
  for (size_t t = 0; t < tokens; ++t)
    for (size_t r = 0; r < rows; ++r) {
      if (r < 3 || r >= 10) {
        EXPECT_EQ(y[t * rows + r], -7.0f);
      } else {
        EXPECT_NEAR(y[t * rows + r], want[t * rows + r], 1e-4);
      }
    }
}

TEST(SiluMul, MatchesReferenceOnEveryTarget) {
  std::vector<float> gate = Gaussian(203, 5, 6.0f), up = Gaussian(203, 6);
  // Extremes: silu(-100) underflows to -0 * up, silu(100) = 100; exp must not overflow either way.
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f, gate[3] = -88.5f, gate[4] = 30.0f;
  std::vector<float> want(gate.size());
  SiluMulRef(gate.data(), up.data(), gate.size(), want.data());
  EXPECT_FLOAT_EQ(want[1], 100.0f * up[1]);  // the reference itself: silu(g) -> g for large g
  EXPECT_EQ(want[2], 0.0f);
  ForEachTarget([&](const std::string& target) {
    std::vector<float> got = gate;
    SiluMul(got.data(), up.data(), got.size(), got.data());  // in place, as the forward pass may
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-30) << target << " at " << i << " g=" << gate[i];
  });
}

// GELU's tanh form against values computed from its definition in double (PyTorch's
// gelu(approximate="tanh") gives the same: gelu(1) = 0.841192, gelu(-1) = -0.158808).
TEST(GeluTanhMul, MatchesDefinitionAndReferenceOnEveryTarget) {
  std::vector<float> gate = Gaussian(203, 5, 4.0f), up = Gaussian(203, 6);
  gate[0] = 1.0f, gate[1] = -1.0f, gate[2] = 0.0f, gate[3] = -30.0f, gate[4] = 30.0f, up[0] = up[1] = 1.0f;
  std::vector<float> want(gate.size());
  GeluTanhMulRef(gate.data(), up.data(), gate.size(), want.data());
  EXPECT_NEAR(want[0], 0.841192f, 1e-6f);
  EXPECT_NEAR(want[1], -0.158808f, 1e-6f);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double exact = 0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g))) * up[i];
    ASSERT_NEAR(want[i], exact, 4e-6 * std::fabs(exact) + 1e-12) << "g=" << g;
  }
  ForEachTarget([&](const std::string& target) {
    std::vector<float> got = gate;
    GeluTanhMul(got.data(), up.data(), got.size(), got.data());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 4e-6 * std::fabs(want[i]) + 1e-12) << target << " at " << i << " g=" << gate[i];
  });
}

// GPT-OSS's clamped SwiGLU by hand: g = min(gate, limit), u = clamp(up, -limit, limit), g sigmoid(alpha g) (u + 1).
TEST(SwigluClampedMul, MatchesTheDefinitionByHand) {
  const float gate[] = {2.0f, 9.0f, -3.0f, 0.0f}, up[] = {0.5f, -8.0f, 7.5f, 3.0f};
  float out[4];
  SwigluClampedMul(gate, up, 4, 1.702f, 7.0f, out);
  const auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  EXPECT_NEAR(out[0], 2 * sigmoid(1.702 * 2) * 1.5, 1e-6);    // neither clamped
  EXPECT_NEAR(out[1], 7 * sigmoid(1.702 * 7) * -6.0, 1e-5);   // gate down to 7, up up to -7
  EXPECT_NEAR(out[2], -3 * sigmoid(1.702 * -3) * 8.0, 1e-6);  // a negative gate is not clamped; up down to 7
  EXPECT_EQ(out[3], 0.0f);
}

// Three tiles in a row through the online softmax (the second with larger scores, so the running
// maximum grows and earlier output is rescaled), against the reference and against the exact
// softmax-weighted sum computed directly.
// With a soft-cap (Gemma 2), every score is cap * tanh(score / cap) before the softmax.
TEST(AttendTile, OnlineSoftmaxMatchesReferenceAndDirectSoftmax) {
  for (const float softcap : {0.0f, 1.5f})
  for (const size_t head_dim : {size_t{20}, size_t{32}, size_t{80}, size_t{128}, size_t{256}})
    for (const size_t heads : {size_t{1}, size_t{4}, size_t{7}}) {  // 7: GQA groups of 4 and 3
      const size_t stride = head_dim + 8, tiles = 3, per_tile = 13;  // K/V rows wider than a head
      std::vector<float> k = Gaussian(tiles * per_tile * stride, 7), v = Gaussian(tiles * per_tile * stride, 8);
      for (size_t i = per_tile; i < 2 * per_tile; ++i)
        for (size_t j = 0; j < head_dim; ++j) k[i * stride + j] *= 4.0f;
      const std::vector<float> q = Gaussian(heads * head_dim, 9);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const auto run = [&](bool reference) {
        std::vector<float> max(heads, -INFINITY), sum(heads, 0.0f), acc(heads * head_dim, 0.0f), scores(per_tile);
        for (size_t t = 0; t < tiles; ++t) {
          const AttentionTile tile{&k[t * per_tile * stride], stride, &v[t * per_tile * stride], stride, per_tile};
          (reference ? AttendTileRef : AttendTile)(q.data(), heads, head_dim, scale, softcap, tile,
                                                   {max.data(), sum.data(), acc.data()}, scores.data());
        }
        for (size_t h = 0; h < heads; ++h)
          for (size_t j = 0; j < head_dim; ++j) acc[h * head_dim + j] /= sum[h];
        return acc;
      };
      const std::vector<float> want = run(true);
      for (size_t h = 0; h < heads; ++h) {  // the reference against softmax computed in double
        const size_t n = tiles * per_tile;
        std::vector<double> logits(n);
        double max = -INFINITY, total = 0;
        for (size_t i = 0; i < n; ++i) {
          for (size_t j = 0; j < head_dim; ++j) logits[i] += static_cast<double>(q[h * head_dim + j]) * k[i * stride + j];
          logits[i] *= scale;
          if (softcap > 0) logits[i] = softcap * std::tanh(logits[i] / softcap);
          max = std::max(max, logits[i]);
        }
        for (double& l : logits) total += l = std::exp(l - max);
        for (size_t j = 0; j < head_dim; ++j) {
          double o = 0;
          for (size_t i = 0; i < n; ++i) o += logits[i] / total * v[i * stride + j];
          ASSERT_NEAR(want[h * head_dim + j], o, 1e-5) << "head_dim " << head_dim << " head " << h << " cap " << softcap;
        }
      }
      ForEachTarget([&](const std::string& target) {
        const std::vector<float> got = run(false);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5) << "head_dim " << head_dim << " heads " << heads << " cap " << softcap
                                              << " on " << target;
      });
    }
}

// A 16-bit KV cache is read in place, each value widened in registers: the result must be exactly
// the result on the same values stored as fp32 (same operations, same order), on every target and
// in the reference, with the next tile's prefetch pointers set or not.
TEST(AttendTile, SixteenBitTilesEqualTheirValuesInFp32) {
  for (const TileElement element : {TileElement::kF16, TileElement::kBF16})
    for (const size_t head_dim : {size_t{20}, size_t{64}, size_t{128}})
      for (const size_t heads : {size_t{1}, size_t{2}, size_t{4}, size_t{7}}) {
        const size_t stride = head_dim + 16, tiles = 3, per_tile = 13;
        std::vector<float> k = Gaussian(tiles * per_tile * stride, 10, 2.0f), v = Gaussian(tiles * per_tile * stride, 11);
        std::vector<uint16_t> k16(k.size()), v16(v.size());
        const bool f16 = element == TileElement::kF16;
        for (size_t i = 0; i < k.size(); ++i) {  // the fp32 copy holds exactly the 16-bit values
          k16[i] = f16 ? Fp32ToFp16(k[i]) : Fp32ToBf16(k[i]);
          v16[i] = f16 ? Fp32ToFp16(v[i]) : Fp32ToBf16(v[i]);
          k[i] = f16 ? Fp16ToFp32(k16[i]) : Bf16ToFp32(k16[i]);
          v[i] = f16 ? Fp16ToFp32(v16[i]) : Bf16ToFp32(v16[i]);
        }
        const std::vector<float> q = Gaussian(heads * head_dim, 12);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        const auto run = [&](bool reference, bool sixteen) {
          std::vector<float> max(heads, -INFINITY), sum(heads, 0.0f), acc(heads * head_dim, 0.0f), scores(per_tile);
          for (size_t t = 0; t < tiles; ++t) {
            const size_t at = t * per_tile * stride, next = t + 1 < tiles ? at + per_tile * stride : at;
            AttentionTile tile{&k[at], stride, &v[at], stride, per_tile};
            if (sixteen) {
              tile = {&k16[at], stride, &v16[at], stride, per_tile, element};
              tile.next_k = &k16[next];
              tile.next_v = &v16[next];
            }
            (reference ? AttendTileRef : AttendTile)(q.data(), heads, head_dim, scale, 0.0f, tile,
                                                     {max.data(), sum.data(), acc.data()}, scores.data());
          }
          return acc;
        };
        const auto label = [&] { return fmt::format("{} head_dim {} heads {}", f16 ? "fp16" : "bf16", head_dim, heads); };
        ASSERT_EQ(run(true, true), run(true, false)) << label();
        ForEachTarget([&](const std::string& target) {
          ASSERT_EQ(run(false, true), run(false, false)) << label() << " on " << target;
        });
      }
}

// An FP8 tile read in place (E4M3 "fn" or E5M2 bytes, one scale per tensor for K and one for V)
// against the fp32 tile of the values it stands for, on every target and in the reference: every
// finite code, subnormals included (E4M3's are widened through fp16 at 1/256 of their value).
TEST(AttendTile, Fp8TilesEqualTheirDecodedValues) {
  for (const TileElement element : {TileElement::kE4M3, TileElement::kE5M2})
    for (const size_t head_dim : {size_t{20}, size_t{128}})
      for (const size_t heads : {size_t{1}, size_t{4}, size_t{6}}) {
        const MiniFloat& format = element == TileElement::kE4M3 ? kE4M3 : kE5M2;
        const size_t stride = head_dim + 16, tiles = 3, per_tile = 13, rows = tiles * per_tile;
        const float largest = element == TileElement::kE4M3 ? 448.0f : 57344.0f;  // keys within +-4, values +-1
        const float k_scale = 4.0f / largest, v_scale = 1.0f / largest;
        std::vector<uint8_t> k8(rows * stride), v8(rows * stride);
        std::vector<float> k(k8.size()), v(v8.size());
        std::mt19937 rng(23);
        const auto finite_code = [&] {
          for (;;)
            if (const uint8_t code = static_cast<uint8_t>(rng()); std::isfinite(DecodeMiniFloat(format, code))) return code;
        };
        for (size_t i = 0; i < k8.size(); ++i) {
          k8[i] = finite_code();
          v8[i] = finite_code();
          k[i] = DecodeMiniFloat(format, k8[i]) * k_scale;
          v[i] = DecodeMiniFloat(format, v8[i]) * v_scale;
        }
        const std::vector<float> q = Gaussian(heads * head_dim, 15);
        const auto run = [&](bool reference, bool fp8) {
          return AttendTiles(reference, q, heads, head_dim, tiles, per_tile, [&](size_t t) {
            const size_t at = t * per_tile * stride;
            if (!fp8) return AttentionTile{&k[at], stride, &v[at], stride, per_tile};
            AttentionTile tile{&k8[at], stride, &v8[at], stride, per_tile, element};
            tile.k_tensor_scale = k_scale;
            tile.v_tensor_scale = v_scale;
            if (t + 1 < tiles) {
              tile.next_k = &k8[at + per_tile * stride];
              tile.next_v = &v8[at + per_tile * stride];
            }
            return tile;
          });
        };
        const std::vector<float> want = run(true, false);
        const auto expect_near = [&](const std::vector<float>& got, const std::string& where) {
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
                << format.name << " head_dim " << head_dim << " heads " << heads << " " << where << " at " << i;
        };
        expect_near(run(true, true), "reference");
        ForEachTarget([&](const std::string& target) { expect_near(run(false, true), target); });
      }
}

// KIVI tiles read from their codes (kU4 / kU2: K per channel over a block of 32 positions, V per
// row, each with a scale and a bias) against the fp32 tile of the values they stand for, on every
// target and in the reference, with fp32 dots and with the integer dots generation allows. Tiles
// start 3 positions into the block and hold 21 (chunks cut at both ends); 7 heads take a group of 4
// and one of 3; head_dim 20 fits no chunk (the scalar steps), 96 takes the int8 query 32 channels at
// a time (64 and 128: 64 and 128 at a time), 576 (DeepSeek's cached latent) 64 at a time.
TEST(AttendTile, KiviTilesEqualTheirDecodedValues) {
  for (const int bits : {4, 2})
    for (const size_t head_dim : {size_t{20}, size_t{64}, size_t{96}, size_t{128}, size_t{576}})
      for (const size_t heads : {size_t{1}, size_t{7}}) {
        const size_t block = 32, first = 3, per_tile = 21, tiles = 3, levels = size_t{1} << bits;
        const size_t k_row = block * bits / 8, v_row = head_dim * bits / 8;
        std::vector<uint8_t> k_codes(tiles * head_dim * k_row), v_codes(tiles * per_tile * v_row);
        std::vector<float> k_scales(tiles * head_dim), k_biases(tiles * head_dim), v_scales(tiles * per_tile),
            v_biases(tiles * per_tile);
        std::vector<float> k(tiles * per_tile * head_dim), v(tiles * per_tile * head_dim);
        std::mt19937 rng(19);
        const auto uniform = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
        for (auto* bytes : {&k_codes, &v_codes})
          for (uint8_t& byte : *bytes) byte = static_cast<uint8_t>(rng());
        for (float& x : k_scales) x = uniform(0.05f, 0.5f);
        for (float& x : v_scales) x = uniform(0.05f, 0.5f);
        for (auto* biases : {&k_biases, &v_biases})
          for (float& x : *biases) x = uniform(-1.0f, 1.0f);
        const auto code = [&](const std::vector<uint8_t>& bytes, size_t row_bytes, size_t row, size_t index) {
          return static_cast<float>((bytes[row * row_bytes + index * bits / 8] >> (index * bits % 8)) & (levels - 1));
        };
        for (size_t t = 0; t < tiles; ++t)
          for (size_t i = 0; i < per_tile; ++i)
            for (size_t j = 0; j < head_dim; ++j) {
              const size_t channel = t * head_dim + j, position = t * per_tile + i;
              k[position * head_dim + j] = code(k_codes, k_row, channel, first + i) * k_scales[channel] + k_biases[channel];
              v[position * head_dim + j] = code(v_codes, v_row, position, j) * v_scales[position] + v_biases[position];
            }
        const std::vector<float> q = Gaussian(heads * head_dim, 17);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        const auto run = [&](bool reference, bool packed, bool int8_dots = false) {
          std::vector<float> max(heads, -INFINITY), sum(heads, 0.0f), acc(heads * head_dim, 0.0f), scores(per_tile);
          for (size_t t = 0; t < tiles; ++t) {
            AttentionTile tile{&k[t * per_tile * head_dim], head_dim, &v[t * per_tile * head_dim], head_dim, per_tile};
            if (packed) {
              tile = {&k_codes[t * head_dim * k_row], k_row, &v_codes[t * per_tile * v_row], v_row, per_tile,
                      bits == 4 ? TileElement::kU4 : TileElement::kU2};
              tile.k_scales = &k_scales[t * head_dim];
              tile.k_biases = &k_biases[t * head_dim];
              tile.v_scales = &v_scales[t * per_tile];
              tile.v_biases = &v_biases[t * per_tile];
              tile.k_first = first;
              tile.k_block = block;
              tile.int8_dots = int8_dots;
            }
            (reference ? AttendTileRef : AttendTile)(q.data(), heads, head_dim, scale, 0.0f, tile,
                                                     {max.data(), sum.data(), acc.data()}, scores.data());
          }
          for (size_t i = 0; i < acc.size(); ++i) acc[i] /= sum[i / head_dim];  // the state holds acc up to its max
          return acc;
        };
        const std::vector<float> want = run(true, false);
        const auto expect_near = [&](const std::vector<float>& got, const std::string& where, double tolerance) {
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::fabs(want[i])))
                << "int" << bits << " head_dim " << head_dim << " heads " << heads << " " << where << " at " << i;
        };
        expect_near(run(true, true), "reference", 1e-4);
        AttentionTile shape{k_codes.data(), k_row, v_codes.data(), v_row, per_tile,
                            bits == 4 ? TileElement::kU4 : TileElement::kU2};
        shape.k_block = block;
        const bool vnni = kivi_int8::Fits(shape, head_dim);
        // The integer dots round the query and the weights to 8 bits: on these tiles, whose scores
        // spread over +-10 (a far peakier softmax than a model's), that moves outputs by up to 2.1 %
        // (KiviInt8Dots below checks the integer sums themselves exactly).
        ForEachTarget([&](const std::string& target) {
          expect_near(run(false, true), target, 1e-4);
          expect_near(run(false, true, true), target + " int8 dots", vnni && target.starts_with("AVX3") ? 3e-2 : 1e-4);
        });
      }
}

// The int8 dots of KIVI tiles (AVX-512 VNNI) on factors their 8-bit grids hold exactly: each 32
// channels' q_j a_j a multiple of 2^-7 with the largest at 127 x 2^-7 (the query on that grid, K's
// channel scales 1, or 2 on half the channels with the query halved there), each head's w_i s_i a
// multiple of 2^-9 with the largest at 255 x 2^-9 (V's row scales 1 or 1/2 likewise). The integer
// dots then add nothing but fp32 rounding: the scores and V sums, biases included, equal the codes
// times the factors, summed in double. 4-bit K blocks
// of 64 (two 32-position slices) read at [3, 58) and [32, 64), 2-bit ones of 32 at [3, 24) and [0, 32);
// V tiles with tails of 1 to 3 positions; 1 to 4 heads. A negative weight is refused with the output
// untouched.
TEST(KiviInt8Dots, ExactOnFactorsTheirGridsHold) {
  for (const int bits : {4, 2}) {
    const size_t head_dim = 128, block = bits == 4 ? 64 : 32, k_row = block * bits / 8, v_row = head_dim * bits / 8;
    const TileElement element = bits == 4 ? TileElement::kU4 : TileElement::kU2;
    AttentionTile probe{nullptr, k_row, nullptr, v_row, block, element};
    probe.k_block = block;
    if (!kivi_int8::Fits(probe, head_dim)) GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    std::mt19937 rng(29);
    std::vector<uint8_t> k_codes(head_dim * k_row), v_codes(block * v_row);
    for (auto* bytes : {&k_codes, &v_codes})
      for (uint8_t& byte : *bytes) byte = static_cast<uint8_t>(rng());
    const auto code = [&](const std::vector<uint8_t>& bytes, size_t row_bytes, size_t row, size_t index) {
      return static_cast<double>((bytes[row * row_bytes + index * bits / 8] >> (index * bits % 8)) & ((1 << bits) - 1));
    };
    // n values: whole multiples of unit in [lo, top] x unit, each run of `run` holding top itself.
    const auto on_grid = [&](size_t n, size_t run, int lo, int top, float unit) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::uniform_int_distribution<int>(lo, top)(rng)) * unit;
      for (size_t g = 0; g < n; g += run) x[g + rng() % std::min(run, n - g)] = static_cast<float>(top) * unit;
      return x;
    };
    using Window = std::pair<size_t, size_t>;  // first position, positions
    const std::vector<Window> windows = bits == 4 ? std::vector<Window>{{3, 55}, {32, 32}} : std::vector<Window>{{3, 21}, {0, 32}};
    for (const size_t heads : {size_t{1}, size_t{3}, size_t{4}}) {
      SCOPED_TRACE(fmt::format("int{} heads {}", bits, heads));
      const std::vector<float> qa = on_grid(heads * head_dim, 32, -127, 127, 1.0f / 128);
      std::vector<float> q(qa.size()), k_scales(head_dim), k_biases = Gaussian(head_dim, 31);
      for (size_t j = 0; j < head_dim; ++j) k_scales[j] = j % 2 ? 2.0f : 1.0f;
      for (size_t i = 0; i < q.size(); ++i) q[i] = qa[i] / k_scales[i % head_dim];
      const float scale = 0.125f;
      for (const auto& [first, n] : windows) {
        AttentionTile t{k_codes.data(), k_row, v_codes.data(), v_row, n, element};
        t.k_block = block;
        t.k_first = first;
        t.k_scales = k_scales.data();
        t.k_biases = k_biases.data();
        const size_t c0 = first / 32 * 32, c1 = (first + n + 31) / 32 * 32;
        std::vector<float> sc(heads * (c1 - c0));
        kivi_int8::Scores(q.data(), heads, head_dim, scale, t, c0, c1, sc.data());
        for (size_t h = 0; h < heads; ++h)
          for (size_t i = 0; i < c1 - c0; ++i) {
            double dot = 0;
            for (size_t j = 0; j < head_dim; ++j)
              dot += qa[h * head_dim + j] * code(k_codes, k_row, j, c0 + i) + double{q[h * head_dim + j]} * k_biases[j];
            ASSERT_NEAR(sc[h * (c1 - c0) + i], scale * dot, 1e-5 * (1 + std::fabs(scale * dot)))
                << "first " << first << " head " << h << " position " << c0 + i;
          }
      }
      for (const size_t n : {block, block - 1, block - 3, size_t{5}}) {
        AttentionTile t{k_codes.data(), k_row, v_codes.data(), v_row, n, element};
        t.k_block = block;
        const std::vector<float> pa = on_grid(heads * n, n, 0, 255, 1.0f / 512);
        std::vector<float> weights(pa.size()), v_scales(n), v_biases = Gaussian(n, 37);
        for (size_t i = 0; i < n; ++i) v_scales[i] = i % 2 ? 0.5f : 1.0f;
        for (size_t i = 0; i < weights.size(); ++i) weights[i] = pa[i] / v_scales[i % n];
        t.v_scales = v_scales.data();
        t.v_biases = v_biases.data();
        std::vector<float> acc = Gaussian(heads * head_dim, 41);
        const std::vector<float> before = acc;
        ASSERT_TRUE(kivi_int8::Values(weights.data(), n, heads, head_dim, t, acc.data()));
        for (size_t h = 0; h < heads; ++h)
          for (size_t e = 0; e < head_dim; ++e) {
            double sum = before[h * head_dim + e];
            for (size_t i = 0; i < n; ++i)
              sum += pa[h * n + i] * code(v_codes, v_row, i, e) + double{weights[h * n + i]} * v_biases[i];
            ASSERT_NEAR(acc[h * head_dim + e], sum, 1e-5 * (1 + std::fabs(sum))) << "n " << n << " head " << h << " element " << e;
          }
        std::vector<float> negative = weights;
        negative.back() = -1.0f / 512;
        const std::vector<float> summed = acc;
        ASSERT_FALSE(kivi_int8::Values(negative.data(), n, heads, head_dim, t, acc.data()));
        EXPECT_EQ(acc, summed);
      }
    }
  }
}

// An int8 tile read in place (codes offset by 128, one scale per row) against the fp32 tile of the
// values it stands for, on every target and in the reference: the same softmax up to the order of
// the scale multiplications.
TEST(AttendTile, Int8TilesEqualTheirDecodedValues) {
  for (const size_t head_dim : {size_t{20}, size_t{128}})
    for (const size_t heads : {size_t{1}, size_t{4}}) {
      const size_t stride = head_dim + 16, tiles = 3, per_tile = 13, rows = tiles * per_tile;
      std::vector<uint8_t> k8(rows * stride), v8(rows * stride);
      std::vector<float> k(k8.size()), v(v8.size()), k_scales(rows), v_scales(rows);
      std::mt19937 rng(13);
      for (size_t i = 0; i < rows; ++i) {
        k_scales[i] = 0.01f + 0.001f * static_cast<float>(i);
        v_scales[i] = 0.02f - 0.0003f * static_cast<float>(i);
        for (size_t j = 0; j < stride; ++j) {
          k8[i * stride + j] = static_cast<uint8_t>(rng());
          v8[i * stride + j] = static_cast<uint8_t>(rng());
          k[i * stride + j] = static_cast<float>(k8[i * stride + j] - 128) * k_scales[i];
          v[i * stride + j] = static_cast<float>(v8[i * stride + j] - 128) * v_scales[i];
        }
      }
      const std::vector<float> q = Gaussian(heads * head_dim, 14);
      const auto run = [&](bool reference, bool int8) {
        return AttendTiles(reference, q, heads, head_dim, tiles, per_tile, [&](size_t t) {
          const size_t first = t * per_tile, at = first * stride;
          if (!int8) return AttentionTile{&k[at], stride, &v[at], stride, per_tile};
          AttentionTile tile{&k8[at], stride, &v8[at], stride, per_tile, TileElement::kI8};
          tile.k_scales = &k_scales[first];
          tile.v_scales = &v_scales[first];
          if (t + 1 < tiles) {
            tile.next_k = &k8[at + per_tile * stride];
            tile.next_v = &v8[at + per_tile * stride];
          }
          return tile;
        });
      };
      const std::vector<float> want = run(true, false);
      const auto expect_near = [&](const std::vector<float>& got, const std::string& where) {
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5) << "head_dim " << head_dim << " heads " << heads << " " << where;
      };
      expect_near(run(true, true), "reference");
      ForEachTarget([&](const std::string& target) { expect_near(run(false, true), target); });
    }
}

}  // namespace
}  // namespace lowbit
