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

void AttendHeadScalar(const float* q, size_t head_dim, float scale, float softcap, const AttentionTile& t,
                      float& max, float& sum, float* acc, float* scores) {
  float tile_max = -INFINITY;
  for (size_t i = 0; i < t.n; ++i) {
    float s = 0;
    for (size_t j = 0; j < head_dim; ++j) s += q[j] * t.k[i * t.k_stride + j];
    scores[i] = s * scale;
    if (softcap > 0) scores[i] = softcap * std::tanh(scores[i] / softcap);
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
// kVectors = head_dim / lanes, fixed at compile time so a head's output stays in registers.
// scores[0..n) <- softcap * tanh(scores / softcap).
void SoftCap(float softcap, size_t n, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto cap = hn::Set(d, softcap), inv = hn::Set(d, 1.0f / softcap);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(cap, hn::Tanh(d, hn::Mul(hn::LoadU(d, scores + i), inv))), d, scores + i);
  for (; i < n; ++i) scores[i] = softcap * std::tanh(scores[i] / softcap);
}

template <size_t kVectors>
void AttendHeads(const float* HWY_RESTRICT q, size_t heads, float scale, float softcap, const AttentionTile& t,
                 OnlineSoftmax state, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const hn::Full128<float> d4;
  const size_t N = hn::Lanes(d), head_dim = kVectors * N;
  // Independent partial outputs for consecutive positions, so short heads still keep several
  // FMA chains in flight (one chain per vector would wait on the FMA latency every position).
  constexpr size_t kSets = kVectors <= 2 ? 4 : kVectors == 4 ? 2 : 1;
  for (size_t h = 0; h < heads; ++h) {
    const float* qh = q + h * head_dim;
    hn::Vec<decltype(d)> qv[kVectors];
    for (size_t j = 0; j < kVectors; ++j) qv[j] = hn::LoadU(d, qh + j * N);
    size_t i = 0;
    for (; i + 4 <= t.n; i += 4) {  // four positions, one reduction
      const float* k = t.k + i * t.k_stride;
      auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
      for (size_t j = 0; j < kVectors; ++j) {
        s0 = hn::MulAdd(qv[j], hn::LoadU(d, k + j * N), s0);
        s1 = hn::MulAdd(qv[j], hn::LoadU(d, k + t.k_stride + j * N), s1);
        s2 = hn::MulAdd(qv[j], hn::LoadU(d, k + 2 * t.k_stride + j * N), s2);
        s3 = hn::MulAdd(qv[j], hn::LoadU(d, k + 3 * t.k_stride + j * N), s3);
      }
      hn::StoreU(hn::Mul(SumOfFour(d, s0, s1, s2, s3), hn::Set(d4, scale)), d4, scores + i);
    }
    for (; i < t.n; ++i) {
      auto s = hn::Zero(d);
      for (size_t j = 0; j < kVectors; ++j) s = hn::MulAdd(qv[j], hn::LoadU(d, t.k + i * t.k_stride + j * N), s);
      scores[i] = hn::GetLane(hn::SumOfLanes(d, s)) * scale;
    }
    if (softcap > 0) SoftCap(softcap, t.n, scores);
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

    hn::Vec<decltype(d)> out[kSets][kVectors];
    for (size_t j = 0; j < kVectors; ++j) {
      out[0][j] = hn::LoadU(d, acc + j * N);
      for (size_t set = 1; set < kSets; ++set) out[set][j] = hn::Zero(d);
    }
    for (i = 0; i + kSets <= t.n; i += kSets)
      for (size_t set = 0; set < kSets; ++set) {
        const auto p = hn::Set(d, scores[i + set]);
        const float* v = t.v + (i + set) * t.v_stride;
        for (size_t j = 0; j < kVectors; ++j) out[set][j] = hn::MulAdd(p, hn::LoadU(d, v + j * N), out[set][j]);
      }
    for (; i < t.n; ++i) {
      const auto p = hn::Set(d, scores[i]);
      for (size_t j = 0; j < kVectors; ++j) out[0][j] = hn::MulAdd(p, hn::LoadU(d, t.v + i * t.v_stride + j * N), out[0][j]);
    }
    for (size_t j = 0; j < kVectors; ++j) {
      for (size_t set = 1; set < kSets; ++set) out[0][j] = hn::Add(out[0][j], out[set][j]);
      hn::StoreU(out[0][j], d, acc + j * N);
    }
  }
}

void AttendTileImpl(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, float softcap,
                    const AttentionTile& t, OnlineSoftmax state, float* HWY_RESTRICT scores) {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  switch (head_dim % N == 0 ? head_dim / N : 0) {
    case 1: return AttendHeads<1>(q, heads, scale, softcap, t, state, scores);
    case 2: return AttendHeads<2>(q, heads, scale, softcap, t, state, scores);
    case 4: return AttendHeads<4>(q, heads, scale, softcap, t, state, scores);
    case 8: return AttendHeads<8>(q, heads, scale, softcap, t, state, scores);
    case 16: return AttendHeads<16>(q, heads, scale, softcap, t, state, scores);
    default:  // other head sizes (80, 96, ...): the scalar steps
      for (size_t h = 0; h < heads; ++h)
        AttendHeadScalar(q + h * head_dim, head_dim, scale, softcap, t, state.max[h], state.sum[h],
                         state.acc + h * head_dim, scores);
  }
}
#else
void AttendTileImpl(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, float softcap,
                    const AttentionTile& t, OnlineSoftmax state, float* HWY_RESTRICT scores) {
  for (size_t h = 0; h < heads; ++h)
    AttendHeadScalar(q + h * head_dim, head_dim, scale, softcap, t, state.max[h], state.sum[h],
                     state.acc + h * head_dim, scores);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(AttendTileImpl);

void AttendTile(const float* q, size_t heads, size_t head_dim, float scale, float softcap, const AttentionTile& tile,
                OnlineSoftmax state, float* scores) {
  HWY_DYNAMIC_DISPATCH(AttendTileImpl)(q, heads, head_dim, scale, softcap, tile, state, scores);
}

void AttendTileRef(const float* q, size_t heads, size_t head_dim, float scale, float softcap,
                   const AttentionTile& tile, OnlineSoftmax state, float* scores) {
  for (size_t h = 0; h < heads; ++h)
    AttendHeadScalar(q + h * head_dim, head_dim, scale, softcap, tile, state.max[h], state.sum[h],
                     state.acc + h * head_dim, scores);
}
}  // namespace lowbit
#endif
