// GPTQ (Frantar et al., 2022): quantize a weight column by column, each time spreading the
// rounding error over the columns not yet quantized, weighted by the inverse Hessian of the
// layer's reconstruction loss, H = 2 X X^T over calibration inputs X.
//
//   dead columns (H_ii = 0) are zeroed; H += damp * mean(diag H) * I;
//   U = upper Cholesky factor of H^-1;  for column i:  q = Q(w_i);  e = (w_i - q) / U_ii;
//   w_j -= e U_ij for the rest of the 128-column block, and lazily for later blocks.
//
// Scales: with groups, a group's scales are chosen from the (already updated) weights when its
// first column is reached, as the reference does; per-tensor/channel/block scales are chosen up
// front. act_order processes columns by descending H_ii; its groups are the static groups of the
// original column order ("static_groups"), so g_idx stays column / group_size.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

struct GptqOptions {
  double damp = 0.01;
  size_t block_size = 128;
  bool act_order = false;
};

// `w` row-major [rows x cols]; `hessian` [cols x cols] row-major (any positive scale). With a
// pool, the inverse and the rows run on it (the result is the same bit for bit).
QuantizedTensor QuantizeGptq(std::span<const float> w, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                             const std::vector<double>& hessian, const GptqOptions& options,
                             std::string_view tensor_name = "tensor", ThreadPool* pool = nullptr);

}  // namespace lowbit
