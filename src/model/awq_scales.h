// AWQ's activation-aware scale search (Lin et al., 2023; AutoAWQ's search_best_scale) for linear
// layers that share one input X: per input channel, s = mean|x|^alpha normalised by
// sqrt(max s * min s); alpha on a grid in [0, 1) is chosen to minimise
//   sum over the linears of | X (W - Q(W diag(s)) diag(s)^-1)^T |^2
// on a sample of calibration tokens. Scaling W's columns by s and the input by 1/s is exact in
// full precision; it lets the channels that see large activations keep more precision.
#pragma once

#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/weights.h"
#include "quant/scheme.h"

namespace lowbit {

struct InputScales {
  std::vector<float> scales;  // [cols]
  double alpha = 0;
  double loss = 0, loss_unscaled = 0;
};

// One linear of the group and the sample of input rows it sees, [n_tokens x cols] (every linear of a
// dense group sees the same rows; an expert only the rows routed to it).
struct ScaleSearchTerm {
  const DenseMatrix* weight;
  std::span<const float> x;
};

// mean_abs is mean |x| per column over all calibration tokens of the shared input.
InputScales SearchInputScales(std::span<const ScaleSearchTerm> terms, std::span<const float> mean_abs,
                              const QuantScheme& scheme, size_t grid, ThreadPool& pool);

// Folds per-input-channel scales s into a layer, exactly in full precision: the group's weight
// columns are multiplied by s and the op producing their input is divided by s (the RMSNorm
// weight for q/k/v and gate/up; up's rows for down; v's rows for o, which needs as many KV heads
// as query heads). The group's weights must be dense. In a sparse layer gate/up is every expert's
// and the shared expert's, and the router and the shared expert's gate read the same input, so
// their columns are multiplied too (routing is unchanged); down is the shared expert's. Latent attention's
// groups fold into the input norm (q_a or q, kv_a), q_a's norm (q_b) and the KV latent's norm (kv_b).
void FoldInputScales(const ModelConfig& config, LayerWeights& layer, LinearInput group, std::span<const float> s);
// down's input scales folded into the up projection that produces it: up's rows / s, down's columns * s.
void FoldDownScales(Linear& up, Linear& down, std::span<const float> s);

}  // namespace lowbit
