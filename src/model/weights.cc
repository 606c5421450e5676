#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/column_order.h"

namespace lowbit {

uint64_t Linear::rows() const {
  return std::visit([](const auto& w) -> uint64_t { return w.rows(); }, weight);
}
uint64_t Linear::cols() const {
  return std::visit([](const auto& w) -> uint64_t { return w.cols(); }, weight);
}
uint64_t Linear::storage_bytes() const {
  // Outlier columns: their fp32 weights plus one 4-byte index each; act-order: one index per column.
  const uint64_t side = (outliers ? outliers->weight.values.size() * 4 + outliers->columns.size() * 4 : 0) +
                        input_order.size() * 4;
  if (const auto* q = std::get_if<QuantizedTensor>(&weight)) return q->storage_bytes() + bias.size() * 4 + side;
  return std::get<DenseMatrix>(weight).values.size() * 4 + bias.size() * 4 + side;
}

void InputOrderRow(const Linear& l, uint64_t r, std::span<float> scratch, std::span<float> out) {
  const uint64_t cols = l.cols();
  LOWBIT_CHECK(scratch.size() >= cols && out.size() >= cols);
  if (const auto* q = std::get_if<QuantizedTensor>(&l.weight)) q->DequantizeRow(r, scratch.data());
  else std::copy_n(std::get<DenseMatrix>(l.weight).values.data() + r * cols, cols, scratch.data());
  if (l.input_order.empty()) std::copy_n(scratch.data(), cols, out.data());
  else
    for (uint64_t j = 0; j < cols; ++j) out[l.input_order[j]] = scratch[j];
  if (l.outliers) {
    const OutlierColumns& o = *l.outliers;
    for (size_t k = 0; k < o.columns.size(); ++k) out[o.columns[k]] += o.weight.values[r * o.columns.size() + k];
  }
}

void Embedding::Row(uint64_t id, std::span<float> out) const {
  if (packed) packed->DequantizeRange(id, 0, out.size(), out.data());
  else std::copy_n(values.begin() + static_cast<ptrdiff_t>(id * out.size()), out.size(), out.begin());
}

std::vector<float> Embedding::Widened() const { return packed ? packed->Dequantize() : values; }

std::vector<float>& Embedding::MakeDense() {
  if (packed) {
    values = packed->Dequantize();
    packed.reset();
  }
  return values;
}

QuantizedTensor SixteenBitMatrix(std::span<const std::byte> bytes, bool bf16, uint64_t rows, uint64_t cols,
                                 bool allow_nonfinite, std::string_view name, std::string_view file,
                                 ConsumedBytes consumed) {
  QuantizedTensor q(ParseScheme(bf16 ? "bf16" : "fp16"), rows, cols);
  LOWBIT_CHECK(q.codes().size() == bytes.size());
  constexpr size_t kSlice = 8 << 20;
  for (size_t at = 0; at < bytes.size(); at += kSlice) {
    const std::span<const std::byte> slice = bytes.subspan(at, std::min(kSlice, bytes.size() - at));
    std::memcpy(q.codes().data() + at, slice.data(), slice.size());
    if (consumed) consumed(slice);
  }
  if (!allow_nonfinite) {
    std::vector<float> row(cols);
    for (uint64_t r = 0; r < rows; ++r) {
      q.DequantizeRow(r, row.data());
      CheckFinite(row, r * cols, name, file);
    }
  }
  return q;
}

bool IsPlainFloat(const QuantizedTensor& q) {
  return q.scheme().element->kind == ElementKind::kFloat && q.scheme().element->bits >= 16 && q.grid().cells() == 0;
}

bool WidenPlainFloat(Linear& linear) {
  const auto* q = std::get_if<QuantizedTensor>(&linear.weight);
  if (!q || !IsPlainFloat(*q)) return false;
  linear.weight = DenseMatrix{q->rows(), q->cols(), q->Dequantize()};
  return true;
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
  if (!IsColumnOrder(l.input_order, cols))
    Fail("{}: tensor '{}': the input order (act-order) must be a permutation of its {} input columns", source, name, cols);
  if (!l.input_order.empty() && !l.quantized())
    Fail("{}: tensor '{}' has an input order (act-order) but a dense weight", source, name);
}

}  // namespace

size_t FirstNonFinite(std::span<const float> values) {
  // Branch-free over blocks so the compiler vectorizes it (an exponent of all ones is NaN or Inf);
  // the exact index is searched only in a block that has one.
  constexpr size_t kBlock = 256;
  for (size_t begin = 0; begin < values.size(); begin += kBlock) {
    const size_t n = std::min(kBlock, values.size() - begin);
    uint32_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[begin + i], 4);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0)
      for (size_t i = begin; i < begin + n; ++i)
        if (!std::isfinite(values[i])) return i;
  }
  return values.size();
}

