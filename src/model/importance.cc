#include "model/importance.h"

namespace lowbit {
namespace {

void Accumulate(const std::vector<float>& input, size_t tokens, ColumnSquares& s, ThreadPool& pool) {
  const size_t cols = input.size() / tokens;
  if (s.sum.empty()) s.sum.assign(cols, 0.0);
  // Columns split across threads; each sums its columns over the tokens in order (deterministic).
  ParallelFor(&pool, cols, [&](size_t begin, size_t end) {
    for (size_t t = 0; t < tokens; ++t) {
      const float* x = &input[t * cols];
      for (size_t i = begin; i < end; ++i) s.sum[i] += static_cast<double>(x[i]) * x[i];
    }
  });
  s.tokens += tokens;
}

}  // namespace

std::vector<LayerImportance> CollectInputSquares(Engine& engine, const std::vector<std::vector<int32_t>>& windows,
                                                 const std::function<void(size_t)>& progress) {
  const size_t n_layers = engine.model().config.n_layers;
  std::vector<LayerImportance> out(n_layers);
  std::vector<float> input;
  for (size_t w = 0; w < windows.size(); ++w) {
    KvCache cache = engine.NewCache(windows[w].size());
    BatchItem item{&cache, windows[w], false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    std::vector<float> x = engine.Embed(batch);
    const size_t tokens = windows[w].size();
    for (size_t l = 0; l < n_layers; ++l) {
      engine.BeginLayer(l, x, input);
      for (const LinearInput group : {LinearInput::kQkv, LinearInput::kO, LinearInput::kGateUp, LinearInput::kDown}) {
        Accumulate(input, tokens, out[l][static_cast<size_t>(group)], engine.pool());
        engine.AdvanceLayer(l, group, batch, x, input);
      }
    }
    if (progress) progress(w + 1);
  }
  return out;
}

}  // namespace lowbit
