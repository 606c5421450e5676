// Speed measurements behind `lowbit bench`: GEMV bandwidth over a working set no cache can hold,
// and whole-model decode / prefill throughput per batch size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "quant/scheme.h"

namespace lowbit {

struct GemvSpeed {
  size_t matrices = 0;          // distinct copies cycled through
  uint64_t bytes_per_pass = 0;  // weight bytes (codes, scales, zeros) read by one pass over all
  double bits_per_weight = 0;
  double gbps = 0;              // weight bytes read per second
};

// y = W x at batch `tokens` (1 = GEMV) over enough distinct [rows x cols] matrices to fill `working_set_bytes`;
// `scheme` nullopt = dense fp32. Runs passes until `min_seconds` have elapsed.
GemvSpeed MeasureGemv(const std::optional<QuantScheme>& scheme, uint64_t rows, uint64_t cols,
                      uint64_t working_set_bytes, double min_seconds, ThreadPool& pool, size_t tokens = 1);

struct BatchSpeed {
  size_t batch = 0;
  double tokens_per_second = 0;  // all sequences together
  double ms_per_token = 0;       // decode: one step (a token for every sequence); prefill: per token
  double weight_gbps = 0;        // linear-layer weight bytes streamed per second
};

// Decode: each of `batch` sequences holds `ctx` cached positions, then `steps` tokens are
// generated for all of them; the time of those steps is measured.
std::vector<BatchSpeed> MeasureDecode(const Model& model, const std::vector<size_t>& batches, size_t ctx,
                                      size_t steps, size_t threads, const KvCacheOptions& kv = {});
// Prefill: `batch` sequences of `ctx` tokens each in one forward pass.
std::vector<BatchSpeed> MeasurePrefill(const Model& model, const std::vector<size_t>& batches, size_t ctx,
                                       size_t threads, const KvCacheOptions& kv = {});

// Bytes of every linear layer's weights (what one decode step streams), lm_head included.
uint64_t LinearWeightBytes(const ModelWeights& w);

}  // namespace lowbit