void CheckFinite(std::span<const float> values, uint64_t offset, std::string_view name, std::string_view file) {
  const size_t i = FirstNonFinite(values);
  if (i == values.size()) return;
  Fail("{}: tensor '{}' has a non-finite value ({}) at element {}; the model would compute NaN (pass "
       "--allow-nonfinite to load it anyway)", file, name, values[i], offset + i);
}

void CheckScalesFinite(const QuantizedTensor& q, std::string_view name, std::string_view file) {
  const auto fail = [&](std::string_view what, float value, uint64_t cell) {
    Fail("{}: tensor '{}' has a non-finite {} ({}) in scale cell {}; the model would compute NaN (pass "
         "--allow-nonfinite to load it anyway)", file, name, what, value, cell);
  };
  if (!std::isfinite(q.tensor_scale())) fail("tensor scale", q.tensor_scale(), 0);
  const bool offset = q.scheme().zero_type != ZeroType::kNone;
  for (uint64_t cell = 0; cell < q.grid().cells(); ++cell) {
    if (const float s = q.Scale(cell); !std::isfinite(s)) fail("scale", s, cell);
    if (offset)
      if (const float b = q.Bias(cell); !std::isfinite(b)) fail("zero point", b, cell);
  }
}

void CheckCodesFinite(const QuantizedTensor& q, std::string_view name, std::string_view file) {
  // Only 8-bit float elements have codes that decode to NaN or Inf; 16-bit weights are checked as
  // they are converted (SixteenBitMatrix).
  if (q.scheme().element->bits != 8) return;
  const std::span<const float> table = q.decode_table().first(256);
  std::array<uint8_t, 256> bad{};
  bool any = false;
  for (size_t c = 0; c < 256; ++c) any |= (bad[c] = !std::isfinite(table[c])) != 0;
  if (!any) return;
  for (uint64_t r = 0; r < q.rows(); ++r) {
    const uint8_t* row = q.codes().data() + r * q.row_bytes();
    uint8_t found = 0;  // branch-free over the row, searched only when it has one
    for (uint64_t i = 0; i < q.cols(); ++i) found |= bad[row[i]];
    if (!found) continue;
    for (uint64_t i = 0; i < q.cols(); ++i)
      if (bad[row[i]])
        Fail("{}: tensor '{}' has a non-finite code ({}, {:#04x}) at element {}; the model would compute NaN (pass "
             "--allow-nonfinite to load it anyway)", file, name, table[row[i]], row[i], r * q.cols() + i);
  }
}

namespace {

void CheckLinearFinite(const Linear& l, const std::string& name, const std::string& source) {
  if (const auto* d = std::get_if<DenseMatrix>(&l.weight)) CheckFinite(d->values, 0, name, source);
  CheckFinite(l.bias, 0, name + " bias", source);
  if (l.outliers) CheckFinite(l.outliers->weight.values, 0, name + " outlier columns", source);
}

}  // namespace

void CheckWeightsFinite(const ModelWeights& w, const std::string& source) {
  if (w.embed.packed) {
    std::vector<float> row(w.embed.packed->cols());
    for (uint64_t r = 0; r < w.embed.packed->rows(); ++r) {
      w.embed.Row(r, row);
      CheckFinite(row, r * row.size(), "embedding", source);
    }
  } else {
    CheckFinite(w.embed.values, 0, "embedding", source);
  }
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    CheckFinite(l.attn_norm, 0, p + "attn_norm", source);
    CheckFinite(l.ffn_norm, 0, p + "ffn_norm", source);
    CheckFinite(l.q_norm, 0, p + "q_norm", source);
    CheckFinite(l.k_norm, 0, p + "k_norm", source);
    CheckFinite(l.attn_out_norm, 0, p + "attn_out_norm", source);
    CheckFinite(l.ffn_out_norm, 0, p + "ffn_out_norm", source);
    CheckFinite(l.router, 0, p + "router", source);
    CheckFinite(l.shared_gate, 0, p + "shared expert gate", source);
    CheckFinite(l.router_bias, 0, p + "router bias", source);
    CheckFinite(l.router_logit_bias, 0, p + "router logit bias", source);
    CheckFinite(l.attn_sinks, 0, p + "attention sinks", source);
    CheckFinite(l.q_a_norm, 0, p + "q_a_norm", source);
    CheckFinite(l.kv_a_norm, 0, p + "kv_a_norm", source);
    for (const ConstBlockLinear& bl : BlockLinears(l)) CheckLinearFinite(*bl.linear, p + bl.name, source);
  }
  CheckFinite(w.final_norm, 0, "final norm", source);
  CheckLinearFinite(w.lm_head, "lm_head", source);
}

