#include "model/awq_scales.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/dot.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

double QuantizationLoss(const DenseMatrix& w, std::span<const float> s, std::span<const float> x, ThreadPool& pool,
                        const QuantScheme& scheme) {
  const size_t rows = w.rows(), cols = w.cols(), n = x.size() / cols;
  std::vector<float> scaled(w.values.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) scaled[r * cols + c] = w.values[r * cols + c] * s[c];
  const std::vector<float> deq = QuantizeRtn(scaled, rows, cols, scheme, "awq search").Dequantize();
  std::vector<float> diff(scaled.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) diff[r * cols + c] = w.values[r * cols + c] - deq[r * cols + c] / s[c];
  std::vector<float> y(n * rows);
  pool.ParallelFor(rows, [&](size_t begin, size_t end) { DotRows(diff.data(), cols, begin, end, x.data(), n, y.data(), rows); });
  double loss = 0;
  for (const float v : y) loss += static_cast<double>(v) * v;
  return loss;
}

}  // namespace

InputScales SearchInputScales(std::span<const ScaleSearchTerm> terms, std::span<const float> mean_abs,
                              const QuantScheme& scheme, size_t grid, ThreadPool& pool) {
  const size_t cols = mean_abs.size();
  InputScales best;
  best.loss = INFINITY;
  std::vector<float> s(cols);
  for (size_t k = 0; k < grid; ++k) {
    const double alpha = static_cast<double>(k) / static_cast<double>(grid);
    float lo = INFINITY, hi = 0;
    for (size_t c = 0; c < cols; ++c) {
      s[c] = std::max(static_cast<float>(std::pow(mean_abs[c], alpha)), 1e-4f);
      lo = std::min(lo, s[c]);
      hi = std::max(hi, s[c]);
    }
    const float norm = std::sqrt(lo * hi);
    for (float& v : s) v /= norm;
    double loss = 0;
    for (const ScaleSearchTerm& t : terms)
      if (!t.x.empty()) loss += QuantizationLoss(*t.weight, s, t.x, pool, scheme);
    if (k == 0) best.loss_unscaled = loss;
    if (loss < best.loss) best = {s, alpha, loss, best.loss_unscaled};
  }
  return best;
}

namespace {

void ScaleColumns(Linear& l, std::span<const float> s) {
  DenseMatrix& m = std::get<DenseMatrix>(l.weight);
  for (size_t r = 0; r < m.rows(); ++r)
    for (size_t c = 0; c < m.cols(); ++c) m.values[r * m.cols() + c] *= s[c];
}

void DivideRows(Linear& l, std::span<const float> s) {
  DenseMatrix& m = std::get<DenseMatrix>(l.weight);
  for (size_t r = 0; r < m.rows(); ++r) {
    for (size_t c = 0; c < m.cols(); ++c) m.values[r * m.cols() + c] /= s[r];
    if (!l.bias.empty()) l.bias[r] /= s[r];
  }
}

}  // namespace

void FoldInputScales(const ModelConfig& config, LayerWeights& lw, LinearInput group, std::span<const float> s) {
  switch (group) {
    case LinearInput::kQkv:
      for (size_t c = 0; c < s.size(); ++c) lw.attn_norm[c] /= s[c];
      for (Linear* l : {&lw.wq, &lw.wk, &lw.wv}) ScaleColumns(*l, s);
      return;
    case LinearInput::kO:
      LOWBIT_CHECK(config.n_heads == config.n_kv_heads);  // one v row per o column
      DivideRows(lw.wv, s);
      ScaleColumns(lw.wo, s);
      return;
    case LinearInput::kGateUp:
      for (size_t c = 0; c < s.size(); ++c) lw.ffn_norm[c] /= s[c];
      for (Linear* l : {&lw.w_gate, &lw.w_up}) ScaleColumns(*l, s);  // empty in a sparse layer without a shared expert
      for (Expert& e : lw.experts)
        for (Linear* l : {&e.gate, &e.up}) ScaleColumns(*l, s);
      for (size_t i = 0; i < lw.router.size(); ++i) lw.router[i] *= s[i % s.size()];
      for (size_t c = 0; c < lw.shared_gate.size(); ++c) lw.shared_gate[c] *= s[c];
      return;
    case LinearInput::kDown:
      FoldDownScales(lw.w_up, lw.w_down, s);
      return;
    case LinearInput::kLatentIn:  // q_a (or q) and kv_a after the input norm
      for (size_t c = 0; c < s.size(); ++c) lw.attn_norm[c] /= s[c];
      for (Linear* l : {config.q_lora_rank > 0 ? &lw.wq_a : &lw.wq, &lw.wkv_a}) ScaleColumns(*l, s);
      return;
    case LinearInput::kLatentQ:  // q_b after q_a's norm
      for (size_t c = 0; c < s.size(); ++c) lw.q_a_norm[c] /= s[c];
      ScaleColumns(lw.wq, s);
      return;
    case LinearInput::kLatentKv:  // kv_b after the latent's norm; the cached latent is read only through kv_b
      for (size_t c = 0; c < s.size(); ++c) lw.kv_a_norm[c] /= s[c];
      ScaleColumns(lw.wkv_b, s);
      return;
  }
}

void FoldDownScales(Linear& up, Linear& down, std::span<const float> s) {
  DivideRows(up, s);
  ScaleColumns(down, s);
}

}  // namespace lowbit
