// Importance statistics of the linear layers' inputs (what llama.cpp calls an importance
// matrix): per decoder layer and input, the sum over calibration tokens of each input column's
// squared activation. Quantizers weight each column's error by its mean (importance = how much
// that column's weights matter to the output).
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

struct LayerImportance {
  // By LinearInput: the attention linears' inputs (kQkv, or latent attention's kLatentIn, kLatentQ and
  // kLatentKv) and o's (kO); the other entries stay empty.
  std::array<ColumnSquares, kLinearInputCount> attention;
  // Per MLP unit, numbered as BlockLinears lists them (a dense MLP; or the shared expert, then each routed
  // expert over the rows the router sends it, as llama-imatrix counts an expert's rows): its gate/up input
  // and its down input. An expert no token reached has no sums (tokens 0).
  std::vector<ColumnSquares> unit_inputs, unit_hidden;
  // Latent attention: each head's nope query and its attention output in latent space, head after head
  // ([n_heads x qk_nope] and [n_heads x kv_lora_rank] columns, one count): the inputs of GGUF's attn_k_b
  // and attn_v_b, as llama-imatrix collects them. Empty otherwise.
  ColumnSquares latent_query, latent_output;
  // A sparse layer's MLP input over every row: what its router (and a gated shared expert's gate) reads.
  ColumnSquares router_input;
};

// Over the windows, each run as one sequence of the fp32 forward pass.
std::vector<LayerImportance> CollectInputSquares(Engine& engine, const std::vector<std::vector<int32_t>>& windows,
                                                 const std::function<void(size_t done)>& progress = {});

}  // namespace lowbit
