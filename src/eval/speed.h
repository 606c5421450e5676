// Speed measurements behind `lowbit bench`: GEMV bandwidth over a working set no cache can hold,
// and whole-model decode / prefill throughput per batch size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  double gbps = 0;              // weight bytes read per second, fastest pass of all rounds
  double triad_gbps = 0;        // STREAM triad, fastest pass of all rounds (0 when not measured)
};

struct GemvBenchOptions {
  uint64_t rows = 4096, cols = 4096, working_set_bytes = 512ull << 20;
  size_t tokens = 1;          // activation rows (1 = GEMV)
  double min_seconds = 1.0;   // per round
  size_t rounds = 1;
  uint64_t bandwidth_bytes = 0;  // > 0: measure the triad before every round, over arrays this large
};

// A [rows x cols] weight of random values (sigma 0.02) in `format`: "fp32" (dense), a scheme
// (RTN, "bf16" included), or a GGUF block type by name, case-insensitive ("Q6_K": encoded by
// ggml's reference quantizer and loaded as a GGUF file's tensor is). `name` receives what it is,
// for tables.
Linear GemvWeight(std::string_view format, uint64_t rows, uint64_t cols, std::string& name);

// y = W x over enough distinct copies of `prototype` to fill the working set. Each round runs the
// triad (when asked), then GEMV passes until min_seconds; the fastest pass of each is kept: on a shared machine whose bandwidth drifts, both then come from
// its quiet phases, so their ratio stays meaningful.
GemvSpeed MeasureGemv(const Linear& prototype, const GemvBenchOptions& o, ThreadPool& pool);

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

// Bytes of every linear layer's weights (what one decode step of a dense model streams), lm_head included.
uint64_t LinearWeightBytes(const ModelWeights& w);
// The linear weight bytes one decode step of `batch` tokens is expected to stream: every dense linear,
// and each expert of a mixture in proportion to the chance that a token of the step is routed to it.
double DecodeWeightBytes(const Model& model, size_t batch);

}  // namespace lowbit
