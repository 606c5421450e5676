#include "model/quantize_weights.h"

#include <fmt/format.h>

#include "quant/registry.h"

namespace lowbit {

uint64_t QuantizeLinears(ModelWeights& weights, const QuantScheme& scheme, std::string_view method) {
  const auto quantizer = BuiltinMethods().Create(method, nullptr, scheme);
  uint64_t count = 0;
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    LayerWeights& lw = weights.layers[l];
    const std::pair<Linear*, const char*> linears[] = {{&lw.wq, "q_proj"},    {&lw.wk, "k_proj"}, {&lw.wv, "v_proj"},
                                                       {&lw.wo, "o_proj"},    {&lw.w_gate, "gate_proj"},
                                                       {&lw.w_up, "up_proj"}, {&lw.w_down, "down_proj"}};
    for (const auto& [linear, name] : linears) {
      const auto* dense = std::get_if<DenseMatrix>(&linear->weight);
      if (!dense) continue;  // already quantized
      const std::string full = fmt::format("layers.{}.{}", l, name);
      QuantizedTensor q = quantizer->Quantize({full, dense->values, dense->rows(), dense->cols()}, scheme);
      linear->weight = std::move(q);
      ++count;
    }
  }
  return count;
}

}  // namespace lowbit
