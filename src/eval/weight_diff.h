// How far one model's weights are from another's, matrix by matrix: what `lowbit convert` measures
// after reading its own output back, so "exact" is a measured zero, not a promise.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/model_loader.h"

namespace lowbit {

struct MatrixDiff {
  std::string name;          // Hugging Face name: "model.layers.0.self_attn.q_proj", "lm_head", "model.embed_tokens"
  std::string from, to;      // each side's storage: a scheme ("int4:g128:asym") or "dense"
  uint64_t elements = 0;
  double max_abs_diff = 0;   // max |w_to - w_from| over the matrix, in input column order
  double rel_rms = 0;        // RMS(w_to - w_from) / RMS(w_from); 0 when both are zero
  bool exact() const { return max_abs_diff == 0; }
};

// Every linear of both models (block linears, lm_head unless tied) and the embedding table,
// dequantized one matrix at a time (act-order columns back in input order), reading the blocks of
// each model as they are needed. Throws Error when the two models' shapes differ.
std::vector<MatrixDiff> DiffWeights(StreamedModel& from, StreamedModel& to,
                                    const std::function<void(size_t done, size_t total)>& progress = nullptr);

}  // namespace lowbit
