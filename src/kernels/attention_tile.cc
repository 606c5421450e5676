// The attention tile step in Highway: dot products four positions per reduction, a vector exp
// (Highway's contrib Exp), and the weighted V sum with the head's output held in registers.
// Per-position calls of a dispatched dot and std::exp made this a third of a calibration pass.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tile.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/reduce-inl.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention_tile.h"

#ifndef LOWBIT_KERNELS_ATTENTION_TILE_SCALAR_  // once, not per target
#define LOWBIT_KERNELS_ATTENTION_TILE_SCALAR_
namespace lowbit {
namespace {

// The scalar steps, shared by the reference and by the vector kernel's odd head sizes.
void RescaleTo(float new_max, float& max, float& sum, float* acc, size_t head_dim) {
  if (new_max <= max) return;
  const float correction = std::exp(max - new_max);  // exp(-inf) = 0 on the first tile
  sum *= correction;
  for (size_t j = 0; j < head_dim; ++j) acc[j] *= correction;
  max = new_max;
}

void AttendHeadScalar(const float* q, size_t head_dim, float scale, const AttentionTile& t, float& max, float& sum,
                      float* acc, float* scores) {
  float tile_max = -INFINITY;
  for (size_t i = 0; i < t.n; ++i) {
    float s = 0;
    for (size_t j = 0; j < head_dim; ++j) s += q[j] * t.k[i * t.k_stride + j];
    scores[i] = s * scale;
    tile_max = std::max(tile_max, scores[i]);
  }
  RescaleTo(tile_max, max, sum, acc, head_dim);
  for (size_t i = 0; i < t.n; ++i) {
    const float p = std::exp(scores[i] - max);
    sum += p;
    for (size_t j = 0; j < head_dim; ++j) acc[j] += p * t.v[i * t.v_stride + j];
  }
}

}  // namespace
}  // namespace lowbit
#endif

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
void AttendTileImpl(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, const AttentionTile& t,
                    OnlineSoftmax state, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const hn::Full128<float> d4;
  const size_t N = hn::Lanes(d);
  constexpr size_t kMaxVectors = 16;  // head_dim up to 16 vectors (256 on AVX-512) in registers
  if (head_dim % N != 0 || head_dim / N > kMaxVectors) {
    for (size_t h = 0; h < heads; ++h)
      AttendHeadScalar(q + h * head_dim, head_dim, scale, t, state.max[h], state.sum[h], state.acc + h * head_dim,
                       scores);
    return;
  }
  const size_t vectors = head_dim / N;
  for (size_t h = 0; h < heads; ++h) {
    const float* qh = q + h * head_dim;
    size_t i = 0;
    for (; i + 4 <= t.n; i += 4) {  // four positions, one reduction
      auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
      for (size_t j = 0; j < head_dim; j += N) {
        const auto qv = hn::LoadU(d, qh + j);
        s0 = hn::MulAdd(qv, hn::LoadU(d, t.k + i * t.k_stride + j), s0);
        s1 = hn::MulAdd(qv, hn::LoadU(d, t.k + (i + 1) * t.k_stride + j), s1);
        s2 = hn::MulAdd(qv, hn::LoadU(d, t.k + (i + 2) * t.k_stride + j), s2);
        s3 = hn::MulAdd(qv, hn::LoadU(d, t.k + (i + 3) * t.k_stride + j), s3);
      }
      hn::StoreU(hn::Mul(SumOfFour(d, s0, s1, s2, s3), hn::Set(d4, scale)), d4, scores + i);
    }
    for (; i < t.n; ++i) {
      auto s = hn::Zero(d);
      for (size_t j = 0; j < head_dim; j += N)
        s = hn::MulAdd(hn::LoadU(d, qh + j), hn::LoadU(d, t.k + i * t.k_stride + j), s);
      scores[i] = hn::GetLane(hn::SumOfLanes(d, s)) * scale;
    }
    float tile_max = -INFINITY;
    for (i = 0; i < t.n; ++i) tile_max = std::max(tile_max, scores[i]);
    float* acc = state.acc + h * head_dim;
    RescaleTo(tile_max, state.max[h], state.sum[h], acc, head_dim);

    const auto max = hn::Set(d, state.max[h]);
    auto sum = hn::Zero(d);
    for (i = 0; i + N <= t.n; i += N) {
      const auto p = hn::Exp(d, hn::Sub(hn::LoadU(d, scores + i), max));
      sum = hn::Add(sum, p);
      hn::StoreU(p, d, scores + i);
    }
    float tail = 0;
    for (; i < t.n; ++i) tail += scores[i] = std::exp(scores[i] - state.max[h]);
    state.sum[h] += hn::GetLane(hn::SumOfLanes(d, sum)) + tail;

    hn::Vec<decltype(d)> out[kMaxVectors];
    for (size_t j = 0; j < vectors; ++j) out[j] = hn::LoadU(d, acc + j * N);
    for (i = 0; i < t.n; ++i) {
      const auto p = hn::Set(d, scores[i]);
      for (size_t j = 0; j < vectors; ++j) out[j] = hn::MulAdd(p, hn::LoadU(d, t.v + i * t.v_stride + j * N), out[j]);
    }
    for (size_t j = 0; j < vectors; ++j) hn::StoreU(out[j], d, acc + j * N);
  }
}
#else
void AttendTileImpl(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, const AttentionTile& t,
                    OnlineSoftmax state, float* HWY_RESTRICT scores) {
  for (size_t h = 0; h < heads; ++h)
    AttendHeadScalar(q + h * head_dim, head_dim, scale, t, state.max[h], state.sum[h], state.acc + h * head_dim,
                     scores);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(AttendTileImpl);

void AttendTile(const float* q, size_t heads, size_t head_dim, float scale, const AttentionTile& tile,
                OnlineSoftmax state, float* scores) {
  HWY_DYNAMIC_DISPATCH(AttendTileImpl)(q, heads, head_dim, scale, tile, state, scores);
}

void AttendTileRef(const float* q, size_t heads, size_t head_dim, float scale, const AttentionTile& tile,
                   OnlineSoftmax state, float* scores) {
  for (size_t h = 0; h < heads; ++h)
    AttendHeadScalar(q + h * head_dim, head_dim, scale, tile, state.max[h], state.sum[h], state.acc + h * head_dim,
                     scores);
}
}  // namespace lowbit
#endif
