// GPT-OSS's and Llama 4's experts as their checkpoints store them: one stack per layer, not one linear per expert.
//
//   mlp.experts.gate_up_proj       [E, dim, 2 ffn]  applied as x W (inputs along dim); output column 2j is
//                                                    gate row j, column 2j + 1 up row j (Llama 4, under
//                                                    feed_forward.experts.: column j gate's, ffn + j up's)
//   mlp.experts.gate_up_proj_bias  [E, 2 ffn]       interleaved the same way
//   mlp.experts.down_proj          [E, ffn, dim]    x W
//
// (Qwen3-VL-MoE as transformers 5 saves it: both as Linear weights, [E, 2 ffn, dim] gate first and [E, dim, ffn].)
//   mlp.experts.down_proj_bias     [E, dim]         (the biases GPT-OSS's alone)
//
// or, as openai/gpt-oss checkpoints ship them (quantization_config.quant_method "mxfp4"), the two
// matrices as MXFP4 blocks, row-major over outputs (each row a lowbit mxfp4 row byte for byte: E2M1
// codes, element 2k in the low nibble, one E8M0 scale per 32 inputs):
//
//   mlp.experts.gate_up_proj_blocks U8 [E, 2 ffn, dim / 32, 16]   gate_up_proj_scales U8 [E, 2 ffn, dim / 32]
//   mlp.experts.down_proj_blocks    U8 [E, dim, ffn / 32, 16]     down_proj_scales    U8 [E, dim, ffn / 32]
//
// Reading splits them into Expert linears [ffn x dim] / [dim x ffn] with their biases: dense stacks widened
// to fp32, MXFP4 rows kept as they are (an expert's gate rows are the stack's even rows).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

namespace lowbit {

// How a block stores its stacks: as MXFP4 blocks, and (dense) as Linear weights [E, outputs, inputs] rather than
// x W's [E, inputs, outputs].
struct StackedLayout {
  bool mxfp4 = false;
  bool outputs_first = false;
};
// Whether block `prefix` ("model.layers.N.") of `st` stores its experts stacked (a lowbit folder stores one linear
// each), and its layout.
bool HasStackedExpertTensors(const SafetensorsModel& st, const ModelConfig& c, const std::string& prefix);
StackedLayout StackedExpertsLayout(const SafetensorsModel& st, const ModelConfig& c, const std::string& prefix);

// The tensors (names under `prefix`) and shapes a block of config `c` stores in `layout`.
std::map<std::string, std::vector<uint64_t>> StackedExpertShapes(const ModelConfig& c, const std::string& prefix,
                                                                  StackedLayout layout);

// The experts of block `prefix`. `vector(name, n)` reads a dense tensor of n values as fp32 (checking its
// count and values); MXFP4 bytes come from `st`, their scales checked (no NaN byte).
std::vector<Expert> ReadStackedExperts(const SafetensorsModel& st, const std::string& prefix, const ModelConfig& c,
                                       const std::function<std::vector<float>(const std::string&, uint64_t)>& vector);

}  // namespace lowbit
