#include "io/fused_projections.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "io/hf_names.h"
#include "quant/row_slices.h"

namespace lowbit {

std::vector<Linear> SplitRows(Linear fused, const std::vector<uint64_t>& rows, const std::string& name,
                              const std::string& file) {
  if (fused.outliers || fused.input_hadamard)
    Fail("{}: '{}' is a fused projection with outlier columns or an online Hadamard, which lowbit cannot split", file,
         name);
  const std::string what = fmt::format("{}: '{}'", file, name);
  std::vector<Linear> out(rows.size());
  uint64_t first = 0;
  const uint64_t cols = fused.cols();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (const auto* d = std::get_if<DenseMatrix>(&fused.weight)) {
      const auto begin = d->values.begin() + static_cast<ptrdiff_t>(first * cols);
      out[i].weight = DenseMatrix{rows[i], cols, std::vector<float>(begin, begin + static_cast<ptrdiff_t>(rows[i] * cols))};
    } else {
      out[i].weight = SliceRows(std::get<QuantizedTensor>(fused.weight), first, rows[i], what);
    }
    if (!fused.bias.empty())
      out[i].bias.assign(fused.bias.begin() + static_cast<ptrdiff_t>(first),
                         fused.bias.begin() + static_cast<ptrdiff_t>(first + rows[i]));
    out[i].input_quant = fused.input_quant;
    out[i].input_order = fused.input_order;
    first += rows[i];
  }
  return out;
}

Linear StackLinears(std::span<const Linear* const> parts, const std::string& name) {
  const Linear& head = *parts.front();
  Linear out;
  std::vector<const QuantizedTensor*> quantized;
  std::vector<float> dense;
  uint64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Linear& p = *parts[i];
    if (p.quantized() != head.quantized())
      Fail("{}: part {} is {}, part 0 {}; a fused matrix is quantized or not as a whole", name, i,
           p.quantized() ? "quantized" : "dense", head.quantized() ? "quantized" : "dense");
    if (p.outliers || p.input_hadamard)
      Fail("{}: part {} has outlier columns or an online Hadamard, which a fused matrix cannot hold", name, i);
    if (p.input_order != head.input_order)
      Fail("{}: part {} has another act-order column order than part 0; a fused matrix has one", name, i);
    if (p.input_quant != head.input_quant)
      Fail("{}: part {} quantizes its input otherwise than part 0; a fused matrix has one input", name, i);
    if (p.bias.empty() != head.bias.empty()) Fail("{}: part {} and part 0 differ in having a bias", name, i);
    if (const auto* q = std::get_if<QuantizedTensor>(&p.weight)) {
      quantized.push_back(q);
    } else {
      const DenseMatrix& d = std::get<DenseMatrix>(p.weight);
      if (d.cols() != head.cols()) Fail("{}: part {} has {} columns, part 0 {}", name, i, d.cols(), head.cols());
      dense.insert(dense.end(), d.values.begin(), d.values.end());
    }
    out.bias.insert(out.bias.end(), p.bias.begin(), p.bias.end());
    rows += p.rows();
  }
  if (head.quantized()) out.weight = StackRows(quantized, name);
  else out.weight = DenseMatrix{rows, head.cols(), std::move(dense)};
  out.input_quant = head.input_quant;
  out.input_order = head.input_order;
  return out;
}

std::vector<FusedProjection> FusedProjections(const ModelConfig& c, size_t layer) {
  std::vector<FusedProjection> out;
  if (HasFusedQkv(c)) out.push_back({"self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}});
  if (HasFusedGateUp(c) && !c.moe(layer)) out.push_back({"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}});
  if (HasFusedSharedGateUp(c) && c.moe(layer) && c.shared_expert_ffn_dim > 0)
    out.push_back({"shared_mlp.input_linear", {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"}});
  if (HasFusedSharedGateUp(c) && !c.moe(layer))
    out.push_back({"shared_mlp.input_linear", {"mlp.gate_proj", "mlp.up_proj"}});
  return out;
}

std::vector<NamedLinear> StoredBlockLinears(const ModelConfig& c, const LayerWeights& l, size_t index,
                                            std::deque<Linear>& stacked) {
  const std::string p = fmt::format("model.layers.{}.", index);
  const std::vector<FusedProjection> fused = FusedProjections(c, index);
  const std::vector<NamedLinear> linears = HfBlockLinears(c, l, index);
  std::map<std::string, const Linear*> by_name;  // relative to the block
  for (const NamedLinear& n : linears) by_name[n.prefix.substr(p.size())] = n.linear;
  std::vector<NamedLinear> out;
  for (const NamedLinear& n : linears) {
    const std::string name = n.prefix.substr(p.size());
    const auto group = std::find_if(fused.begin(), fused.end(), [&](const FusedProjection& f) {
      return std::find(f.parts.begin(), f.parts.end(), name) != f.parts.end();
    });
    if (group == fused.end()) {
      out.push_back(n);
    } else if (group->parts.front() == name) {
      std::vector<const Linear*> parts;
      for (const std::string& part : group->parts) parts.push_back(by_name.at(part));
      stacked.push_back(StackLinears(parts, p + group->name));
      out.push_back({p + group->name, &stacked.back()});
    }
  }
  return out;
}

}  // namespace lowbit
