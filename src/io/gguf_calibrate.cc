#include "io/gguf_calibrate.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/gguf_gptq.h"
#include "model/calibration.h"

namespace lowbit {

std::array<Linear*, kLayerLinears> LayerLinears(LayerWeights& l) {
  return {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down};
}

GgufLayerCalibrator::GgufLayerCalibrator(Model& model, std::vector<std::vector<int32_t>> windows, GptqOptions options,
                                         size_t threads)
    : model_(model), engine_(model, threads), windows_(std::move(windows)), options_(options) {
  if (windows_.empty()) Fail("calibrated GGUF: no calibration windows");
  for (const std::vector<int32_t>& w : windows_) {
    KvCache cache = engine_.NewCache(w.size());
    BatchItem item{&cache, w, false, nullptr};
    hidden_.push_back(engine_.Embed(std::span<const BatchItem>(&item, 1)));
  }
}

std::array<std::vector<std::byte>, kLayerLinears> GgufLayerCalibrator::QuantizeLayer(
    size_t l, const std::array<uint32_t, kLayerLinears>& types) {
  LOWBIT_CHECK(l == next_layer_);
  const ModelConfig& c = model_.config;
  // The Hessians of the block's four inputs (q/k/v share one, gate/up another), on a copy of each
  // window's hidden state: the block still has its full-precision weights here.
  std::vector<HessianAccumulator> hessians;
  for (const uint32_t cols : {c.dim, c.q_dim(), c.dim, c.ffn_dim}) hessians.emplace_back(cols);
  std::vector<float> input;
  for (size_t w = 0; w < windows_.size(); ++w) {
    KvCache cache = engine_.NewCache(windows_[w].size());
    BatchItem item{&cache, windows_[w], false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    std::vector<float> x = hidden_[w];
    engine_.BeginLayer(l, x, input);
    const LinearInput groups[] = {LinearInput::kQkv, LinearInput::kO, LinearInput::kGateUp, LinearInput::kDown};
    for (size_t g = 0; g < 4; ++g) {
      hessians[g].Add(input.data(), windows_[w].size(), engine_.pool());
      if (g < 3) engine_.AdvanceLayer(l, groups[g], batch, x, input);
    }
  }
  static constexpr size_t kInputOf[kLayerLinears] = {0, 0, 0, 1, 2, 2, 3};
  static constexpr const char* kNames[kLayerLinears] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  std::array<std::vector<std::byte>, kLayerLinears> bytes;
  std::array<Linear*, kLayerLinears> linears = LayerLinears(model_.weights.layers[l]);
  for (size_t i = 0; i < kLayerLinears; ++i) {
    Linear& lin = *linears[i];
    const auto* dense = std::get_if<DenseMatrix>(&lin.weight);
    const std::string name = fmt::format("layers.{}.{}", l, kNames[i]);
    if (!dense) Fail("calibrated GGUF: {} is already quantized (calibrate from a full-precision model)", name);
    const HessianAccumulator& h = hessians[kInputOf[i]];
    GgufGptqResult r = QuantizeGgufGptq(types[i], dense->values, lin.rows(), lin.cols(), h.sum(), h.tokens(), options_,
                                        name, &engine_.pool());
    lin.weight = DenseMatrix{lin.rows(), lin.cols(), std::move(r.grid_values)};
    bytes[i] = std::move(r.bytes);
  }
  // The windows advance through the quantized block.
  for (size_t w = 0; w < windows_.size(); ++w) {
    KvCache cache = engine_.NewCache(windows_[w].size());
    BatchItem item{&cache, windows_[w], false, nullptr};
    engine_.ForwardLayer(l, std::span<BatchItem>(&item, 1), hidden_[w]);
  }
  ++next_layer_;
  return bytes;
}

std::vector<std::byte> GgufLayerCalibrator::QuantizeOutput(uint32_t type) {
  const ModelConfig& c = model_.config;
  LOWBIT_CHECK(next_layer_ == c.n_layers);
  Linear& head = model_.weights.lm_head;
  const auto* dense = std::get_if<DenseMatrix>(&head.weight);
  if (!dense) Fail("calibrated GGUF: lm_head is already quantized (calibrate from a full-precision model)");
  HessianAccumulator h(c.dim);
  std::vector<float> normed;
  for (const std::vector<float>& x : hidden_) {
    normed.resize(x.size());
    for (size_t t = 0; t < x.size() / c.dim; ++t)
      RmsNorm(&x[t * c.dim], model_.weights.final_norm.data(), c.dim, c.norm_eps, &normed[t * c.dim]);
    h.Add(normed.data(), x.size() / c.dim, engine_.pool());
  }
  GgufGptqResult r = QuantizeGgufGptq(type, dense->values, head.rows(), head.cols(), h.sum(), h.tokens(), options_,
                                      "lm_head", &engine_.pool());
  return std::move(r.bytes);
}

}  // namespace lowbit
