#include "io/gguf_calibrate.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/gguf_gptq.h"
#include "kernels/activation.h"
#include "kernels/matmul.h"
#include "model/calibration.h"

namespace lowbit {

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

std::vector<std::vector<std::byte>> GgufLayerCalibrator::QuantizeLayer(size_t l, const std::vector<uint32_t>& types) {
  LOWBIT_CHECK(l == next_layer_);
  const ModelConfig& c = model_.config;
  LayerWeights& lw = model_.weights.layers[l];
  const std::vector<BlockLinear> linears = BlockLinears(lw);
  LOWBIT_CHECK(types.size() == linears.size());
  // The Hessians of the block's inputs, on a copy of each window's hidden state (the block still has
  // its full-precision weights here): q/k/v share one, o has one; a dense MLP's gate/up share one and
  // down has one; in a sparse layer every expert (and the shared expert) has an input and a hidden
  // Hessian, over the rows routed to it. input_of[i]: the Hessian of linear i.
  std::vector<HessianAccumulator> hessians;
  hessians.emplace_back(c.dim);
  hessians.emplace_back(c.q_dim());
  std::vector<size_t> input_of = {0, 0, 0, 1};
  for (size_t unit = 0; 4 + 3 * unit < linears.size(); ++unit) {
    const size_t in = hessians.size();
    hessians.emplace_back(c.dim);
    hessians.emplace_back(linears[4 + 3 * unit].linear->rows());
    input_of.insert(input_of.end(), {in, in, in + 1});
  }
  const bool moe = !lw.experts.empty(), shared = lw.shared_expert();
  std::vector<float> input, rows, gate, up;
  const auto add_unit = [&](size_t unit, const float* x, size_t n) {  // unit `unit`'s two Hessians on rows x
    if (n == 0) return;
    const Linear &g = *linears[4 + 3 * unit].linear, &u = *linears[5 + 3 * unit].linear;
    hessians[2 + 2 * unit].Add(x, n, engine_.pool());
    gate.resize(n * g.rows());
    up.resize(n * g.rows());
    MatMul(g, x, n, gate.data(), engine_.pool());
    MatMul(u, x, n, up.data(), engine_.pool());
    if (c.activation == FfnActivation::kGeluTanh) GeluTanhMul(gate.data(), up.data(), gate.size(), gate.data());
    else SiluMul(gate.data(), up.data(), gate.size(), gate.data());
    hessians[3 + 2 * unit].Add(gate.data(), n, engine_.pool());
  };
  for (size_t w = 0; w < windows_.size(); ++w) {
    KvCache cache = engine_.NewCache(windows_[w].size());
    BatchItem item{&cache, windows_[w], false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    std::vector<float> x = hidden_[w];
    const size_t n = windows_[w].size();
    engine_.BeginLayer(l, x, input);
    hessians[0].Add(input.data(), n, engine_.pool());
    engine_.AdvanceLayer(l, LinearInput::kQkv, batch, x, input);
    hessians[1].Add(input.data(), n, engine_.pool());
    engine_.AdvanceLayer(l, LinearInput::kO, batch, x, input);  // input: the MLP's
    if (!moe || shared) add_unit(0, input.data(), n);
    if (!moe) continue;
    const ExpertRoutes routes = RouteTokens(c, lw, input.data(), n);
    for (size_t e = 0; e < lw.experts.size(); ++e) {
      const std::vector<uint32_t>& routed = routes.rows[e];
      rows.resize(routed.size() * c.dim);
      for (size_t r = 0; r < routed.size(); ++r) std::copy_n(&input[routed[r] * c.dim], c.dim, &rows[r * c.dim]);
      add_unit(e + (shared ? 1 : 0), rows.data(), routed.size());
    }
  }
  std::vector<std::vector<std::byte>> bytes(linears.size());
  for (size_t i = 0; i < linears.size(); ++i) {
    Linear& lin = *linears[i].linear;
    const auto* dense = std::get_if<DenseMatrix>(&lin.weight);
    const std::string name = fmt::format("model.layers.{}.{}", l, linears[i].name);
    if (!dense) Fail("calibrated GGUF: {} is already quantized (calibrate from a full-precision model)", name);
    const HessianAccumulator& h = hessians[input_of[i]];
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
    ApplyFinalNorm(model_, x, normed);
    h.Add(normed.data(), x.size() / c.dim, engine_.pool());
  }
  GgufGptqResult r = QuantizeGgufGptq(type, dense->values, head.rows(), head.cols(), h.sum(), h.tokens(), options_,
                                      "lm_head", &engine_.pool());
  return std::move(r.bytes);
}

}  // namespace lowbit
