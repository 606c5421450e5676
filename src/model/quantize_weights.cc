#include "model/quantize_weights.h"

#include <fmt/format.h>

#include "quant/registry.h"

namespace lowbit {

uint64_t QuantizeLinears(ModelWeights& weights, const QuantScheme& scheme, std::string_view method,
                         bool include_lm_head) {
  const auto quantizer = BuiltinMethods().Create(method, nullptr, scheme);
  uint64_t count = 0;
  auto quantize = [&](Linear& linear, const std::string& name) {
    const auto* dense = std::get_if<DenseMatrix>(&linear.weight);
    if (!dense) return;  // already quantized
    linear.weight = quantizer->Quantize({name, dense->values, dense->rows(), dense->cols()}, scheme);
    ++count;
  };
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    LayerWeights& lw = weights.layers[l];
    const std::pair<Linear*, const char*> linears[] = {{&lw.wq, "q_proj"},    {&lw.wk, "k_proj"}, {&lw.wv, "v_proj"},
                                                       {&lw.wo, "o_proj"},    {&lw.w_gate, "gate_proj"},
                                                       {&lw.w_up, "up_proj"}, {&lw.w_down, "down_proj"}};
    for (const auto& [linear, name] : linears) quantize(*linear, fmt::format("layers.{}.{}", l, name));
  }
  if (include_lm_head) quantize(weights.lm_head, "lm_head");
  return count;
}

}  // namespace lowbit
