// Whole-model post-training quantization, layer by layer: block i is calibrated on the outputs of
// the already-quantized blocks 0..i-1, and inside a block the linears are quantized in execution
// order (q/k/v, then o, then gate/up, then down), each on inputs that already see the quantized
// linears before it ("true sequential", as GPTQ does). Only one block's activations are in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/weights.h"
#include "quant/scheme.h"

namespace lowbit {

struct QuantizeRequest {
  std::string method = "rtn";
  nlohmann::json method_config = nlohmann::json::object();
  QuantScheme scheme;
  // Activation quantization of every quantized linear's input (W8A8 etc.): per-token schemes are
  // dynamic, per-tensor ones get a static scale calibrated on the calibration inputs.
  std::optional<QuantScheme> act_scheme;
  std::vector<std::vector<int32_t>> calibration;  // token windows; needed by Hessian methods
  size_t threads = 0;
  size_t calibration_batch = 16;  // windows per forward call
  std::function<void(size_t layer, const std::string& tensor)> progress;
};

struct TensorReport {
  std::string name, scheme;
  double seconds = 0;
  double weight_mse = 0;
  double output_mse = 0;  // mean over calibration tokens of |(W - Q) x|^2 / rows (0 without calibration)
};

struct QuantizeReport {
  std::vector<TensorReport> tensors;
  std::vector<std::pair<std::string, double>> awq_alphas;  // chosen alpha per scaled input (AWQ)
  size_t smoothed_inputs = 0;                                // inputs SmoothQuant rescaled
  std::vector<double> layer_seconds;
  double calibration_seconds = 0, total_seconds = 0;
};

QuantizeReport QuantizeModel(Model& model, const QuantizeRequest& request);

}  // namespace lowbit
