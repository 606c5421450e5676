#include "io/stacked_experts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/hf_names.h"
#include "quant/scheme.h"

namespace lowbit {
namespace {

constexpr uint64_t kMxGroup = 32;  // MXFP4: inputs per E8M0 scale; 16 bytes of codes

// GPT-OSS interleaves gate and up along the stack's outputs; Llama 4, Granite MoE and Qwen3-VL-MoE put gate's first.
bool Interleaved(const ModelConfig& c) { return c.architecture == "GptOssForCausalLM"; }

// The two stacks' names under HfExpertsPrefix: Granite MoE's (JetMoE's parallel experts) or the others'.
std::string GateUpName(const ModelConfig& c) { return IsGraniteMoe(c) ? "input_linear.weight" : "gate_up_proj"; }
std::string DownName(const ModelConfig& c) { return IsGraniteMoe(c) ? "output_linear.weight" : "down_proj"; }

// The shard holding tensor `name`, for messages.
std::string ShardOf(const SafetensorsModel& st, const std::string& name) {
  for (const SafetensorsFile& f : st.shards())
    if (f.Find(name)) return f.path().string();
  return st.path().string();
}

// Rows `from`, `from + step`, ... (`rows` of them) of expert e's MXFP4 stack `name` [E, stack_rows, cols / 32, 16].
QuantizedTensor Mxfp4Rows(const SafetensorsModel& st, const std::string& name, uint64_t experts, uint64_t e,
                          uint64_t stack_rows, uint64_t from, uint64_t step, uint64_t rows, uint64_t cols) {
  const uint64_t groups = cols / kMxGroup, row_bytes = groups * 16;
  const std::string what = fmt::format("GPT-OSS's MXFP4 experts, {} x {} each", stack_rows, cols);
  const std::span<const std::byte> codes =
      ExpectTensor(st, name + "_blocks", DType::kU8, {experts, stack_rows, groups, 16}, what);
  const std::span<const std::byte> scales = ExpectTensor(st, name + "_scales", DType::kU8, {experts, stack_rows, groups}, what);
  QuantizedTensor q(ParseScheme("mxfp4"), rows, cols);
  LOWBIT_CHECK(q.row_bytes() == row_bytes && q.scale_bytes().size() == rows * groups);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t row = e * stack_rows + from + r * step;
    std::memcpy(&q.codes()[r * row_bytes], &codes[row * row_bytes], row_bytes);
    for (uint64_t g = 0; g < groups; ++g) {
      const auto b = static_cast<uint8_t>(scales[row * groups + g]);
      if (b == 0xFF)  // E8M0's NaN
        Fail("{}: tensor '{}_scales' [{}, {}, {}] is byte 0xFF, NaN ({})", ShardOf(st, name + "_scales"), name, e,
             from + r * step, g, what);
      q.scale_bytes()[r * groups + g] = b;
    }
  }
  return q;
}

}  // namespace

bool HasStackedExpertTensors(const SafetensorsModel& st, const ModelConfig& c, const std::string& prefix) {
  const std::string p = prefix + HfExpertsPrefix(c);
  return HasStackedExperts(c) && (st.Find(p + GateUpName(c)) || st.Find(p + "gate_up_proj_blocks"));
}

StackedLayout StackedExpertsLayout(const SafetensorsModel& st, const ModelConfig& c, const std::string& prefix) {
  const std::string p = prefix + HfExpertsPrefix(c);
  // Linear weights: Granite MoE's always; gate_up_proj [E, 2 ffn, dim] (Qwen3-VL-MoE as transformers 5 saves it; the
  // Hub's are x W's).
  const TensorView* t = st.Find(p + GateUpName(c));
  const uint64_t dim = c.dim, outputs = 2 * uint64_t{c.expert_ffn_dim};
  return {.mxfp4 = st.Find(p + "gate_up_proj_blocks") != nullptr,
          .outputs_first = IsGraniteMoe(c) ||
                           (t && dim != outputs && t->shape == std::vector<uint64_t>{c.n_experts, outputs, dim})};
}

