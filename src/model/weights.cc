#include "model/weights.h"

#include "core/error.h"

namespace lowbit {

uint64_t Linear::rows() const {
  return std::visit([](const auto& w) -> uint64_t { return w.rows(); }, weight);
}
uint64_t Linear::cols() const {
  return std::visit([](const auto& w) -> uint64_t { return w.cols(); }, weight);
}
uint64_t Linear::storage_bytes() const {
  // Outlier columns: their fp32 weights plus one 4-byte index each.
  const uint64_t side = outliers ? outliers->weight.values.size() * 4 + outliers->columns.size() * 4 : 0;
  if (const auto* q = std::get_if<QuantizedTensor>(&weight)) return q->storage_bytes() + bias.size() * 4 + side;
  return std::get<DenseMatrix>(weight).values.size() * 4 + bias.size() * 4 + side;
}

namespace {

void CheckVector(const std::vector<float>& v, uint64_t n, const std::string& name, const std::string& source) {
  if (v.size() != n) Fail("{}: tensor '{}' has {} values, expected {}", source, name, v.size(), n);
}

void CheckLinear(const Linear& l, uint64_t rows, uint64_t cols, bool bias, const std::string& name,
                 const std::string& source) {
  if (l.rows() != rows || l.cols() != cols)
    Fail("{}: tensor '{}' has shape [{} x {}], expected [{} x {}]", source, name, l.rows(), l.cols(), rows, cols);
  if (bias) CheckVector(l.bias, rows, name + " bias", source);
  if (!bias && !l.bias.empty()) Fail("{}: tensor '{}' has an unexpected bias", source, name);
  if (l.input_hadamard != 0 && ((l.input_hadamard & (l.input_hadamard - 1)) != 0 || cols % l.input_hadamard != 0))
    Fail("{}: tensor '{}' has an online Hadamard of block {}, which must be a power of two dividing {}", source, name,
         l.input_hadamard, cols);
  if (l.outliers) {
    const OutlierColumns& o = *l.outliers;
    if (o.weight.rows() != rows || o.weight.cols() != o.columns.size() || o.weight.values.size() != rows * o.columns.size())
      Fail("{}: tensor '{}' has outlier weights of shape [{} x {}], expected [{} x {}]", source, name, o.weight.rows(),
           o.weight.cols(), rows, o.columns.size());
    for (size_t i = 0; i < o.columns.size(); ++i)
      if (o.columns[i] >= cols || (i > 0 && o.columns[i] <= o.columns[i - 1]))
        Fail("{}: tensor '{}': outlier columns must be ascending and below {}", source, name, cols);
  }
}

}  // namespace

void ValidateLayer(const ModelConfig& c, const LayerWeights& l, size_t index, const std::string& source) {
  const std::string p = "layer " + std::to_string(index) + " ";
  CheckVector(l.attn_norm, c.dim, p + "attn_norm", source);
  CheckVector(l.ffn_norm, c.dim, p + "ffn_norm", source);
  CheckLinear(l.wq, c.q_dim(), c.dim, c.qkv_bias, p + "q_proj", source);
  CheckLinear(l.wk, c.kv_dim(), c.dim, c.qkv_bias, p + "k_proj", source);
  CheckLinear(l.wv, c.kv_dim(), c.dim, c.qkv_bias, p + "v_proj", source);
  CheckLinear(l.wo, c.dim, c.q_dim(), false, p + "o_proj", source);
  CheckLinear(l.w_gate, c.ffn_dim, c.dim, false, p + "gate_proj", source);
  CheckLinear(l.w_up, c.ffn_dim, c.dim, false, p + "up_proj", source);
  CheckLinear(l.w_down, c.dim, c.ffn_dim, false, p + "down_proj", source);
}

void ValidateEnds(const ModelConfig& c, const ModelWeights& w, const std::string& source) {
  CheckVector(w.embed, uint64_t{c.vocab_size} * c.dim, "embedding", source);
  if (w.layers.size() != c.n_layers) Fail("{}: {} layers loaded, config says {}", source, w.layers.size(), c.n_layers);
  CheckVector(w.final_norm, c.dim, "final norm", source);
  CheckLinear(w.lm_head, c.vocab_size, c.dim, false, "lm_head", source);
}

void ValidateWeights(const ModelConfig& c, const ModelWeights& w, const std::string& source) {
  ValidateEnds(c, w, source);
  for (uint32_t i = 0; i < c.n_layers; ++i) ValidateLayer(c, w.layers[i], i, source);
}

}  // namespace lowbit
