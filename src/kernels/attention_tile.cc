// The attention tile step in Highway: dot products four positions per reduction, a vector exp
// (Highway's contrib Exp), and the weighted V sum with the head's output held in registers.
// Per-position calls of a dispatched dot and std::exp made this a third of a calibration pass.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tile.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/reduce-inl.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "formats/minifloat.h"
#include "kernels/attention_kivi_int8.h"
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
float ElementAt(const void* rows, size_t stride, const float* row_scales, float tensor_scale, TileElement element,
                size_t i, size_t j) {
  const size_t at = i * stride + j;
  const uint8_t* bytes = static_cast<const uint8_t*>(rows);
  switch (element) {
    case TileElement::kF16: return Fp16ToFp32(static_cast<const uint16_t*>(rows)[at]);
    case TileElement::kBF16: return Bf16ToFp32(static_cast<const uint16_t*>(rows)[at]);
    case TileElement::kE4M3: return DecodeMiniFloat(kE4M3, bytes[at]) * tensor_scale;
    case TileElement::kE5M2: return DecodeMiniFloat(kE5M2, bytes[at]) * tensor_scale;
    case TileElement::kI8: return static_cast<float>(static_cast<int>(bytes[at]) - 128) * row_scales[i];
    default: return static_cast<const float*>(rows)[at];
  }
}

// Code `index` of packed row `row` (2 or 4 bits, low bits first).
float PackedCode(const void* rows, size_t row_bytes, size_t row, size_t index, int bits) {
  const uint8_t byte = static_cast<const uint8_t*>(rows)[row * row_bytes + index * bits / 8];
  return static_cast<float>((byte >> (index * bits % 8)) & ((1u << bits) - 1));
}

// A KV cache's FP8 byte, as the vector kernel's row type.
struct E4M3Byte {
  uint8_t bits;
};
struct E5M2Byte {
  uint8_t bits;
};

int PackedBits(TileElement element) { return element == TileElement::kU4 ? 4 : element == TileElement::kU2 ? 2 : 0; }

// Element j of K and of V at the tile's position i.
float KeyAt(const AttentionTile& t, size_t i, size_t j) {
  if (const int bits = PackedBits(t.element))
    return PackedCode(t.k, t.k_stride, j, t.k_first + i, bits) * t.k_scales[j] + t.k_biases[j];
  return ElementAt(t.k, t.k_stride, t.k_scales, t.k_tensor_scale, t.element, i, j);
}
float ValueAt(const AttentionTile& t, size_t i, size_t j) {
  if (const int bits = PackedBits(t.element)) return PackedCode(t.v, t.v_stride, i, j, bits) * t.v_scales[i] + t.v_biases[i];
  return ElementAt(t.v, t.v_stride, t.v_scales, t.v_tensor_scale, t.element, i, j);
}

void AttendHeadScalar(const float* q, size_t head_dim, float scale, float softcap, const AttentionTile& t,
                      float& max, float& sum, float* acc, float* scores) {
  float tile_max = -INFINITY;
  for (size_t i = 0; i < t.n; ++i) {
    float s = 0;
    for (size_t j = 0; j < head_dim; ++j) s += q[j] * KeyAt(t, i, j);
    scores[i] = s * scale;
    if (softcap > 0) scores[i] = softcap * std::tanh(scores[i] / softcap);
    tile_max = std::max(tile_max, scores[i]);
  }
  RescaleTo(tile_max, max, sum, acc, head_dim);
  for (size_t i = 0; i < t.n; ++i) {
    const float p = std::exp(scores[i] - max);
    sum += p;
    for (size_t j = 0; j < head_dim; ++j) acc[j] += p * ValueAt(t, i, j);
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
// scores[0..n) <- softcap * tanh(scores / softcap).
void SoftCap(float softcap, size_t n, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto cap = hn::Set(d, softcap), inv = hn::Set(d, 1.0f / softcap);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(cap, hn::Tanh(d, hn::Mul(hn::LoadU(d, scores + i), inv))), d, scores + i);
  for (; i < n; ++i) scores[i] = softcap * std::tanh(scores[i] / softcap);
}

// Each head's running max, sum and output acc [head_dim] moved to the tile's max where that is higher.
template <size_t kHeads>
void MoveMaxToTile(size_t n, const float* HWY_RESTRICT scores, size_t stride, OnlineSoftmax state, size_t head_dim) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  V vector_max[kHeads];
  for (size_t h = 0; h < kHeads; ++h) vector_max[h] = hn::Set(d, -INFINITY);
  size_t i = 0;
  for (; i + N <= n; i += N)
    for (size_t h = 0; h < kHeads; ++h) vector_max[h] = hn::Max(vector_max[h], hn::LoadU(d, scores + h * stride + i));
  float tile_max[kHeads];
  for (size_t h = 0; h < kHeads; ++h) tile_max[h] = hn::GetLane(hn::MaxOfLanes(d, vector_max[h]));
  for (; i < n; ++i)
    for (size_t h = 0; h < kHeads; ++h) tile_max[h] = std::max(tile_max[h], scores[h * stride + i]);
  for (size_t h = 0; h < kHeads; ++h)
    RescaleTo(tile_max[h], state.max[h], state.sum[h], state.acc + h * head_dim, head_dim);
}

