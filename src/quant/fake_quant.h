// Quantize-then-dequantize of single values under the scale and zero already stored for one
// grid cell of a QuantizedTensor: the value the tensor will hold for x. Used by methods that
// need the rounding error as they go (GPTQ's error feedback, AWQ's clip search). Gives exactly
// what EncodeRow + DequantizeRow produce (tested).
#pragma once

#include <cstdint>

#include "quant/quantized_tensor.h"

namespace lowbit {

class CellFakeQuant {
 public:
  CellFakeQuant(const QuantizedTensor& q, uint64_t cell);
  float operator()(float x) const;

 private:
  const ElementFormat* element_;
  const float* table_;
  float scale_, encode_scale_, pre_ = 0, post_ = 0, bias_ = 0;
  float qmax_ = 0;
};

}  // namespace lowbit
