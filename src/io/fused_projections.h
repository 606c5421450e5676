// Fused projections: Phi-3's self_attn.qkv_proj (the q, k and v rows), and Phi-3's and GLM-4's
// mlp.gate_up_proj (gate, then up). lowbit runs them as separate linears: they are split at load and stacked again where a
// checkpoint is written in the model's own layout (engine exports), codes and scales bit for bit.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "io/checkpoint_folder.h"
#include "model/config.h"
#include "model/weights.h"

namespace lowbit {

// One matrix of a checkpoint that holds the rows of several of lowbit's block linears, in order (names
// relative to the block's prefix, as BlockLinearShapes names them).
struct FusedProjection {
  std::string name;
  std::vector<std::string> parts;
};

// The fused projections a checkpoint of config `c` stores in block `layer` (HasFusedQkv, HasFusedGateUp;
// none for a mixture-of-experts layer's MLP).
std::vector<FusedProjection> FusedProjections(const ModelConfig& c, size_t layer);

// Consecutive row ranges of `fused` as separate linears: dense weights, and quantized ones whose cuts
// fall on scale-cell boundaries (quant/row_slices.h); a column order (act-order) and an input
// quantization apply to every part. Error naming `name` in `file` for outlier columns, an online
// Hadamard, or cuts through scale cells.
std::vector<Linear> SplitRows(Linear fused, const std::vector<uint64_t>& rows, const std::string& name,
                              const std::string& file);

// `parts` one under the other, as one linear: all dense, or all quantized in one scheme with one
// column order and one input quantization (what one fused matrix can hold). Error naming `name`.
Linear StackLinears(std::span<const Linear* const> parts, const std::string& name);

// The linears of block `index` as a checkpoint of config `c` names and stores them: HfBlockLinears,
// with each FusedProjection's parts stacked into one linear kept in `stacked` (which must outlive the
// result), in the place of its first part.
std::vector<NamedLinear> StoredBlockLinears(const ModelConfig& c, const LayerWeights& layer, size_t index,
                                            std::deque<Linear>& stacked);

}  // namespace lowbit
