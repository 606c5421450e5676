// AWQ's weight-clipping step (Lin et al., 2023; AutoAWQ's auto_clip), after the activation-aware
// scales have been folded in (model/awq_scales.h): for each row and group, try clipping the
// weights to amax * (1 - k / grid) for k = 0 .. grid * max_shrink, keep the threshold whose
// quantized weights give the smallest output error on calibration inputs, then quantize.
//
// The output error of a group is d^T H_gg d with d = w - Q(clip(w)) and H_gg the group's block of
// H = sum x x^T over calibration tokens: every calibration token counts, at g^2 cost per try.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "quant/quantized_tensor.h"

namespace lowbit {

struct AwqOptions {
  size_t grid = 20;
  double max_shrink = 0.5;
  bool clip = true;
  size_t scale_grid = 20;  // alpha grid of the scale search (used by the pipeline)
};

// `hessian` [cols x cols]. Per-row granularities (channel, group) are searched; tensor and 2-D
// block scales are quantized as they are.
QuantizedTensor QuantizeAwqClip(std::span<const float> w, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                                const std::vector<double>& hessian, const AwqOptions& options,
                                std::string_view tensor_name = "tensor", float tensor_amax = 0);

}  // namespace lowbit
