// `lowbit bench memory|gemv|attention` as library calls (decode and prefill are speed_job.h's): each
// returns what the CLI's --json prints, so the CLI's tables and the Python package read the same fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lowbit {

// STREAM-like copy and triad over `mib` MiB of arrays, best of 5 passes: copy_gbps, triad_gbps, bytes,
// threads.
struct MemoryBenchJob {
  size_t mib = 1536;
  size_t threads = 0;  // 0: all cores
};
nlohmann::json RunMemoryBench(const MemoryBenchJob& job);

// Batch-`tokens` matrix-vector speed of one weight format over a working set of distinct matrices, the
// fastest pass of `rounds`, each round after its own triad: format, rows, cols, tokens, gbps,
// fraction_of_bandwidth, triad_gbps, rounds, bits_per_weight, matrices, working_set_bytes, threads.
struct GemvBenchJob {
  std::string format = "int4:g128";  // fp32, bf16 or a scheme
  uint64_t rows = 4096, cols = 4096;
  uint64_t working_set_mib = 512;
  size_t tokens = 1;
  double seconds = 1.0;  // per round
  size_t rounds = 3;
  size_t bandwidth_mib = 1536;  // the triad's arrays
  size_t threads = 0;
};
nlohmann::json RunGemvBench(const GemvBenchJob& job);

// One decode step's attention at position ctx - 1 over a random cache (one layer, 32 query heads of 128
// over `kv_heads`): the engine's blocked online softmax against the two-pass reference, and the KV
// bytes one step reads against the triad: ctx, kv_cache_dtype, kv_heads, threads, segments, blocked_us,
// two_pass_us, speedup, kv_bytes, triad_gbps, bandwidth_bound_us, blocked_over_bound, block_tokens.
struct AttentionBenchJob {
  size_t ctx = 512;
  std::string kv_cache_dtype = "fp32";
  size_t kv_heads = 8;
  double seconds = 1.0;  // per kernel
  size_t bandwidth_mib = 1536;
  size_t threads = 0;
};
nlohmann::json RunAttentionBench(const AttentionBenchJob& job);

}  // namespace lowbit
