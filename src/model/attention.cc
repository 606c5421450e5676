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

// Positions [begin, end) of the query's visible range, a tile at a time, into `state`.
void AttendRange(const KvCache& cache, const AttentionQuery& qr, size_t begin, size_t end, AttentionScratch& s,
                 OnlineSoftmax state) {
  const size_t block = cache.options().block_tokens;
  const size_t head_dim = cache.head_dim();
  s.k_tile.resize(block * head_dim);
  s.v_tile.resize(block * head_dim);
  s.scores.resize(block);
  const auto tile_end = [&](size_t p) { return std::min((p / block + 1) * block, end); };  // tiles inside blocks
  for (size_t p = begin; p < end; p = tile_end(p)) {
    AttentionTile tile = cache.ReadTile(qr.layer, qr.kv_head, p, tile_end(p), qr.position, s.k_tile.data(), s.v_tile.data());
    if (const size_t next = tile_end(p); next < end) {
      const AttentionTile ahead = cache.ReadTile(qr.layer, qr.kv_head, next, tile_end(next), qr.position, nullptr, nullptr);
      tile.next_k = ahead.k;
      tile.next_v = ahead.v;
    }
    tile.int8_dots = qr.int8_dots;
    AttendTile(qr.q, qr.heads, head_dim, qr.scale, qr.softcap, tile, state, s.scores.data());
  }
}

// Head h's output from its running max, sum and accumulator: acc / (sum + e^(sink - max)), a sink's term
// counted when there is one (each term taken relative to the larger of max and sink, so neither overflows).
void Normalize(const AttentionQuery& qr, size_t h, float max, float sum, const float* acc, size_t head_dim,
               float* out) {
  float scale = 1;
  if (qr.sinks != nullptr) {
    const float top = std::max(max, qr.sinks[h]);
    scale = std::exp(max - top);
    sum = sum * scale + std::exp(qr.sinks[h] - top);
  }
  for (size_t i = 0; i < head_dim; ++i) out[i] = acc[i] * scale / sum;
}

// The online-softmax state of `heads` heads held in `storage` ([heads x (head_dim + 2)]).
OnlineSoftmax StateIn(float* storage, size_t heads) { return {storage, storage + heads, storage + 2 * heads}; }

OnlineSoftmax EmptyState(float* storage, size_t heads, size_t head_dim) {
  const OnlineSoftmax state = StateIn(storage, heads);
  std::fill(state.max, state.max + heads, -INFINITY);
  std::fill(state.sum, state.sum + heads + heads * head_dim, 0.0f);
  return state;
}

}  // namespace

void AttendBlocked(const KvCache& cache, const AttentionQuery& qr, AttentionScratch& s, float* out) {
  const size_t head_dim = cache.head_dim();
  s.state.resize(qr.heads * (head_dim + 2));
  const OnlineSoftmax state = EmptyState(s.state.data(), qr.heads, head_dim);
  AttendRange(cache, qr, qr.first, qr.position + 1, s, state);
  for (size_t h = 0; h < qr.heads; ++h)
    Normalize(qr, h, state.max[h], state.sum[h], state.acc + h * head_dim, head_dim, out + h * head_dim);
}

size_t AttentionSegments(size_t jobs, size_t threads, size_t positions, size_t block_tokens) {
  // Twice the threads in tasks balances jobs of unequal length; a segment under 4 blocks costs more
  // in its merge and tile set-up than it spreads.
  constexpr size_t kMinBlocks = 4;
  if (threads <= 1 || jobs == 0 || jobs >= 2 * threads) return 1;
  const size_t blocks = (positions + block_tokens - 1) / block_tokens;
  return std::max<size_t>(1, std::min((2 * threads + jobs - 1) / jobs, blocks / kMinBlocks));
}

void AttendJobs(std::span<const AttentionJob> jobs, ThreadPool& pool) {
  if (jobs.empty()) return;
  size_t longest = 0;
  for (const AttentionJob& j : jobs) longest = std::max(longest, j.query.position + 1 - j.query.first);
  const size_t segments = AttentionSegments(jobs.size(), pool.size(), longest, jobs[0].cache->options().block_tokens);
  if (segments == 1) {
    pool.ParallelFor(jobs.size(), [&](size_t begin, size_t end) {
      AttentionScratch scratch;
      for (size_t i = begin; i < end; ++i) AttendBlocked(*jobs[i].cache, jobs[i].query, scratch, jobs[i].out);
    });
    return;
  }
  // Segment s of a job covers its visible blocks [s n / S, (s + 1) n / S), each with its own state.
  std::vector<size_t> offset(jobs.size() + 1, 0);  // into `states`: job i's segments from offset[i]
  for (size_t i = 0; i < jobs.size(); ++i)
    offset[i + 1] = offset[i] + segments * jobs[i].query.heads * (jobs[i].cache->head_dim() + 2);
  std::vector<float> states(offset.back());
  const auto storage = [&](size_t job, size_t segment) {
    return states.data() + offset[job] + segment * (offset[job + 1] - offset[job]) / segments;
  };
  pool.ParallelFor(jobs.size() * segments, [&](size_t begin, size_t end) {
    AttentionScratch scratch;
    for (size_t task = begin; task < end; ++task) {
      const size_t job = task / segments, segment = task % segments;
      const AttentionQuery& q = jobs[job].query;
      const size_t block = jobs[job].cache->options().block_tokens;
      const size_t first_block = q.first / block, blocks = q.position / block + 1 - first_block;
      const size_t from = std::max(q.first, (first_block + blocks * segment / segments) * block);
      const size_t to = std::min(q.position + 1, (first_block + blocks * (segment + 1) / segments) * block);
      const OnlineSoftmax state = EmptyState(storage(job, segment), q.heads, jobs[job].cache->head_dim());
      if (from < to) AttendRange(*jobs[job].cache, q, from, to, scratch, state);
    }
  });
  // out = sum_s acc_s e^(max_s - M) / sum_s sum_s e^(max_s - M), M the largest max (an empty
  // segment's max is -inf: its weight is 0).
  for (size_t i = 0; i < jobs.size(); ++i) {
    const size_t heads = jobs[i].query.heads, head_dim = jobs[i].cache->head_dim();
    for (size_t h = 0; h < heads; ++h) {
      float top = -INFINITY;
      for (size_t s = 0; s < segments; ++s) top = std::max(top, StateIn(storage(i, s), heads).max[h]);
      float* out = jobs[i].out + h * head_dim;
      std::fill(out, out + head_dim, 0.0f);
      float sum = 0;
      for (size_t s = 0; s < segments; ++s) {
        const OnlineSoftmax state = StateIn(storage(i, s), heads);
        const float weight = std::exp(state.max[h] - top);
        sum += state.sum[h] * weight;
        Axpy(weight, state.acc + h * head_dim, head_dim, out);
      }
      Normalize(jobs[i].query, h, top, sum, out, head_dim, out);
    }
  }
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
    if (qr.sinks != nullptr) max_score = std::max(max_score, qr.sinks[h]);
    float sum = qr.sinks != nullptr ? std::exp(qr.sinks[h] - max_score) : 0.0f;
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