// The running max moves only when a tile's score passes it by more than this: below, the weights
// e^(score - max) stay under e^8 (far from overflowing fp32 sums), and a tile costs a compare per
// vector instead of each head's max across lanes and the rescale.
constexpr float kMaxSlack = 8.0f;

// The tile's scores of heads [0, kHeads) (n of them, head h's at scores + h stride) become their
// softmax weights e^(score - max): soft-capped first when softcap > 0; when a score is more than
// kMaxSlack above its head's running max, each head's max, sum and output acc [head_dim] move to the
// tile's max. The heads' arithmetic is interleaved stage by stage (each head's in its own order):
// done head after head, the reductions' latency chains did not overlap.
template <size_t kHeads>
void SoftmaxSteps(float softcap, size_t n, float* HWY_RESTRICT scores, size_t stride, OnlineSoftmax state,
                  size_t head_dim) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  if (softcap > 0)
    for (size_t h = 0; h < kHeads; ++h) SoftCap(softcap, n, scores + h * stride);
  bool above = false;
  {
    V limit[kHeads];
    for (size_t h = 0; h < kHeads; ++h) limit[h] = hn::Set(d, state.max[h] + kMaxSlack);
    size_t i = 0;
    auto passed = hn::FirstN(d, 0);
    for (; i + N <= n; i += N)
      for (size_t h = 0; h < kHeads; ++h) passed = hn::Or(passed, hn::Gt(hn::LoadU(d, scores + h * stride + i), limit[h]));
    above = !hn::AllFalse(d, passed);
    for (; i < n; ++i)
      for (size_t h = 0; h < kHeads; ++h) above |= scores[h * stride + i] > state.max[h] + kMaxSlack;
  }
  if (above) MoveMaxToTile<kHeads>(n, scores, stride, state, head_dim);
  V top[kHeads], total[kHeads];
  for (size_t h = 0; h < kHeads; ++h) {
    top[h] = hn::Set(d, state.max[h]);
    total[h] = hn::Zero(d);
  }
  size_t i = 0;
  for (; i + N <= n; i += N)
    for (size_t h = 0; h < kHeads; ++h) {
      const V p = hn::Exp(d, hn::Sub(hn::LoadU(d, scores + h * stride + i), top[h]));
      total[h] = hn::Add(total[h], p);
      hn::StoreU(p, d, scores + h * stride + i);
    }
  float tail[kHeads] = {};
  for (; i < n; ++i)
    for (size_t h = 0; h < kHeads; ++h) tail[h] += scores[h * stride + i] = std::exp(scores[h * stride + i] - state.max[h]);
  for (size_t h = 0; h < kHeads; ++h) state.sum[h] += hn::GetLane(hn::SumOfLanes(d, total[h])) + tail[h];
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
// FP8 through fp16: an E5M2 byte is the top half of its fp16. An E4M3 byte, sign-extended and
// shifted left 7, is the fp16 of its value / 256 (exponent biases 7 and 15), subnormals included;
// the 256 goes into the tile's factors (kRowUnit). E4M3's NaN code, which the cache never writes
// (it saturates, and a NaN input has already made the hidden state NaN), reads as 480.
template <class D>
hn::Vec<D> LoadRow(D d, const E5M2Byte* HWY_RESTRICT p) {
  const auto bytes = hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(p));
  const auto half = hn::ShiftLeft<8>(hn::PromoteTo(hn::Rebind<uint16_t, D>(), bytes));
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), half));
}
template <class D>
hn::Vec<D> LoadRow(D d, const E4M3Byte* HWY_RESTRICT p) {
  const hn::Rebind<int16_t, D> di16;
  const auto wide = hn::PromoteTo(di16, hn::LoadU(hn::Rebind<int8_t, D>(), reinterpret_cast<const int8_t*>(p)));
  const auto half = hn::And(hn::ShiftLeft<7>(wide), hn::Set(di16, static_cast<int16_t>(0xBFFF)));  // sign to bit 15 only
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), half));
}
template <class T>
constexpr float kRowUnit = 1.0f;  // a row element's value per unit of what LoadRow returns
template <>
constexpr float kRowUnit<E4M3Byte> = 256.0f;

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

