#include "model/quantize_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "quant/registry.h"

namespace lowbit {

std::string FusedMatrixOf(std::string_view name) {
  // (Mixtral's checkpoint names its experts' gate and up w1 and w3; vLLM fuses them into w13.)
  for (const auto& [shard, fused] : {std::pair{"q_proj", "qkv_proj"}, {"k_proj", "qkv_proj"}, {"v_proj", "qkv_proj"},
                                     {"gate_proj", "gate_up_proj"}, {"up_proj", "gate_up_proj"}, {"w1", "w13"},
                                     {"w3", "w13"}}) {
    const std::string_view s(shard);
    if (name.ends_with(s) && (name.size() == s.size() || name[name.size() - s.size() - 1] == '.'))
      return std::string(name.substr(0, name.size() - s.size())) + fused;
  }
  return std::string(name);
}

std::unordered_map<const Linear*, float> FusedAbsMax(std::span<const BlockLinear> linears) {
  std::map<std::string, std::vector<const Linear*>> shards;  // by fused matrix
  for (const BlockLinear& bl : linears)
    if (std::holds_alternative<DenseMatrix>(bl.linear->weight)) shards[FusedMatrixOf(bl.name)].push_back(bl.linear);
  std::unordered_map<const Linear*, float> out;
  for (const auto& [fused, members] : shards) {
    if (members.size() < 2) continue;
    float amax = 0;
    for (const Linear* l : members)
      for (const float v : std::get<DenseMatrix>(l->weight).values) amax = std::max(amax, std::fabs(v));
    for (const Linear* l : members) out[l] = amax;
  }
  return out;
}

namespace {

bool QuantizeLinear(const QuantMethod& quantizer, const QuantScheme& scheme, Linear& linear, const std::string& name,
                    float tensor_amax) {
  WidenPlainFloat(linear);
  const auto* dense = std::get_if<DenseMatrix>(&linear.weight);
  if (!dense) return false;  // already quantized
  WeightToQuantize w{name, dense->values, dense->rows(), dense->cols()};
  w.tensor_amax = tensor_amax;
  linear.weight = quantizer.Quantize(w, scheme);
  return true;
}

uint64_t QuantizeBlock(const QuantMethod& quantizer, const QuantScheme& scheme, LayerWeights& lw, size_t l) {
  uint64_t count = 0;
  const std::vector<BlockLinear> linears = BlockLinears(lw);
  for (const BlockLinear& bl : linears) WidenPlainFloat(*bl.linear);
  const std::unordered_map<const Linear*, float> fused =
      scheme.tensor_scale ? FusedAbsMax(linears) : std::unordered_map<const Linear*, float>{};
  for (const BlockLinear& bl : linears) {
    const auto it = fused.find(bl.linear);
    count += QuantizeLinear(quantizer, scheme, *bl.linear, fmt::format("model.layers.{}.{}", l, bl.name),
                            it == fused.end() ? 0.0f : it->second);
  }
  return count;
}

}  // namespace

uint64_t QuantizeLinears(ModelWeights& weights, const QuantScheme& scheme, std::string_view method,
                         bool include_lm_head) {
  const auto quantizer = BuiltinMethods().Create(method, nullptr, scheme);
  uint64_t count = 0;
  for (size_t l = 0; l < weights.layers.size(); ++l) count += QuantizeBlock(*quantizer, scheme, weights.layers[l], l);
  if (include_lm_head) count += QuantizeLinear(*quantizer, scheme, weights.lm_head, "lm_head", 0);
  return count;
}

uint64_t QuantizeBlockLinears(LayerWeights& block, size_t index, const QuantScheme& scheme, std::string_view method) {
  const auto quantizer = BuiltinMethods().Create(method, nullptr, scheme);
  return QuantizeBlock(*quantizer, scheme, block, index);
}

}  // namespace lowbit
