#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention_tile.h"
#include "kernels/dot.h"

namespace lowbit {
namespace {

void Axpy(float a, const float* x, size_t n, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void AttendBlocked(const KvCache& cache, const AttentionQuery& qr, AttentionScratch& s, float* out) {
  const size_t block = cache.options().block_tokens;
  const size_t head_dim = cache.head_dim();
  s.k_tile.resize(block * head_dim);
  s.v_tile.resize(block * head_dim);
  s.scores.resize(block);
  s.acc.assign(qr.heads * head_dim, 0.0f);
  s.max.assign(qr.heads, -INFINITY);
  s.sum.assign(qr.heads, 0.0f);
  const OnlineSoftmax state{s.max.data(), s.sum.data(), s.acc.data()};
  for (size_t begin = qr.first; begin <= qr.position; begin = (begin / block + 1) * block) {  // tiles inside blocks
    const size_t end = std::min((begin / block + 1) * block, qr.position + 1);
    const KvCache::Tile k = cache.ReadK(qr.layer, qr.kv_head, begin, end, qr.position, s.k_tile.data());
    const KvCache::Tile v = cache.ReadV(qr.layer, qr.kv_head, begin, end, qr.position, s.v_tile.data());
    AttendTile(qr.q, qr.heads, head_dim, qr.scale, qr.softcap, {k.data, k.stride, v.data, v.stride, end - begin}, state,
               s.scores.data());
  }
  for (size_t h = 0; h < qr.heads; ++h)
    for (size_t i = 0; i < head_dim; ++i) out[h * head_dim + i] = s.acc[h * head_dim + i] / s.sum[h];
}

void AttendTwoPass(const KvCache& cache, const AttentionQuery& qr, AttentionScratch& s, float* out) {
  const size_t block = cache.options().block_tokens, head_dim = cache.head_dim(), n = qr.position + 1;
  const auto next = [&](size_t p) { return std::min((p / block + 1) * block, n); };
  s.k_tile.resize(block * head_dim);
  s.scores.resize(n);
  for (size_t h = 0; h < qr.heads; ++h) {
    float max_score = -INFINITY;
    for (size_t begin = qr.first; begin < n; begin = next(begin)) {
      const size_t end = next(begin);
      const KvCache::Tile k = cache.ReadK(qr.layer, qr.kv_head, begin, end, qr.position, s.k_tile.data());
      for (size_t p = begin; p < end; ++p) {
        float score = Dot(qr.q + h * head_dim, k.data + (p - begin) * k.stride, head_dim) * qr.scale;
        if (qr.softcap > 0) score = qr.softcap * std::tanh(score / qr.softcap);
        max_score = std::max(max_score, s.scores[p] = score);
      }
    }
    float sum = 0;
    for (size_t p = qr.first; p < n; ++p) sum += s.scores[p] = std::exp(s.scores[p] - max_score);
    float* o = out + h * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (size_t begin = qr.first; begin < n; begin = next(begin)) {
      const size_t end = next(begin);
      const KvCache::Tile v = cache.ReadV(qr.layer, qr.kv_head, begin, end, qr.position, s.k_tile.data());
      for (size_t p = begin; p < end; ++p) Axpy(s.scores[p] / sum, v.data + (p - begin) * v.stride, head_dim, o);
    }
  }
}

}  // namespace lowbit