// Vectors of an output row each V pass holds per head: kHeads x kChunk accumulators (at most 16,
// beside the heads' weights and the widened row), the largest power of two up to 8 dividing the row.
template <size_t kHeads>
size_t ChunkVectors(size_t vectors) {
  size_t chunk = 1;
  while (chunk < 8 && chunk * 2 * kHeads <= 16 && vectors % (chunk * 2) == 0) chunk *= 2;
  return chunk;
}

// Query heads [0, kHeads) of a GQA group (group `group` of `groups` over the tile) against a
// row-major tile: every K and V vector is widened once and feeds each head of the group (one
// conversion, kHeads FMAs; converting it again per head was most of a 16-bit or 8-bit tile's
// work). Positions are scored four per reduction; V is summed kChunk vectors of the row at a time,
// in kSets independent partial sums when the heads alone keep too few FMA chains in flight.
// scores: scratch of kHeads x n floats.
template <size_t kHeads, size_t kChunk, class T>
void AttendGroup(const float* HWY_RESTRICT q, size_t head_dim, size_t group, size_t groups, float scale,
                 float softcap, const AttentionTile& t, OnlineSoftmax state, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const hn::Full128<float> d4;
  using V = hn::Vec<decltype(d)>;
  constexpr bool kScaledRows = std::is_same_v<T, uint8_t>;  // int8 rows: one scale each
  constexpr bool kTensorScaled = std::is_same_v<T, E4M3Byte> || std::is_same_v<T, E5M2Byte>;
  const T* HWY_RESTRICT keys = static_cast<const T*>(t.k);
  const T* HWY_RESTRICT values = static_cast<const T*>(t.v);
  const size_t N = hn::Lanes(d), vectors = head_dim / N, n = t.n, row_bytes = head_dim * sizeof(T);
  const float k_factor = scale * kRowUnit<T> * (kTensorScaled ? t.k_tensor_scale : 1.0f);
  const float v_factor = kRowUnit<T> * (kTensorScaled ? t.v_tensor_scale : 1.0f);

  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    PrefetchShare<T>(t.next_k, t.k_stride, row_bytes, group, groups, i, 4, n);
    const T* k = keys + i * t.k_stride;
    V s[kHeads][4];
    for (size_t h = 0; h < kHeads; ++h)
      for (size_t r = 0; r < 4; ++r) s[h][r] = hn::Zero(d);
    for (size_t j = 0; j < vectors; ++j) {
      const V k0 = LoadRow(d, k + j * N), k1 = LoadRow(d, k + t.k_stride + j * N),
              k2 = LoadRow(d, k + 2 * t.k_stride + j * N), k3 = LoadRow(d, k + 3 * t.k_stride + j * N);
      for (size_t h = 0; h < kHeads; ++h) {
        const V qv = hn::LoadU(d, q + h * head_dim + j * N);
        s[h][0] = hn::MulAdd(qv, k0, s[h][0]);
        s[h][1] = hn::MulAdd(qv, k1, s[h][1]);
        s[h][2] = hn::MulAdd(qv, k2, s[h][2]);
        s[h][3] = hn::MulAdd(qv, k3, s[h][3]);
      }
    }
    auto factor = hn::Set(d4, k_factor);
    if constexpr (kScaledRows) factor = hn::Mul(factor, hn::LoadU(d4, t.k_scales + i));
    for (size_t h = 0; h < kHeads; ++h)
      hn::StoreU(hn::Mul(SumOfFour(d, s[h][0], s[h][1], s[h][2], s[h][3]), factor), d4, scores + h * n + i);
  }
  for (; i < n; ++i) {
    V s[kHeads];
    for (size_t h = 0; h < kHeads; ++h) s[h] = hn::Zero(d);
    for (size_t j = 0; j < vectors; ++j) {
      const V kv = LoadRow(d, keys + i * t.k_stride + j * N);
      for (size_t h = 0; h < kHeads; ++h) s[h] = hn::MulAdd(hn::LoadU(d, q + h * head_dim + j * N), kv, s[h]);
    }
    for (size_t h = 0; h < kHeads; ++h)
      scores[h * n + i] = hn::GetLane(hn::SumOfLanes(d, s[h])) * (kScaledRows ? k_factor * t.k_scales[i] : k_factor);
  }
  SoftmaxSteps<kHeads>(softcap, n, scores, n, state, head_dim);  // scores become the weights of the V rows
  for (size_t h = 0; h < kHeads; ++h)
    for (size_t r = 0; r < n; ++r) scores[h * n + r] *= kScaledRows ? v_factor * t.v_scales[r] : v_factor;

  constexpr size_t kSets = std::max<size_t>(1, 8 / (kHeads * kChunk));
  for (size_t c = 0; c < vectors; c += kChunk) {
    V out[kSets][kHeads][kChunk];
    for (size_t h = 0; h < kHeads; ++h)
      for (size_t j = 0; j < kChunk; ++j) {
        out[0][h][j] = hn::LoadU(d, state.acc + h * head_dim + (c + j) * N);
        for (size_t set = 1; set < kSets; ++set) out[set][h][j] = hn::Zero(d);
      }
    const auto add_row = [&](size_t r, V(&into)[kHeads][kChunk]) HWY_ATTR {
      if (c == 0) PrefetchShare<T>(t.next_v, t.v_stride, row_bytes, group, groups, r, 1, n);
      V w[kHeads];
      for (size_t h = 0; h < kHeads; ++h) w[h] = hn::Set(d, scores[h * n + r]);
      const T* v = values + r * t.v_stride + c * N;
      for (size_t j = 0; j < kChunk; ++j) {
        const V x = LoadRow(d, v + j * N);
        for (size_t h = 0; h < kHeads; ++h) into[h][j] = hn::MulAdd(w[h], x, into[h][j]);
      }
    };
    size_t r = 0;
    for (; r + kSets <= n; r += kSets)
      for (size_t set = 0; set < kSets; ++set) add_row(r + set, out[set]);
    for (; r < n; ++r) add_row(r, out[0]);
    for (size_t h = 0; h < kHeads; ++h)
      for (size_t j = 0; j < kChunk; ++j) {
        for (size_t set = 1; set < kSets; ++set) out[0][h][j] = hn::Add(out[0][h][j], out[set][h][j]);
        hn::StoreU(out[0][h][j], d, state.acc + h * head_dim + (c + j) * N);
      }
  }
}

