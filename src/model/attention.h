// Attention of one token's query heads over a KV cache, for one KV head and the query heads that
// share it (GQA: K/V are decoded once per KV head, never copied per query head).
//
// AttendBlocked walks the cache a block at a time with an online softmax: a running maximum and
// normaliser per query head, partial outputs rescaled when the maximum grows, so extra memory is
// one decoded K/V tile and one block of scores. AttendTwoPass is the textbook version (all
// scores materialised, softmax, weighted sum): the reference tests and benchmarks compare with.
#pragma once

#include <cstddef>
#include <vector>

#include "model/kv_cache.h"

namespace lowbit {

struct AttentionQuery {
  size_t layer = 0, kv_head = 0;
  size_t position = 0;    // the token's position: positions first..position are visible
  const float* q = nullptr;  // [heads x head_dim], already rotated
  size_t heads = 1;          // query heads sharing this KV head
  float scale = 1;           // 1 / sqrt(head_dim)
  size_t first = 0;          // a sliding window's first visible position
  float softcap = 0;         // scores soft-capped to (-softcap, softcap) when > 0 (kernels/attention_tile.h)
};

// Reusable per-thread buffers, sized on first use.
struct AttentionScratch {
  std::vector<float> k_tile, v_tile, scores, acc, max, sum;
};

void AttendBlocked(const KvCache& cache, const AttentionQuery& query, AttentionScratch& scratch, float* out);
void AttendTwoPass(const KvCache& cache, const AttentionQuery& query, AttentionScratch& scratch, float* out);

}  // namespace lowbit
