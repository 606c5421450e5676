#include "model/quantize_weights.h"

#include <fmt/format.h>

#include "quant/registry.h"

namespace lowbit {

namespace {

bool QuantizeLinear(const QuantMethod& quantizer, const QuantScheme& scheme, Linear& linear, const std::string& name) {
  WidenPlainFloat(linear);
  const auto* dense = std::get_if<DenseMatrix>(&linear.weight);
  if (!dense) return false;  // already quantized
  linear.weight = quantizer.Quantize({name, dense->values, dense->rows(), dense->cols()}, scheme);
  return true;
}

uint64_t QuantizeBlock(const QuantMethod& quantizer, const QuantScheme& scheme, LayerWeights& lw, size_t l) {
  uint64_t count = 0;
  for (const BlockLinear& bl : BlockLinears(lw))
    count += QuantizeLinear(quantizer, scheme, *bl.linear, fmt::format("model.layers.{}.{}", l, bl.name));
  return count;
}

}  // namespace

uint64_t QuantizeLinears(ModelWeights& weights, const QuantScheme& scheme, std::string_view method,
                         bool include_lm_head) {
  const auto quantizer = BuiltinMethods().Create(method, nullptr, scheme);
  uint64_t count = 0;
  for (size_t l = 0; l < weights.layers.size(); ++l) count += QuantizeBlock(*quantizer, scheme, weights.layers[l], l);
  if (include_lm_head) count += QuantizeLinear(*quantizer, scheme, weights.lm_head, "lm_head");
  return count;
}

uint64_t QuantizeBlockLinears(LayerWeights& block, size_t index, const QuantScheme& scheme, std::string_view method) {
  const auto quantizer = BuiltinMethods().Create(method, nullptr, scheme);
  return QuantizeBlock(*quantizer, scheme, block, index);
}

}  // namespace lowbit