// Every head of a row-major tile, in GQA groups of up to four.
template <class T>
void AttendHeads(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, float softcap,
                 const AttentionTile& t, OnlineSoftmax state) {
  const size_t vectors = head_dim / hn::Lanes(hn::ScalableTag<float>());
  thread_local std::vector<float> scores;
  scores.resize(4 * t.n);
  const size_t groups = (heads + 3) / 4;
  for (size_t h = 0, group = 0; h < heads; ++group) {
    const size_t size = std::min<size_t>(4, heads - h);
    const OnlineSoftmax at{state.max + h, state.sum + h, state.acc + h * head_dim};
    const auto run = [&]<size_t kHeads>() {
      const float* qh = q + h * head_dim;
      switch (ChunkVectors<kHeads>(vectors)) {
        case 1: return AttendGroup<kHeads, 1, T>(qh, head_dim, group, groups, scale, softcap, t, at, scores.data());
        case 2: return AttendGroup<kHeads, 2, T>(qh, head_dim, group, groups, scale, softcap, t, at, scores.data());
        case 4: return AttendGroup<kHeads, 4, T>(qh, head_dim, group, groups, scale, softcap, t, at, scores.data());
        default: return AttendGroup<kHeads, 8, T>(qh, head_dim, group, groups, scale, softcap, t, at, scores.data());
      }
    };
    switch (size) {
      case 4: run.template operator()<4>(); break;
      case 3: run.template operator()<3>(); break;
      case 2: run.template operator()<2>(); break;
      default: run.template operator()<1>(); break;
    }
    h += size;
  }
}