void ValidateLayer(const ModelConfig& c, const LayerWeights& l, size_t index, const std::string& source) {
  const std::string p = "layer " + std::to_string(index) + " ";
  CheckVector(l.attn_norm, c.pre_norms ? c.dim : 0, p + "attn_norm", source);
  CheckVector(l.ffn_norm, c.pre_norms && !c.parallel_block ? c.dim : 0, p + "ffn_norm", source);
  CheckVector(l.q_norm, c.q_norm_dim(), p + "q_norm", source);
  CheckVector(l.k_norm, c.k_norm_dim(), p + "k_norm", source);
  CheckVector(l.attn_out_norm, c.sandwich_norms ? c.dim : 0, p + "attn_out_norm", source);
  CheckVector(l.ffn_out_norm, c.sandwich_norms ? c.dim : 0, p + "ffn_out_norm", source);
  const bool moe = c.moe(index);
  CheckVector(l.router, moe ? uint64_t{c.n_experts} * c.dim : 0, p + "router", source);
  CheckVector(l.shared_gate, moe && c.shared_expert_ffn_dim && c.shared_expert_gated ? c.dim : 0,
              p + "shared expert gate", source);
  CheckVector(l.router_bias, moe && c.router_bias ? c.n_experts : 0, p + "router bias", source);
  CheckVector(l.router_logit_bias, moe && c.router_logit_bias ? c.n_experts : 0, p + "router logit bias", source);
  CheckVector(l.attn_sinks, c.attention_sinks ? c.n_heads : 0, p + "attention sinks", source);
  if (l.ungated_shared_expert != (moe && c.shared_expert_ffn_dim && !c.shared_expert_gated))
    Fail("{}: {}{} an ungated shared expert, the config says otherwise", source, p,
         l.ungated_shared_expert ? "has" : "lacks");
  CheckVector(l.q_a_norm, c.mla() ? c.q_lora_rank : 0, p + "q_a_norm", source);
  CheckVector(l.kv_a_norm, c.mla() ? c.kv_lora_rank : 0, p + "kv_a_norm", source);
  if (l.experts.size() != (moe ? c.n_experts : 0))
    Fail("{}: {}has {} experts, expected {}", source, p, l.experts.size(), moe ? c.n_experts : 0);
  const std::vector<LinearShape> shapes = BlockLinearShapes(c, index);
  const std::vector<ConstBlockLinear> linears = BlockLinears(l);
  if (linears.size() != shapes.size())  // the shared expert's slots without its gate, or the reverse
    Fail("{}: {}has {} linears, expected {}", source, p, linears.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i)
    CheckLinear(*linears[i].linear, shapes[i].rows, shapes[i].cols, shapes[i].bias, p + shapes[i].name, source);
}

namespace {

template <class Out, class Layer>
std::vector<Out> LinearsOf(Layer& l) {
  std::vector<Out> out;
  if (l.kv_a_norm.empty()) {
    out = {{"self_attn.q_proj", &l.wq}, {"self_attn.k_proj", &l.wk}, {"self_attn.v_proj", &l.wv}};
  } else if (l.q_a_norm.empty()) {
    out = {{"self_attn.q_proj", &l.wq}, {"self_attn.kv_a_proj_with_mqa", &l.wkv_a}, {"self_attn.kv_b_proj", &l.wkv_b}};
  } else {
    out = {{"self_attn.q_a_proj", &l.wq_a}, {"self_attn.q_b_proj", &l.wq},
           {"self_attn.kv_a_proj_with_mqa", &l.wkv_a}, {"self_attn.kv_b_proj", &l.wkv_b}};
  }
  out.push_back({"self_attn.o_proj", &l.wo});
  if (l.experts.empty() || l.shared_expert()) {
    const std::string p = l.experts.empty() ? "mlp." : l.ungated_shared_expert ? "mlp.shared_experts." : "mlp.shared_expert.";
    out.insert(out.end(), {{p + "gate_proj", &l.w_gate}, {p + "up_proj", &l.w_up}, {p + "down_proj", &l.w_down}});
  }
  for (size_t e = 0; e < l.experts.size(); ++e) {
    const std::string p = fmt::format("mlp.experts.{}.", e);
    out.insert(out.end(), {{p + "gate_proj", &l.experts[e].gate}, {p + "up_proj", &l.experts[e].up},
                           {p + "down_proj", &l.experts[e].down}});
  }
  return out;
}

}  // namespace

