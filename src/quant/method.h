// A quantization method (RTN now; GPTQ, AWQ, SmoothQuant later) as the registry sees it: a
// name, the formats and granularities it accepts, a validated JSON config, and the operation.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// What a method is handed for one weight. Calibration statistics (Hessians, activation scales)
// are added here by the methods that need them.
struct WeightToQuantize {
  std::string_view name;
  std::span<const float> values;  // row-major [rows x cols]
  uint64_t rows = 0, cols = 0;
  const std::vector<double>* hessian = nullptr;  // [cols x cols] sum of x x^T over calibration inputs
  ThreadPool* pool = nullptr;                    // for methods that can split their work
  // > 0: the tensor scale (NVFP4) comes from this max |w| of the matrix an engine fuses this weight
  // into (q/k/v, gate/up: model/quantize_weights.h), not from the weight's own.
  float tensor_amax = 0;
};

class QuantMethod {
 public:
  virtual ~QuantMethod() = default;
  virtual QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const = 0;
  // Whether Quantize needs WeightToQuantize::hessian (the pipeline then runs calibration).
  virtual bool needs_hessian() const { return false; }
  // Activation-aware input scaling (AWQ): the pipeline searches per-input-channel scales for
  // each group of linears, folds them into the preceding norm or linear, and hands the scaled
  // weights to Quantize. 0 = no scaling; otherwise the number of alpha grid points.
  virtual size_t activation_scale_grid() const { return 0; }
  // SmoothQuant's migration strength: the pipeline folds s_j = max|x_j|^a / max|w_j|^(1-a) into
  // each group's input before quantizing. Negative = no smoothing.
  virtual double smoothing_alpha() const { return -1; }
  // LLM.int8()'s mixed decomposition: input columns whose calibration max |x| exceeds this stay
  // in full precision (the pipeline splits them off before Quantize sees the weight, whose
  // columns there are then zero). Negative = no split.
  virtual double outlier_threshold() const { return -1; }
  // The column order the method stores its result in (quant/column_order.h; GPTQ's act-order with
  // groups in processing order): the pipeline hands Quantize the weight and the Hessian with their
  // columns in this order, and the linear gathers its input into it. Empty = input order.
  virtual std::vector<uint32_t> InputOrder(const WeightToQuantize& w, const QuantScheme& scheme) const {
    (void)w, (void)scheme;
    return {};
  }
};

struct MethodInfo {
  std::string name;
  std::string description;
  std::vector<ElementKind> elements;            // element kinds it can produce
  std::vector<GranularityKind> granularities;   // granularities it can produce
  std::vector<std::string> config_keys;         // the JSON keys its config accepts
};

}  // namespace lowbit
