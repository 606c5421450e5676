// The input transforms a Linear may carry ahead of its matmul, kept apart from the matmul kernel:
// the online Hadamard rotation (QuaRot), LLM.int8()'s outlier-column split and act-order's column
// gather.
#pragma once

#include <cstddef>
#include <vector>

#include "model/weights.h"

namespace lowbit {

// Returns the input the (quantized) matmul should see: x itself when the linear has no transform,
// else a copy in `buffer` rotated by the online Hadamard and/or with the outlier columns zeroed,
// then gathered into the weight's input order. The outlier columns' values (after rotation) go to
// `outlier_x` [n_tokens x k].
const float* PrepareLinearInput(const Linear& w, const float* x, size_t n_tokens, std::vector<float>& buffer,
                                std::vector<float>& outlier_x);

// y [n_tokens x rows] += outlier_x [n_tokens x k] * outliers.weight^T.
void AddOutlierProducts(const OutlierColumns& outliers, const std::vector<float>& outlier_x, size_t n_tokens,
                        float* y);

}  // namespace lowbit