// KIVI tiles (kU4 / kU2), read from their codes: with K = code x a_j + b_j per channel,
// q.K_i = sum_j (q_j a_j) code_ji + sum_j q_j b_j, so a channel's codes for a run of positions are
// converted once and feed every query head of the KV head with one FMA each (no fp32 copy of the
// tile, no per-row set-up); V likewise, with each position's weight times its row's scale. A byte
// per lane is read in P = 8 / bits planes (its low bits, then the next): lane l of plane p holds
// code l P + p of the chunk, and the sums go back to order once per tile (Unplaned).
template <int kBits, class D>
struct PackedCodes {
  static constexpr size_t P = 8 / kBits;
  using V = hn::Vec<D>;
  // The P vectors of a chunk (Lanes bytes at p), as floats, plane by plane.
  static HWY_INLINE void Decode(D d, const uint8_t* HWY_RESTRICT p, V* out) {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const auto bytes = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, D>(), p));
    const auto mask = hn::Set(du, (1u << kBits) - 1);
    for (size_t plane = 0; plane < P; ++plane) {
      const auto shifted = hn::ShiftRightSame(bytes, static_cast<int>(plane * kBits));
      out[plane] = hn::ConvertTo(d, hn::BitCast(di, plane + 1 == P ? shifted : hn::And(shifted, mask)));  // the top bits need no mask
    }
  }
};

// Puts P plane vectors back in order: output vector m, lane l is code m Lanes + l, which plane l % P
// holds in lane (m Lanes + l) / P.
template <size_t P, class D>
struct Unplaner {
  using V = hn::Vec<D>;
  using Idx = decltype(hn::IndicesFromVec(D(), hn::Zero(hn::RebindToSigned<D>())));
  using M = hn::Mask<D>;
  Idx index[P];
  M from_plane[P];
  explicit Unplaner(D d) {
    const hn::RebindToSigned<D> di;
    const auto lane = hn::Iota(di, 0);
    const auto plane = hn::And(lane, hn::Set(di, static_cast<int32_t>(P - 1)));
    for (size_t m = 0; m < P; ++m) {
      index[m] = hn::IndicesFromVec(d, hn::Add(hn::Set(di, static_cast<int32_t>(m * hn::Lanes(d) / P)),
                                               hn::ShiftRightSame(lane, P == 2 ? 1 : 2)));
      from_plane[m] = hn::RebindMask(d, hn::Eq(plane, hn::Set(di, static_cast<int32_t>(m))));
    }
  }
  HWY_INLINE void Apply(const V* planes, V* out) const {
    for (size_t m = 0; m < P; ++m) {
      V r = hn::TableLookupLanes(planes[0], index[m]);
      for (size_t p = 1; p < P; ++p) r = hn::IfThenElse(from_plane[p], hn::TableLookupLanes(planes[p], index[m]), r);
      out[m] = r;
    }
  }
};

// The dots of one chunk (Lanes bytes) of `rows` code rows, `stride` bytes apart from `codes`, with
// each head's row weights: out[h] = sum_k weights[h rows + k] x the codes of row k, in column order
// (Unplaned), for heads [0, kHeads). Each row step also prefetches one line of the next tile's codes
// (`next`, line first_line + k while inside next_bytes): spread over this tile's work, since without
// it each tile's loads waited on memory (its rows are a new stream).
template <int kBits, size_t kHeads, class D>
HWY_INLINE void PackedChunkDots(D d, const Unplaner<8 / kBits, D>& unplane, const uint8_t* HWY_RESTRICT codes,
                                size_t stride, size_t rows, const float* HWY_RESTRICT weights, const void* next,
                                size_t first_line, size_t next_bytes, hn::Vec<D> (&out)[kHeads][8 / kBits]) {
  using Codes = PackedCodes<kBits, D>;
  constexpr size_t P = Codes::P;
  using V = hn::Vec<D>;
  V acc[kHeads][P], f[P];
  for (size_t h = 0; h < kHeads; ++h)
    for (size_t p = 0; p < P; ++p) acc[h][p] = hn::Zero(d);
  for (size_t k = 0; k < rows; ++k) {
    if ((first_line + k) * 64 < next_bytes) hwy::Prefetch(static_cast<const uint8_t*>(next) + (first_line + k) * 64);
    Codes::Decode(d, codes + k * stride, f);
    for (size_t h = 0; h < kHeads; ++h) {
      const V w = hn::Set(d, weights[h * rows + k]);
      for (size_t p = 0; p < P; ++p) acc[h][p] = hn::MulAdd(w, f[p], acc[h][p]);
    }
  }
  for (size_t h = 0; h < kHeads; ++h) unplane.Apply(acc[h], out[h]);
}

