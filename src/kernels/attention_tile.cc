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
#include <type_traits>

#include "formats/minifloat.h"
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

// Element j of row i of K or V.
float ElementAt(const void* rows, size_t stride, const float* scales, TileElement element, size_t i, size_t j) {
  const size_t at = i * stride + j;
  switch (element) {
    case TileElement::kF16: return Fp16ToFp32(static_cast<const uint16_t*>(rows)[at]);
    case TileElement::kBF16: return Bf16ToFp32(static_cast<const uint16_t*>(rows)[at]);
    case TileElement::kI8: return static_cast<float>(static_cast<int>(static_cast<const uint8_t*>(rows)[at]) - 128) * scales[i];
    default: return static_cast<const float*>(rows)[at];
  }
}

void AttendHeadScalar(const float* q, size_t head_dim, float scale, float softcap, const AttentionTile& t,
                      float& max, float& sum, float* acc, float* scores) {
  float tile_max = -INFINITY;
  for (size_t i = 0; i < t.n; ++i) {
    float s = 0;
    for (size_t j = 0; j < head_dim; ++j)
      s += q[j] * (t.k_by_channel ? static_cast<const float*>(t.k)[j * t.k_stride + i]
                                  : ElementAt(t.k, t.k_stride, t.k_scales, t.element, i, j));
    scores[i] = s * scale;
    if (softcap > 0) scores[i] = softcap * std::tanh(scores[i] / softcap);
    tile_max = std::max(tile_max, scores[i]);
  }
  RescaleTo(tile_max, max, sum, acc, head_dim);
  for (size_t i = 0; i < t.n; ++i) {
    const float p = std::exp(scores[i] - max);
    sum += p;
    for (size_t j = 0; j < head_dim; ++j) acc[j] += p * ElementAt(t.v, t.v_stride, t.v_scales, t.element, i, j);
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

// One vector of a K or V row, widened to fp32 in registers.
template <class D>
hn::Vec<D> LoadRow(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class D, class T>
hn::Vec<D> LoadRow(D d, const T* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
}
template <class D>
hn::Vec<D> LoadRow(D d, const uint8_t* HWY_RESTRICT p) {  // int8 codes offset by 128: the row scale applies later
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(d, hn::Sub(hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, D>(), p)), hn::Set(di, 128)));
}

// Head h's share of the next tile, at its position step [i, i + step): rows [(h n + i) / heads,
// (h n + i + step) / heads), so the heads' steps together fetch every row once, spread over the
// whole tile (a burst at one head's steps filled the miss queue and stalled the loads).
template <class T>
void PrefetchShare(const void* base, size_t stride, size_t row_bytes, size_t h, size_t heads, size_t i, size_t step,
                   size_t n) {
  if (base == nullptr) return;
  for (size_t r = (h * n + i) / heads; r < (h * n + i + step) / heads; ++r)
    for (size_t b = 0; b < row_bytes; b += 64)  // to L2: this tile and the next do not both fit L1
      __builtin_prefetch(reinterpret_cast<const char*>(static_cast<const T*>(base) + r * stride) + b, 0, 2);
}

// scores[0..n) = scale * q.K[., i] for K stored channel by channel: a vector of positions per FMA,
// no horizontal sums. Four accumulators over the channels keep the FMA chains short. The last
// n % Lanes positions (a tile cut by the reader's position) are summed one by one: a partial vector
// load would read past the channel row, and on some targets a masked load reads the whole vector.
void ScoresByChannel(const float* HWY_RESTRICT q, size_t head_dim, float scale, const AttentionTile& t,
                     float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const float* HWY_RESTRICT k = static_cast<const float*>(t.k);
  size_t i = 0;
  for (; i + N <= t.n; i += N) {
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (size_t j = 0; j < head_dim; j += 4) {  // head_dim = kVectors x Lanes (>= 4): a multiple of 4
      a0 = hn::MulAdd(hn::Set(d, q[j]), hn::LoadU(d, k + j * t.k_stride + i), a0);
      a1 = hn::MulAdd(hn::Set(d, q[j + 1]), hn::LoadU(d, k + (j + 1) * t.k_stride + i), a1);
      a2 = hn::MulAdd(hn::Set(d, q[j + 2]), hn::LoadU(d, k + (j + 2) * t.k_stride + i), a2);
      a3 = hn::MulAdd(hn::Set(d, q[j + 3]), hn::LoadU(d, k + (j + 3) * t.k_stride + i), a3);
    }
    hn::StoreU(hn::Mul(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Set(d, scale)), d, scores + i);
  }
  for (; i < t.n; ++i) {
    float s = 0;
    for (size_t j = 0; j < head_dim; ++j) s += q[j] * k[j * t.k_stride + i];
    scores[i] = s * scale;
  }
}

template <size_t kVectors, class T>
void AttendHeads(const float* HWY_RESTRICT q, size_t heads, float scale, float softcap, const AttentionTile& t,
                 OnlineSoftmax state, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  constexpr bool kScaledRows = std::is_same_v<T, uint8_t>;  // int8 rows: one scale each
  const T* HWY_RESTRICT keys = static_cast<const T*>(t.k);
  const T* HWY_RESTRICT values = static_cast<const T*>(t.v);
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
    if (t.k_by_channel) {
      ScoresByChannel(qh, head_dim, scale, t, scores);
      i = t.n;
    }
    for (; i + 4 <= t.n; i += 4) {  // four positions, one reduction
      PrefetchShare<T>(t.next_k, t.k_stride, head_dim * sizeof(T), h, heads, i, 4, t.n);
      const T* k = keys + i * t.k_stride;
      auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
      for (size_t j = 0; j < kVectors; ++j) {
        s0 = hn::MulAdd(qv[j], LoadRow(d, k + j * N), s0);
        s1 = hn::MulAdd(qv[j], LoadRow(d, k + t.k_stride + j * N), s1);
        s2 = hn::MulAdd(qv[j], LoadRow(d, k + 2 * t.k_stride + j * N), s2);
        s3 = hn::MulAdd(qv[j], LoadRow(d, k + 3 * t.k_stride + j * N), s3);
      }
      auto four = hn::Mul(SumOfFour(d, s0, s1, s2, s3), hn::Set(d4, scale));
      if constexpr (kScaledRows) four = hn::Mul(four, hn::LoadU(d4, t.k_scales + i));
      hn::StoreU(four, d4, scores + i);
    }
    for (; i < t.n; ++i) {
      auto s = hn::Zero(d);
      for (size_t j = 0; j < kVectors; ++j) s = hn::MulAdd(qv[j], LoadRow(d, keys + i * t.k_stride + j * N), s);
      scores[i] = hn::GetLane(hn::SumOfLanes(d, s)) * scale * (kScaledRows ? t.k_scales[i] : 1.0f);
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
        PrefetchShare<T>(t.next_v, t.v_stride, head_dim * sizeof(T), h, heads, i + set, 1, t.n);
        const auto p = hn::Set(d, kScaledRows ? scores[i + set] * t.v_scales[i + set] : scores[i + set]);
        const T* v = values + (i + set) * t.v_stride;
        for (size_t j = 0; j < kVectors; ++j) out[set][j] = hn::MulAdd(p, LoadRow(d, v + j * N), out[set][j]);
      }
    for (; i < t.n; ++i) {
      const auto p = hn::Set(d, kScaledRows ? scores[i] * t.v_scales[i] : scores[i]);
      for (size_t j = 0; j < kVectors; ++j) out[0][j] = hn::MulAdd(p, LoadRow(d, values + i * t.v_stride + j * N), out[0][j]);
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
  auto by_element = [&]<size_t kVectors>() {
    switch (t.element) {
      case TileElement::kF16: return AttendHeads<kVectors, hwy::float16_t>(q, heads, scale, softcap, t, state, scores);
      case TileElement::kBF16: return AttendHeads<kVectors, hwy::bfloat16_t>(q, heads, scale, softcap, t, state, scores);
      case TileElement::kI8: return AttendHeads<kVectors, uint8_t>(q, heads, scale, softcap, t, state, scores);
      default: return AttendHeads<kVectors, float>(q, heads, scale, softcap, t, state, scores);
    }
  };
  switch (head_dim % N == 0 ? head_dim / N : 0) {
    case 1: return by_element.template operator()<1>();
    case 2: return by_element.template operator()<2>();
    case 4: return by_element.template operator()<4>();
    case 8: return by_element.template operator()<8>();
    case 16: return by_element.template operator()<16>();
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
