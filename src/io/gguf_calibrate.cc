#include "io/gguf_calibrate.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/gguf_gptq.h"
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
  // its full-precision weights here): one per attention input (q/k/v share one; latent attention's q_a or q
  // and kv_a share one, q_b and kv_b have their own), o's, and for each MLP unit (a dense MLP, or a shared
  // expert and each routed expert, over the rows routed to it) its input's and its hidden state's.
  // input_of[i]: the Hessian of linear i.
  const std::vector<LinearInput> stages = AttentionInputs(c);
  std::vector<size_t> input_of;
  if (!c.mla()) {
    input_of = {0, 0, 0};
  } else if (c.q_lora_rank == 0) {  // q, kv_a | kv_b
    input_of = {0, 0, 1};
  } else {  // q_a, q_b, kv_a, kv_b
    input_of = {0, 1, 0, 2};
  }
  const size_t o = input_of.size();
  input_of.push_back(stages.size());
  std::vector<HessianAccumulator> hessians;
  for (size_t i = 0; i <= o; ++i)
    if (input_of[i] == hessians.size()) hessians.emplace_back(linears[i].linear->cols());
  const size_t first_unit = hessians.size();
  for (size_t unit = 0; o + 1 + 3 * unit < linears.size(); ++unit) {
    const size_t in = hessians.size();
    hessians.emplace_back(c.dim);
    hessians.emplace_back(linears[o + 1 + 3 * unit].linear->rows());
    input_of.insert(input_of.end(), {in, in, in + 1});
  }
  std::vector<float> input;
  for (size_t w = 0; w < windows_.size(); ++w) {
    KvCache cache = engine_.NewCache(windows_[w].size());
    BatchItem item{&cache, windows_[w], false, nullptr};
    std::span<BatchItem> batch(&item, 1);
    std::vector<float> x = hidden_[w];
    const size_t n = windows_[w].size();
    engine_.BeginLayer(l, x, input);
    for (size_t s = 0; s < stages.size(); ++s) {
      hessians[s].Add(input.data(), n, engine_.pool());
      engine_.AdvanceLayer(l, stages[s], batch, x, input);
    }
    hessians[stages.size()].Add(input.data(), n, engine_.pool());
    engine_.AdvanceLayer(l, LinearInput::kO, batch, x, input);  // input: the MLP's
    VisitMlpInputs(c, lw, l, input.data(), n, engine_.pool(),
                   [&](size_t unit, const float* in, const float* hidden, size_t rows) {
                     hessians[first_unit + 2 * unit].Add(in, rows, engine_.pool());
                     hessians[first_unit + 2 * unit + 1].Add(hidden, rows, engine_.pool());
                   });
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