// The scores of heads [0, kHeads) of q against a KIVI tile's K, in sc[h * (c1 - c0) + ...] for the
// chunk-aligned positions [c0, c1) of K's channel rows that hold the tile's (a chunk, Lanes bytes
// of a row, must divide the K block). q_j a_j is in qa [kHeads x head_dim], sum_j q_j b_j in qb.
template <int kBits, size_t kHeads, class D>
void PackedScores(D d, const float* HWY_RESTRICT qa, const float* qb, size_t head_dim, float scale,
                  const AttentionTile& t, size_t c0, size_t c1, float* HWY_RESTRICT sc) {
  constexpr size_t P = 8 / kBits;
  const size_t L = hn::Lanes(d), C = P * L;
  const Unplaner<P, D> unplane(d);
  const uint8_t* HWY_RESTRICT keys = static_cast<const uint8_t*>(t.k);
  const size_t next_bytes = t.next_k ? head_dim * t.k_stride : 0;  // the next tile's K, during the first chunk
  for (size_t c = c0; c < c1; c += C) {
    hn::Vec<D> dots[kHeads][P];
    PackedChunkDots<kBits, kHeads>(d, unplane, keys + c * kBits / 8, t.k_stride, head_dim, qa, t.next_k, 0,
                                   c == c0 ? next_bytes : 0, dots);
    for (size_t h = 0; h < kHeads; ++h)
      for (size_t m = 0; m < P; ++m)
        hn::StoreU(hn::Mul(hn::Add(dots[h][m], hn::Set(d, qb[h])), hn::Set(d, scale)), d,
                   sc + h * (c1 - c0) + (c - c0) + m * L);
  }
}

// acc[h] += sum_i (pa[h n + i] code_i + pb[h]) over a KIVI tile's V rows, for heads [0, kHeads) (a
// chunk, Lanes bytes of a row, must divide the head size).
template <int kBits, size_t kHeads, class D>
void PackedValues(D d, const float* HWY_RESTRICT pa, const float* pb, size_t head_dim, const AttentionTile& t,
                  float* HWY_RESTRICT acc_out) {
  constexpr size_t P = 8 / kBits;
  const size_t L = hn::Lanes(d), C = P * L;
  const Unplaner<P, D> unplane(d);
  const uint8_t* HWY_RESTRICT values = static_cast<const uint8_t*>(t.v);
  const size_t next_bytes = t.next_v ? t.n * t.v_stride : 0;
  for (size_t e = 0; e < head_dim; e += C) {
    hn::Vec<D> dots[kHeads][P];
    PackedChunkDots<kBits, kHeads>(d, unplane, values + e * kBits / 8, t.v_stride, t.n, pa, t.next_v, e / C * t.n,
                                   next_bytes, dots);
    for (size_t h = 0; h < kHeads; ++h) {
      float* out = acc_out + h * head_dim + e;
      for (size_t m = 0; m < P; ++m)
        hn::StoreU(hn::Add(hn::LoadU(d, out + m * L), hn::Add(dots[h][m], hn::Set(d, pb[h]))), d, out + m * L);
    }
  }
}

