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
// original column order ("static_groups"), so g_idx stays column / group_size. Act-order with
// groups in processing order (desc_act without static groups) is the GPTQ method's input order
// (QuantMethod::InputOrder): the pipeline hands RunGptq the columns already sorted.
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

// The grid GPTQ rounds onto, column by column: lowbit's schemes (QuantizeGptq), or another
// format's (ggml's K-quant super-blocks, io/gguf_gptq.h). Rows are independent; a grid keeps
// per-row state, and calls for different row blocks come from different threads.
class GptqGrid {
 public:
  virtual ~GptqGrid() = default;
  // Once, with the weights GPTQ starts from (dead columns zeroed): scales fixed up front.
  virtual void Begin(std::span<const float> w) { (void)w; }
  // Columns per group whose scales are chosen when GPTQ reaches the group's first column
  // (0: none; ignored under act-order, whose groups are the static ones chosen in Begin).
  virtual uint64_t group_cols() const = 0;
  // Rows sharing scales, which one thread must run together (1 unless scales span rows).
  virtual uint64_t row_block() const { return 1; }
  // Row r's group starting at column c, from the row's current (error-updated) values.
  virtual void ChooseGroup(uint64_t r, uint64_t c, std::span<const float> values) = 0;
  // Rounds x (row r, column c) onto the grid, remembers the code, returns the grid value.
  virtual float Round(uint64_t r, uint64_t c, float x) = 0;
  // Every column of rows [r_begin, r_end) has been rounded.
  virtual void FinishRows(uint64_t r_begin, uint64_t r_end) { (void)r_begin, (void)r_end; }
};

// GPTQ's error feedback onto `grid`. `w` row-major [rows x cols]; `hessian` [cols x cols]
// row-major (any positive scale). With a pool, the inverse and the rows run on it (the result is
// the same bit for bit).
void RunGptq(std::span<const float> w, uint64_t rows, uint64_t cols, const std::vector<double>& hessian,
             const GptqOptions& options, GptqGrid& grid, std::string_view tensor_name = "tensor",
             ThreadPool* pool = nullptr);

// GPTQ onto a lowbit scheme.
QuantizedTensor QuantizeGptq(std::span<const float> w, uint64_t rows, uint64_t cols, const QuantScheme& scheme,
                             const std::vector<double>& hessian, const GptqOptions& options,
                             std::string_view tensor_name = "tensor", ThreadPool* pool = nullptr,
                             float tensor_amax = 0);

}  // namespace lowbit
