#include "eval/speed.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_blocks.h"
#include "io/gguf_quantize.h"
#include "io/gguf_repack.h"
#include "kernels/matmul.h"
#include "kernels/stream.h"
#include "model/forward.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

std::vector<float> RandomVector(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace

double DecodeWeightBytes(const Model& model, size_t batch) {
  const ModelConfig& c = model.config;
  // Each token picks k of E experts: a step of `batch` tokens reads each expert with probability
  // 1 - (1 - k/E)^batch (plan/plan.cc's estimate, for routes assumed independent).
  const double touched = c.n_experts == 0 ? 1.0
      : 1.0 - std::pow(1.0 - static_cast<double>(c.experts_per_token) / c.n_experts, static_cast<double>(batch));
  double bytes = static_cast<double>(LinearWeightBytes(model.weights));
  for (const LayerWeights& l : model.weights.layers)
    for (const Expert& e : l.experts)
      for (const Linear* linear : {&e.gate, &e.up, &e.down})
        bytes -= (1.0 - touched) * static_cast<double>(linear->storage_bytes());
  return bytes;
}

uint64_t LinearWeightBytes(const ModelWeights& w) {
  uint64_t total = w.lm_head.storage_bytes();
  for (const LayerWeights& l : w.layers)
    for (const ConstBlockLinear& bl : BlockLinears(l)) total += bl.linear->storage_bytes();
  return total;
}

Linear GemvWeight(std::string_view format, uint64_t rows, uint64_t cols, std::string& name) {
  const std::vector<float> w = RandomVector(rows * cols, 1, 0.02f);
  Linear l;
  if (format == "fp32") {
    l.weight = DenseMatrix{rows, cols, w};
    name = "fp32";
    return l;
  }
  const auto same_name = [](std::string_view a, std::string_view b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) { return std::toupper(x) == std::toupper(y); });
  };
  for (const GgmlTypeInfo& type : AllGgmlTypes()) {
    if (!same_name(type.name, format) || !FindGgmlBlockFormat(type.id) || !CanQuantizeGguf(type.id)) continue;
    if (cols % type.block_elems != 0) Fail("bench gemv: --cols {} is not a multiple of {}'s {}-element blocks", cols, format, type.block_elems);
    GgufTensorInfo t{"bench", type.id, {cols, rows}, 0, rows * cols, {}};
    std::vector<std::byte> blocks(rows * cols / type.block_elems * type.block_bytes);
    QuantizeGgufRow(type.id, w.data(), static_cast<int64_t>(rows * cols), {}, blocks.data());
    t.data = blocks;
    std::optional<QuantizedTensor> q = RepackGgufMatrix(t, rows, cols);
    LOWBIT_CHECK(q.has_value());  // a block type
    name = fmt::format("{} ({})", type.name, q->scheme().ToString());
    l.weight = std::move(*q);
    return l;
  }
  const QuantScheme scheme = ParseScheme(format);
  l.weight = QuantizeRtn(w, rows, cols, scheme, "bench");
  name = scheme.ToString();
  return l;
}

GemvSpeed MeasureGemv(const Linear& prototype, const GemvBenchOptions& o, ThreadPool& pool) {
  GemvSpeed s;
  s.bits_per_weight = 8.0 * static_cast<double>(prototype.storage_bytes()) / static_cast<double>(o.rows * o.cols);
  // Distinct copies, so no pass finds its weights in a cache.
  s.matrices = std::max<uint64_t>(1, (o.working_set_bytes + prototype.storage_bytes() - 1) / prototype.storage_bytes());
  const std::vector<Linear> matrices(s.matrices, prototype);
  s.bytes_per_pass = s.matrices * prototype.storage_bytes();
  const std::vector<float> x = RandomVector(o.tokens * o.cols, 2, 1.0f);
  std::vector<float> y(o.tokens * o.rows);
  auto pass = [&] {
    for (const Linear& m : matrices) MatMul(m, x.data(), o.tokens, y.data(), pool, Activations::kFast);
  };
  pass();  // warm-up: page faults, thread wake-ups
  for (size_t round = 0; round < std::max<size_t>(1, o.rounds); ++round) {
    if (o.bandwidth_bytes > 0)
      s.triad_gbps = std::max(s.triad_gbps, MeasureMemoryBandwidth(o.bandwidth_bytes, 3, pool).triad_gbps);
    // The fastest pass, as the triad keeps its fastest pass (STREAM's rule): a round's mean put
    // the GEMV's dips against the triad's peak.
    const auto start = Clock::now();
    size_t passes = 0;
    do {
      const auto pass_start = Clock::now();
      pass();
      s.gbps = std::max(s.gbps, static_cast<double>(s.bytes_per_pass) / Seconds(pass_start) / 1e9);
      ++passes;
    } while (Seconds(start) < o.min_seconds || passes < 2);
  }
  return s;
}

std::vector<BatchSpeed> MeasureDecode(const Model& model, const std::vector<size_t>& batches, size_t ctx,
                                      size_t steps, size_t threads, const KvCacheOptions& kv) {
  Engine engine(model, threads, kv, Activations::kFast);
  const uint32_t vocab = model.config.vocab_size;
  // One prefilled context, copied into every sequence: the values do not matter for speed.
  KvCache prefilled = engine.NewCache(ctx + steps);
  std::vector<int32_t> prompt(ctx);
  for (size_t i = 0; i < ctx; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 1) % vocab);
  if (ctx > 0) engine.Forward(prefilled, prompt, false);
  std::vector<BatchSpeed> out;
  for (const size_t batch : batches) {
    const double bytes = DecodeWeightBytes(model, batch);
    std::vector<KvCache> caches(batch, prefilled);
    std::vector<std::vector<float>> logits(batch);
    std::vector<int32_t> tokens(batch, 1);
    std::vector<BatchItem> items;
    for (size_t b = 0; b < batch; ++b)
      items.push_back({&caches[b], std::span<const int32_t>(&tokens[b], 1), false, &logits[b]});
    const auto start = Clock::now();
    for (size_t step = 0; step < steps; ++step) engine.Forward(items);
    const double seconds = Seconds(start);
    out.push_back({batch, static_cast<double>(batch * steps) / seconds, seconds / static_cast<double>(steps) * 1e3,
                   bytes * static_cast<double>(steps) / seconds / 1e9});
  }
  return out;
}

std::vector<BatchSpeed> MeasurePrefill(const Model& model, const std::vector<size_t>& batches, size_t ctx,
                                       size_t threads, const KvCacheOptions& kv) {
  Engine engine(model, threads, kv, Activations::kFast);
  const uint32_t vocab = model.config.vocab_size;
  std::vector<int32_t> prompt(ctx);
  for (size_t i = 0; i < ctx; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 1) % vocab);
  const double bytes = static_cast<double>(LinearWeightBytes(model.weights));
  std::vector<BatchSpeed> out;
  for (const size_t batch : batches) {
    std::vector<KvCache> caches(batch, engine.NewCache(ctx));
    std::vector<std::vector<float>> logits(batch);
    std::vector<BatchItem> items;
    for (size_t b = 0; b < batch; ++b) items.push_back({&caches[b], prompt, false, &logits[b]});
    engine.Forward(items);  // warm-up: first-touch of the caches and activation buffers, thread wake-ups
    for (KvCache& cache : caches) cache.Clear();
    const auto start = Clock::now();
    engine.Forward(items);
    const double seconds = Seconds(start), tokens = static_cast<double>(batch * ctx);
    out.push_back({batch, tokens / seconds, seconds / tokens * 1e3, bytes / seconds / 1e9});
  }
  return out;
}

}  // namespace lowbit