// The fp32 dots' factors of a KIVI tile, for heads [0, kHeads): with K = code x a_j + b_j per channel,
// qa [kHeads x head_dim] = q_j a_j and qb[h] = sum_j q_j b_j; with V = code x s_i + b_i per row and
// head h's softmax weights w at weights + h stride, pa [kHeads x n] = w_i s_i and pb[h] = sum_i w_i b_i.
template <size_t kHeads, class D>
void QueryTimesScales(D d, const float* HWY_RESTRICT q, size_t head_dim, const AttentionTile& t,
                      float* HWY_RESTRICT qa, float* qb) {
  const size_t L = hn::Lanes(d);
  for (size_t h = 0; h < kHeads; ++h) {
    auto bias_sum = hn::Zero(d);
    for (size_t j = 0; j < head_dim; j += L) {
      const auto qj = hn::LoadU(d, q + h * head_dim + j);
      hn::StoreU(hn::Mul(qj, hn::LoadU(d, t.k_scales + j)), d, qa + h * head_dim + j);
      bias_sum = hn::MulAdd(qj, hn::LoadU(d, t.k_biases + j), bias_sum);
    }
    qb[h] = hn::GetLane(hn::SumOfLanes(d, bias_sum));
  }
}
template <size_t kHeads, class D>
void WeightsTimesScales(D d, const float* HWY_RESTRICT weights, size_t stride, const AttentionTile& t,
                        float* HWY_RESTRICT pa, float* pb) {
  const size_t L = hn::Lanes(d);
  for (size_t h = 0; h < kHeads; ++h) {
    const float* w = weights + h * stride;
    auto bias_sum = hn::Zero(d);
    size_t i = 0;
    for (; i + L <= t.n; i += L) {
      const auto wi = hn::LoadU(d, w + i);
      hn::StoreU(hn::Mul(wi, hn::LoadU(d, t.v_scales + i)), d, pa + h * t.n + i);
      bias_sum = hn::MulAdd(wi, hn::LoadU(d, t.v_biases + i), bias_sum);
    }
    pb[h] = hn::GetLane(hn::SumOfLanes(d, bias_sum));
    for (; i < t.n; ++i) {
      pa[h * t.n + i] = w[i] * t.v_scales[i];
      pb[h] += w[i] * t.v_biases[i];
    }
  }
}

// A KIVI tile's two dot products in fp32 FMAs (PackedScores, PackedValues): K read at DK's width,
// V at DV's; Chunk() positions of K per slice.
template <int kBits, class DK, class DV>
struct FloatDots {
  DK dk;
  DV dv;
  size_t Chunk() const { return hn::Lanes(dk) * 8 / kBits; }
  template <size_t kHeads>
  void Scores(const float* q, size_t head_dim, float scale, const AttentionTile& t, size_t c0, size_t c1,
              float* sc) const {
    thread_local std::vector<float> qa;
    qa.resize(kHeads * head_dim);
    float qb[kHeads];
    QueryTimesScales<kHeads>(dv, q, head_dim, t, qa.data(), qb);
    PackedScores<kBits, kHeads>(dk, qa.data(), qb, head_dim, scale, t, c0, c1, sc);
  }
  template <size_t kHeads>
  void Values(const float* weights, size_t stride, size_t head_dim, const AttentionTile& t, float* acc) const {
    thread_local std::vector<float> pa;
    pa.resize(kHeads * t.n);
    float pb[kHeads];
    WeightsTimesScales<kHeads>(dv, weights, stride, t, pa.data(), pb);
    PackedValues<kBits, kHeads>(dv, pa.data(), pb, head_dim, t, acc);
  }
};

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The same as integer dots on AVX-512 VNNI (attention_kivi_int8.h); a tile whose weights it cannot
// take in uint8 is summed by the fp32 kernel.
template <class Float>
struct Int8Dots {
  Float fp32;
  size_t Chunk() const { return 32; }
  template <size_t kHeads>
  void Scores(const float* q, size_t head_dim, float scale, const AttentionTile& t, size_t c0, size_t c1,
              float* sc) const {
    kivi_int8::Scores(q, kHeads, head_dim, scale, t, c0, c1, sc);
  }
  template <size_t kHeads>
  void Values(const float* weights, size_t stride, size_t head_dim, const AttentionTile& t, float* acc) const {
    if (!kivi_int8::Values(weights, stride, kHeads, head_dim, t, acc))
      fp32.template Values<kHeads>(weights, stride, head_dim, t, acc);
  }
};
#endif

// Heads [0, kHeads) of q (and of state) against a KIVI tile, with the dot products of `dots`.
template <size_t kHeads, class Dots>
void PackedHeads(const Dots& dots, const float* HWY_RESTRICT q, size_t head_dim, float scale, float softcap,
                 const AttentionTile& t, OnlineSoftmax state) {
  const size_t C = dots.Chunk();
  const size_t c0 = t.k_first / C * C, c1 = (t.k_first + t.n + C - 1) / C * C;
  thread_local std::vector<float> sc;  // [kHeads x (c1 - c0)]: scores, then weights
  sc.resize(kHeads * (c1 - c0));
  dots.template Scores<kHeads>(q, head_dim, scale, t, c0, c1, sc.data());
  float* weights = sc.data() + (t.k_first - c0);
  SoftmaxSteps<kHeads>(softcap, t.n, weights, c1 - c0, state, head_dim);
  dots.template Values<kHeads>(weights, c1 - c0, head_dim, t, state.acc);
}

