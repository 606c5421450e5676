#include "model/importance.h"

namespace lowbit {
namespace {

void Accumulate(const float* x, size_t rows, size_t cols, ColumnSquares& s, ThreadPool& pool) {
  if (s.sum.empty()) s.sum.assign(cols, 0.0);
  // Columns split across threads; each sums its columns over the rows in order (deterministic).
  ParallelFor(&pool, cols, [&](size_t begin, size_t end) {
    for (size_t t = 0; t < rows; ++t) {
      const float* row = &x[t * cols];
      for (size_t i = begin; i < end; ++i) s.sum[i] += static_cast<double>(row[i]) * row[i];
    }
  });
  s.tokens += rows;
}

void Accumulate(const std::vector<float>& input, size_t rows, ColumnSquares& s, ThreadPool& pool) {
  Accumulate(input.data(), rows, input.size() / rows, s, pool);
}

}  // namespace

std::vector<LayerImportance> CollectInputSquares(Engine& engine, const std::vector<std::vector<int32_t>>& windows,
                                                 const std::function<void(size_t)>& progress) {
  const ModelConfig& c = engine.model().config;
  std::vector<LayerImportance> out(c.n_layers);
  const std::vector<LinearInput> stages = AttentionInputs(c);
  std::vector<float> input;
  if (c.mla())
    engine.ObserveLatentAttention([&](size_t l, const float* query_nope, const float* latent_out, size_t tokens) {
      Accumulate(query_nope, tokens, c.n_heads * c.qk_nope_dim, out[l].latent_query, engine.pool());
      Accumulate(latent_out, tokens, c.n_heads * c.kv_lora_rank, out[l].latent_output, engine.pool());
    });
  for (size_t w = 0; w < windows.size(); ++w) {
    KvCache cache = engine.NewCache(windows[w].size());
    BatchItem item{&cache, windows[w], false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    std::vector<float> x = engine.Embed(batch);
    const size_t tokens = windows[w].size();
    for (size_t l = 0; l < c.n_layers; ++l) {
      LayerImportance& li = out[l];
      engine.BeginLayer(l, x, input);
      for (const LinearInput stage : stages) {
        Accumulate(input, tokens, li.attention[static_cast<size_t>(stage)], engine.pool());
        engine.AdvanceLayer(l, stage, batch, x, input);
      }
      Accumulate(input, tokens, li.attention[static_cast<size_t>(LinearInput::kO)], engine.pool());
      engine.AdvanceLayer(l, LinearInput::kO, batch, x, input);
      const LayerWeights& lw = engine.model().weights.layers[l];
      const size_t units = c.moe(l) ? lw.experts.size() + (lw.shared_expert() ? 1 : 0) : 1;
      li.unit_inputs.resize(units);
      li.unit_hidden.resize(units);
      if (c.moe(l)) {
        Accumulate(input, tokens, li.router_input, engine.pool());
        VisitMlpInputs(c, lw, l, input.data(), tokens, engine.pool(),
                       [&](size_t unit, const float* in, const float* hidden, size_t rows) {
                         Accumulate(in, rows, c.dim, li.unit_inputs[unit], engine.pool());
                         const size_t width = unit == 0 && lw.shared_expert() ? c.shared_expert_ffn_dim : c.expert_ffn_dim;
                         Accumulate(hidden, rows, width, li.unit_hidden[unit], engine.pool());
                       });
        engine.AdvanceLayer(l, LinearInput::kGateUp, batch, x, input);
      } else {  // the dense MLP's down input is the kGateUp stage's output
        Accumulate(input, tokens, li.unit_inputs[0], engine.pool());
        engine.AdvanceLayer(l, LinearInput::kGateUp, batch, x, input);
        Accumulate(input, tokens, li.unit_hidden[0], engine.pool());
      }
      engine.AdvanceLayer(l, LinearInput::kDown, batch, x, input);
    }
    if (progress) progress(w + 1);
  }
  engine.ObserveLatentAttention({});
  return out;
}

}  // namespace lowbit