std::map<std::string, std::vector<uint64_t>> StackedExpertShapes(const ModelConfig& c, const std::string& prefix,
                                                                  StackedLayout layout) {
  const uint64_t e = c.n_experts, dim = c.dim, ffn = c.expert_ffn_dim;
  const std::string p = prefix + HfExpertsPrefix(c);
  std::map<std::string, std::vector<uint64_t>> shapes;
  if (c.expert_bias) {
    shapes[p + "gate_up_proj_bias"] = {e, 2 * ffn};
    shapes[p + "down_proj_bias"] = {e, dim};
  }
  if (layout.mxfp4) {
    shapes[p + "gate_up_proj_blocks"] = {e, 2 * ffn, dim / kMxGroup, 16};
    shapes[p + "gate_up_proj_scales"] = {e, 2 * ffn, dim / kMxGroup};
    shapes[p + "down_proj_blocks"] = {e, dim, ffn / kMxGroup, 16};
    shapes[p + "down_proj_scales"] = {e, dim, ffn / kMxGroup};
  } else if (layout.outputs_first) {
    shapes[p + GateUpName(c)] = {e, 2 * ffn, dim};
    shapes[p + DownName(c)] = {e, dim, ffn};
  } else {
    shapes[p + GateUpName(c)] = {e, dim, 2 * ffn};
    shapes[p + DownName(c)] = {e, ffn, dim};
  }
  return shapes;
}

std::vector<Expert> ReadStackedExperts(const SafetensorsModel& st, const std::string& prefix, const ModelConfig& c,
                                       const std::function<std::vector<float>(const std::string&, uint64_t)>& vector) {
  const uint64_t n = c.n_experts, dim = c.dim, ffn = c.expert_ffn_dim;
  const std::string p = prefix + HfExpertsPrefix(c);
  const StackedLayout layout = StackedExpertsLayout(st, c, prefix);
  const bool mxfp4 = layout.mxfp4;
  if (mxfp4 && (dim % kMxGroup != 0 || ffn % kMxGroup != 0))
    Fail("{}: tensor '{}gate_up_proj_blocks': MXFP4 experts need hidden_size ({}) and intermediate_size ({}) in whole "
         "groups of {}", st.path().string(), p, dim, ffn, kMxGroup);
  std::vector<float> gate_up_bias, down_bias, gate_up, down;
  if (c.expert_bias) {
    gate_up_bias = vector(p + "gate_up_proj_bias", n * 2 * ffn);
    down_bias = vector(p + "down_proj_bias", n * dim);
  }
  if (!mxfp4) {
    gate_up = vector(p + GateUpName(c), n * dim * 2 * ffn);
    down = vector(p + DownName(c), n * ffn * dim);
  }
  // Where gate's row j and up's row j are among the stack's 2 ffn outputs, and where output o's input i is.
  const bool interleaved = Interleaved(c), outputs_first = layout.outputs_first;
  const auto at = [outputs_first](uint64_t o, uint64_t i, uint64_t outputs, uint64_t inputs) {
    return outputs_first ? o * inputs + i : i * outputs + o;
  };
  const auto gate_at = [&](uint64_t j) { return interleaved ? 2 * j : j; };
  const auto up_at = [&](uint64_t j) { return interleaved ? 2 * j + 1 : ffn + j; };
  std::vector<Expert> experts(n);
  for (uint64_t e = 0; e < n; ++e) {
    Expert& x = experts[e];
    if (mxfp4) {
      x.gate.weight = Mxfp4Rows(st, p + "gate_up_proj", n, e, 2 * ffn, 0, 2, ffn, dim);
      x.up.weight = Mxfp4Rows(st, p + "gate_up_proj", n, e, 2 * ffn, 1, 2, ffn, dim);
      x.down.weight = Mxfp4Rows(st, p + "down_proj", n, e, dim, 0, 1, dim, ffn);
    } else {
      DenseMatrix gate{ffn, dim, std::vector<float>(ffn * dim)}, up = gate, d{dim, ffn, std::vector<float>(dim * ffn)};
      const float* gu = &gate_up[e * dim * 2 * ffn];
      for (uint64_t i = 0; i < dim; ++i)
        for (uint64_t j = 0; j < ffn; ++j) {
          gate.values[j * dim + i] = gu[at(gate_at(j), i, 2 * ffn, dim)];
          up.values[j * dim + i] = gu[at(up_at(j), i, 2 * ffn, dim)];
        }
      const float* dn = &down[e * ffn * dim];
      for (uint64_t j = 0; j < ffn; ++j)
        for (uint64_t o = 0; o < dim; ++o) d.values[o * ffn + j] = dn[at(o, j, dim, ffn)];
      x.gate.weight = std::move(gate);
      x.up.weight = std::move(up);
      x.down.weight = std::move(d);
    }
    if (!c.expert_bias) continue;
    x.gate.bias.resize(ffn);
    x.up.bias.resize(ffn);
    for (uint64_t j = 0; j < ffn; ++j) {
      x.gate.bias[j] = gate_up_bias[e * 2 * ffn + gate_at(j)];
      x.up.bias[j] = gate_up_bias[e * 2 * ffn + up_at(j)];
    }
    x.down.bias.assign(down_bias.begin() + static_cast<ptrdiff_t>(e * dim),
                       down_bias.begin() + static_cast<ptrdiff_t>((e + 1) * dim));
  }
  return experts;
}

}  // namespace lowbit