// Every head of a KIVI tile, four at a time (a GQA group shares each converted chunk). V is read at
// the widest vector whose chunk divides the head size, K at that width or half of it (int2's 32-position
// blocks fill only 8 lanes of 4 planes); false when no width fits. KIVI tiles take the integer dots
// where the CPU has them and the tile allows them.
template <int kBits>
bool PackedTile(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, float softcap,
                const AttentionTile& t, OnlineSoftmax state) {
  const auto run = [&](const auto& dots) {
    for (size_t h = 0; h < heads;) {
      const OnlineSoftmax at{state.max + h, state.sum + h, state.acc + h * head_dim};
      const float* qh = q + h * head_dim;
      switch (std::min<size_t>(4, heads - h)) {
        case 4: PackedHeads<4>(dots, qh, head_dim, scale, softcap, t, at); h += 4; break;
        case 3: PackedHeads<3>(dots, qh, head_dim, scale, softcap, t, at); h += 3; break;
        case 2: PackedHeads<2>(dots, qh, head_dim, scale, softcap, t, at); h += 2; break;
        default: PackedHeads<1>(dots, qh, head_dim, scale, softcap, t, at); h += 1; break;
      }
    }
  };
  const auto with_dots = [&](auto dk, auto dv) {
    const FloatDots<kBits, decltype(dk), decltype(dv)> fp32{dk, dv};
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if (t.int8_dots && kivi_int8::Fits(t, head_dim)) return run(Int8Dots<decltype(fp32)>{fp32});
#endif
    run(fp32);
  };
  const auto fits = [&](size_t lanes, size_t n) { return n % (lanes * 8 / kBits) == 0; };
  const auto with_k = [&](auto dv) {  // K at V's width, else half of it
    const size_t lanes = hn::Lanes(dv);
    if (fits(lanes, t.k_block)) return with_dots(dv, dv), true;
    if (lanes >= 8 && fits(lanes / 2, t.k_block)) return with_dots(hn::Half<decltype(dv)>(), dv), true;
    return false;
  };
  const size_t full = hn::Lanes(hn::ScalableTag<float>());
  if (full >= 16 && fits(16, head_dim)) return with_k(hn::CappedTag<float, 16>());
  if (full >= 8 && fits(8, head_dim)) return with_k(hn::CappedTag<float, 8>());
  if (fits(4, head_dim)) return with_k(hn::CappedTag<float, 4>());
  return false;
}

void AttendTileImpl(const float* HWY_RESTRICT q, size_t heads, size_t head_dim, float scale, float softcap,
                    const AttentionTile& t, OnlineSoftmax state, float* HWY_RESTRICT scores) {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  const bool packed = t.element == TileElement::kU4 || t.element == TileElement::kU2;
  if (t.element == TileElement::kU4 && PackedTile<4>(q, heads, head_dim, scale, softcap, t, state)) return;
  if (t.element == TileElement::kU2 && PackedTile<2>(q, heads, head_dim, scale, softcap, t, state)) return;
  if (packed || head_dim % N != 0) {  // other head sizes (20, 40, ...), KIVI chunks that do not fit them: the scalar steps
    for (size_t h = 0; h < heads; ++h)
      AttendHeadScalar(q + h * head_dim, head_dim, scale, softcap, t, state.max[h], state.sum[h],
                       state.acc + h * head_dim, scores);
    return;
  }
  switch (t.element) {
    case TileElement::kF16: return AttendHeads<hwy::float16_t>(q, heads, head_dim, scale, softcap, t, state);
    case TileElement::kBF16: return AttendHeads<hwy::bfloat16_t>(q, heads, head_dim, scale, softcap, t, state);
    case TileElement::kE4M3: return AttendHeads<E4M3Byte>(q, heads, head_dim, scale, softcap, t, state);
    case TileElement::kE5M2: return AttendHeads<E5M2Byte>(q, heads, head_dim, scale, softcap, t, state);
    case TileElement::kI8: return AttendHeads<uint8_t>(q, heads, head_dim, scale, softcap, t, state);
    default: return AttendHeads<float>(q, heads, head_dim, scale, softcap, t, state);
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