std::vector<BlockLinear> BlockLinears(LayerWeights& layer) { return LinearsOf<BlockLinear>(layer); }
std::vector<ConstBlockLinear> BlockLinears(const LayerWeights& layer) { return LinearsOf<ConstBlockLinear>(layer); }

std::vector<LinearShape> BlockLinearShapes(const ModelConfig& c, size_t layer) {
  std::vector<LinearShape> out;
  if (!c.mla()) {
    out = {{"self_attn.q_proj", c.q_dim(), c.dim, c.qkv_bias},
           {"self_attn.k_proj", c.kv_dim(), c.dim, c.qkv_bias},
           {"self_attn.v_proj", c.kv_dim(), c.dim, c.qkv_bias}};
  } else {
    const uint64_t q_rows = uint64_t{c.n_heads} * c.qk_head_dim();
    if (c.q_lora_rank == 0) {
      out = {{"self_attn.q_proj", q_rows, c.dim, false}};
    } else {
      out = {{"self_attn.q_a_proj", c.q_lora_rank, c.dim, false}, {"self_attn.q_b_proj", q_rows, c.q_lora_rank, false}};
    }
    out.push_back({"self_attn.kv_a_proj_with_mqa", c.head_dim, c.dim, false});  // the latent and the rotary key
    out.push_back({"self_attn.kv_b_proj", uint64_t{c.n_heads} * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank, false});
  }
  out.push_back({"self_attn.o_proj", c.dim, c.attn_out_dim(), c.o_bias});
  const auto mlp = [&](const std::string& p, uint64_t ffn, bool bias) {
    out.insert(out.end(), {{p + "gate_proj", ffn, c.dim, bias}, {p + "up_proj", ffn, c.dim, bias},
                           {p + "down_proj", c.dim, ffn, bias}});
  };
  if (!c.moe(layer)) {
    mlp("mlp.", c.ffn_dim, false);
    return out;
  }
  if (c.shared_expert_ffn_dim > 0)
    mlp(c.shared_expert_gated ? "mlp.shared_expert." : "mlp.shared_experts.", c.shared_expert_ffn_dim, false);
  for (uint32_t e = 0; e < c.n_experts; ++e) mlp(fmt::format("mlp.experts.{}.", e), c.expert_ffn_dim, c.expert_bias);
  return out;
}

LayerWeights EmptyLayer(const ModelConfig& c, size_t layer) {
  LayerWeights l;
  if (c.mla()) {
    l.q_a_norm.resize(c.q_lora_rank);
    l.kv_a_norm.resize(c.kv_lora_rank);
  }
  if (c.moe(layer)) {
    l.experts.resize(c.n_experts);
    l.router.resize(uint64_t{c.n_experts} * c.dim);
    if (c.shared_expert_ffn_dim > 0 && c.shared_expert_gated) l.shared_gate.resize(c.dim);
    l.ungated_shared_expert = c.shared_expert_ffn_dim > 0 && !c.shared_expert_gated;
    if (c.router_bias) l.router_bias.resize(c.n_experts);
    if (c.router_logit_bias) l.router_logit_bias.resize(c.n_experts);
  }
  if (c.attention_sinks) l.attn_sinks.resize(c.n_heads);
  return l;
}

void ValidateEnds(const ModelConfig& c, const ModelWeights& w, const std::string& source) {
  if (w.embed.packed && (w.embed.packed->rows() != c.vocab_size || w.embed.packed->cols() != c.dim))
    Fail("{}: tensor 'embedding' has shape [{} x {}], expected [{} x {}]", source, w.embed.packed->rows(),
         w.embed.packed->cols(), c.vocab_size, c.dim);
  if (!w.embed.packed) CheckVector(w.embed.values, uint64_t{c.vocab_size} * c.dim, "embedding", source);
  if (w.layers.size() != c.n_layers) Fail("{}: {} layers loaded, config says {}", source, w.layers.size(), c.n_layers);
  CheckVector(w.final_norm, c.dim, "final norm", source);
  CheckLinear(w.lm_head, c.vocab_size, c.dim, false, "lm_head", source);
}

void ValidateWeights(const ModelConfig& c, const ModelWeights& w, const std::string& source) {
  ValidateEnds(c, w, source);
  for (uint32_t i = 0; i < c.n_layers; ++i) ValidateLayer(c, w.layers[i], i, source);
}

}  // namespace lowbit
