// Attention of one token's query heads over a KV cache, for one KV head and the query heads that
// share it (GQA: K/V are decoded once per KV head, never copied per query head).
//
// AttendBlocked walks the cache a block at a time with an online softmax: a running maximum and
// normaliser per query head, partial outputs rescaled when the maximum grows, so extra memory is
// one decoded K/V tile and one block of scores. AttendTwoPass is the textbook version (all
// scores materialised, softmax, weighted sum): the reference tests and benchmarks compare with.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/thread_pool.h"
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
  bool int8_dots = false;    // KIVI tiles on integer dots (AttentionTile::int8_dots): Activations::kFast
  // GPT-OSS: one logit per query head [heads] that joins its softmax's denominator and attends to nothing;
  // nullptr = none.
  const float* sinks = nullptr;
};

// Reusable per-thread buffers, sized on first use.
struct AttentionScratch {
  std::vector<float> k_tile, v_tile, scores, state;
};

void AttendBlocked(const KvCache& cache, const AttentionQuery& query, AttentionScratch& scratch, float* out);
void AttendTwoPass(const KvCache& cache, const AttentionQuery& query, AttentionScratch& scratch, float* out);

// One query's attention and where its [heads x head_dim] output goes.
struct AttentionJob {
  const KvCache* cache;
  AttentionQuery query;
  float* out;
};

// Every job on the pool. When there are fewer jobs than the pool can keep busy (a decode step of one
// sequence over few KV heads), each long job's positions are split into block-aligned segments run
// as separate tasks, each keeping its own online-softmax state, merged at the end (flash-decoding):
// all threads then share one long context instead of one thread per KV head.
void AttendJobs(std::span<const AttentionJob> jobs, ThreadPool& pool);
// How many segments AttendJobs splits each job into (1 = none), for the job count, the pool's
// threads and the longest job's positions.
size_t AttentionSegments(size_t jobs, size_t threads, size_t positions, size_t block_tokens);

}  // namespace lowbit
