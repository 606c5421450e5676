#include "pipeline/bench_jobs.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "eval/speed.h"
#include "kernels/stream.h"
#include "model/attention.h"
#include "pipeline/session.h"

namespace lowbit {
namespace {

constexpr uint64_t kMiB = 1 << 20;

}  // namespace

nlohmann::json RunMemoryBench(const MemoryBenchJob& job) {
  ThreadPool pool(job.threads);
  const MemoryBandwidth m = MeasureMemoryBandwidth(job.mib * kMiB, 5, pool);
  return {{"copy_gbps", m.copy_gbps}, {"triad_gbps", m.triad_gbps}, {"bytes", m.bytes}, {"threads", pool.size()}};
}

nlohmann::json RunGemvBench(const GemvBenchJob& job) {
  ThreadPool pool(job.threads);
  std::string name;
  const Linear weight = GemvWeight(job.format, job.rows, job.cols, name);
  const GemvSpeed s = MeasureGemv(weight,
                                  {.rows = job.rows, .cols = job.cols, .working_set_bytes = job.working_set_mib * kMiB,
                                   .tokens = job.tokens, .min_seconds = job.seconds, .rounds = job.rounds,
                                   .bandwidth_bytes = job.bandwidth_mib * kMiB},
                                  pool);
  return {{"format", name}, {"rows", job.rows}, {"cols", job.cols}, {"tokens", job.tokens}, {"gbps", s.gbps},
          {"fraction_of_bandwidth", s.gbps / s.triad_gbps}, {"triad_gbps", s.triad_gbps}, {"rounds", job.rounds},
          {"bits_per_weight", s.bits_per_weight}, {"matrices", s.matrices}, {"working_set_bytes", s.bytes_per_pass},
          {"threads", pool.size()}};
}

nlohmann::json RunAttentionBench(const AttentionBenchJob& job) {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 32;
  c.n_kv_heads = static_cast<uint32_t>(job.kv_heads);
  c.head_dim = 128;
  c.dim = 4096;
  if (job.kv_heads == 0 || c.n_heads % job.kv_heads != 0)
    Fail("--kv-heads {} does not divide the {} query heads", job.kv_heads, c.n_heads);
  if (job.ctx == 0) Fail("--ctx must be at least 1");
  KvCache cache(c, job.ctx, KvCacheOptionsFor(job.kv_cache_dtype, "", "", c.n_layers));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(c.kv_dim()), v(c.kv_dim()), q(c.n_heads * c.head_dim), out(q.size());
  for (size_t p = 0; p < job.ctx; ++p) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    cache.Write(0, p, k.data(), v.data());
  }
  cache.Advance(job.ctx);
  for (float& x : q) x = normal(rng);
  ThreadPool pool(job.threads);
  const size_t group = c.n_heads / c.n_kv_heads;
  std::vector<AttentionJob> jobs;
  for (size_t h = 0; h < c.n_kv_heads; ++h)
    jobs.push_back({&cache,
                    {.kv_head = h, .position = job.ctx - 1, .q = &q[h * group * c.head_dim], .heads = group,
                     .scale = 0.088f, .int8_dots = true},  // as generation runs (Activations::kFast)
                    &out[h * group * c.head_dim]});
  using Clock = std::chrono::steady_clock;
  auto time = [&](auto step) {
    const auto start = Clock::now();
    size_t calls = 0;
    do {
      step();
      ++calls;
    } while (std::chrono::duration<double>(Clock::now() - start).count() < job.seconds);
    return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(calls) * 1e6;
  };
  const double blocked = time([&] { AttendJobs(jobs, pool); });
  // KIVI runs its dots on integers where the CPU allows (generation); evaluation keeps fp32.
  double blocked_fp32_dots = 0;
  if (cache.options().dtype == KvDtype::kInt4 || cache.options().dtype == KvDtype::kInt2) {
    std::vector<AttentionJob> exact = jobs;
    for (AttentionJob& j : exact) j.query.int8_dots = false;
    blocked_fp32_dots = time([&] { AttendJobs(exact, pool); });
  }
  const double two_pass = time([&] {
    pool.ParallelFor(jobs.size(), [&](size_t begin, size_t end) {
      AttentionScratch scratch;
      for (size_t i = begin; i < end; ++i) AttendTwoPass(cache, jobs[i].query, scratch, jobs[i].out);
    });
  });
  const size_t segments = AttentionSegments(jobs.size(), pool.size(), job.ctx, cache.options().block_tokens);
  const double kv_bytes = static_cast<double>(cache.bytes());
  const MemoryBandwidth m = MeasureMemoryBandwidth(job.bandwidth_mib * kMiB, 5, pool);
  const double bound_us = kv_bytes / (m.triad_gbps * 1e9) * 1e6;
  nlohmann::json r = {{"ctx", job.ctx}, {"kv_cache_dtype", job.kv_cache_dtype}, {"kv_heads", c.n_kv_heads},
                      {"threads", pool.size()}, {"segments", segments}, {"blocked_us", blocked}, {"two_pass_us", two_pass},
                      {"speedup", two_pass / blocked}, {"kv_bytes", kv_bytes}, {"triad_gbps", m.triad_gbps},
                      {"bandwidth_bound_us", bound_us}, {"blocked_over_bound", blocked / bound_us},
                      {"block_tokens", cache.options().block_tokens}};
  if (blocked_fp32_dots > 0) r["blocked_fp32_dots_us"] = blocked_fp32_dots;
  return r;
}

}  // namespace lowbit
