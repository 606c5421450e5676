// Importance statistics of the linear layers' inputs (what llama.cpp calls an importance
// matrix): per decoder layer and input group, the sum over calibration tokens of each input
// column's squared activation. Quantizers weight each column's error by its mean (importance =
// how much that column's weights matter to the output).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/forward.h"

namespace lowbit {

struct ColumnSquares {
  std::vector<double> sum;  // per input column
  uint64_t tokens = 0;
};

// [layer][LinearInput] over the windows, each run as one sequence of the fp32 forward pass.
using LayerImportance = std::array<ColumnSquares, 4>;
std::vector<LayerImportance> CollectInputSquares(Engine& engine, const std::vector<std::vector<int32_t>>& windows,
                                                 const std::function<void(size_t done)>& progress = {});

}  // namespace lowbit
