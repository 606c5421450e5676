#include "model/ptq.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <regex>

#include "core/error.h"
#include "kernels/dot.h"
#include "kernels/matmul.h"
#include "model/activation_store.h"
#include "model/awq_scales.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/quantize_weights.h"
#include "model/recipe.h"
#include "model/rotation.h"
#include "quant/column_order.h"
#include "quant/hadamard.h"
#include "quant/registry.h"
#include "quant/scale_rules.h"

namespace lowbit {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr size_t kOutputSampleTokens = 256;  // calibration tokens kept per input for output MSE

struct InputGroup {
  LinearInput input;
  std::vector<BlockLinear> linears;  // sharing one input; in a sparse layer, kGateUp holds every MLP linear
};

std::vector<InputGroup> Groups(LayerWeights& lw) {
  std::vector<BlockLinear> all = BlockLinears(lw);
  const auto take = [&](size_t begin, size_t end) {
    return std::vector<BlockLinear>(all.begin() + static_cast<ptrdiff_t>(begin), all.begin() + static_cast<ptrdiff_t>(end));
  };
  // Latent attention: q_a (or q) and kv_a share the normed input (and vLLM fuses them); q_b and kv_b
  // each read their own.
  std::vector<InputGroup> groups;
  size_t o = 3;  // o_proj's slot
  if (lw.kv_a_norm.empty()) {
    groups = {{LinearInput::kQkv, take(0, 3)}};
  } else if (lw.q_a_norm.empty()) {  // q_proj, kv_a, kv_b
    groups = {{LinearInput::kLatentIn, {all[0], all[1]}}, {LinearInput::kLatentKv, {all[2]}}};
  } else {  // q_a, q_b, kv_a, kv_b
    groups = {{LinearInput::kLatentIn, {all[0], all[2]}}, {LinearInput::kLatentQ, {all[1]}},
              {LinearInput::kLatentKv, {all[3]}}};
    o = 4;
  }
  groups.push_back({LinearInput::kO, take(o, o + 1)});
  if (!lw.experts.empty()) {
    groups.push_back({LinearInput::kGateUp, take(o + 1, all.size())});
    groups.push_back({LinearInput::kDown, {}});
  } else {
    groups.push_back({LinearInput::kGateUp, take(o + 1, o + 3)});
    groups.push_back({LinearInput::kDown, take(o + 3, o + 4)});
  }
  return groups;
}

// Whether a group's input comes out of an RMSNorm whose weight can take its scales (AWQ, SmoothQuant):
// the attention's and the MLP's input norms, and latent attention's q_a and KV-latent norms.
bool FoldsIntoANorm(LinearInput input) { return input != LinearInput::kO && input != LinearInput::kDown; }

// The name of a group's input in the recipe card: qkv, gate_up, or its linears' names.
std::string GroupLabel(const InputGroup& group) {
  if (group.input == LinearInput::kQkv) return "qkv";
  if (group.input == LinearInput::kGateUp) return "gate_up";
  std::vector<std::string> names;
  for (const BlockLinear& g : group.linears) names.push_back(g.name);
  return fmt::format("{}", fmt::join(names, "+"));
}

struct WeightError {
  double weight_mse = 0;
  double output_mse = 0;  // mean over sample tokens of |(W - Q) x|^2 / rows
};

// W - Q for one linear (Q's columns stored in `order`; split-off outlier columns exact), measured in blocks of rows on the pool,
// each dequantized into a small buffer: no full-size copy of the matrix is made.
WeightError MeasureError(const DenseMatrix& w, const QuantizedTensor& q, std::span<const uint32_t> order,
                         const std::optional<OutlierColumns>& outliers, const std::vector<float>& sample,
                         ThreadPool& pool) {
  constexpr size_t kRowBlock = 64;
  const size_t rows = w.rows(), cols = w.cols(), n = sample.size() / cols;
  const size_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<double> weight_sq(blocks, 0.0), output_sq(blocks, 0.0);
  pool.ParallelFor(blocks, [&](size_t begin, size_t end) {
    std::vector<float> diff(kRowBlock * cols), y(n * kRowBlock), stored(order.empty() ? 0 : cols);
    for (size_t b = begin; b < end; ++b) {
      const size_t r0 = b * kRowBlock, k = std::min(kRowBlock, rows - r0);
      for (size_t i = 0; i < k; ++i) {
        float* d = &diff[i * cols];
        if (order.empty()) {
          q.DequantizeRow(r0 + i, d);
        } else {  // back to input order
          q.DequantizeRow(r0 + i, stored.data());
          for (size_t j = 0; j < cols; ++j) d[order[j]] = stored[j];
        }
        if (outliers)
          for (size_t j = 0; j < outliers->columns.size(); ++j)
            d[outliers->columns[j]] = outliers->weight.values[(r0 + i) * outliers->columns.size() + j];
        const float* wr = &w.values[(r0 + i) * cols];
        for (size_t c = 0; c < cols; ++c) {
          d[c] = wr[c] - d[c];
          weight_sq[b] += static_cast<double>(d[c]) * d[c];
        }
      }
      if (n == 0) continue;
      DotRows(diff.data(), cols, 0, k, sample.data(), n, y.data(), k);
      for (size_t i = 0; i < n * k; ++i) output_sq[b] += static_cast<double>(y[i]) * y[i];
    }
  });
  WeightError e;
  for (size_t b = 0; b < blocks; ++b) {
    e.weight_mse += weight_sq[b];
    e.output_mse += output_sq[b];
  }
  e.weight_mse /= static_cast<double>(rows * cols);
  e.output_mse = n == 0 ? 0.0 : e.output_mse / static_cast<double>(n * rows);
  return e;
}

// x[t][c] /= s[c] on every calibration input: the inputs the rescaled weights now see.
void DivideInputColumns(ActivationStore& store, const std::vector<float>& s) {
  const size_t cols = s.size();
  store.ForEach(true, [&](size_t, BatchActivations& b) {
    for (size_t i = 0; i < b.input.size(); ++i) b.input[i] /= s[i % cols];
  });
}

constexpr size_t kScaleSearchTokens = 512;  // calibration tokens the AWQ scale search evaluates on

// Mean |x| per column over every calibration token of the group, and the first tokens as a sample.
void InputStatistics(ActivationStore& store, size_t cols, std::vector<float>& mean_abs, std::vector<float>& sample) {
  std::vector<double> sum(cols, 0.0);
  size_t tokens = 0;
  sample.clear();
  store.ForEach(false, [&](size_t, BatchActivations& b) {
    const size_t n = b.input.size() / cols;
    for (size_t t = 0; t < n; ++t)
      for (size_t c = 0; c < cols; ++c) sum[c] += std::fabs(b.input[t * cols + c]);
    tokens += n;
    const size_t keep = std::min(n, kScaleSearchTokens - std::min(kScaleSearchTokens, sample.size() / cols));
    sample.insert(sample.end(), b.input.begin(), b.input.begin() + static_cast<ptrdiff_t>(keep * cols));
  });
  mean_abs.resize(cols);
  for (size_t c = 0; c < cols; ++c) mean_abs[c] = static_cast<float>(sum[c] / static_cast<double>(tokens));
}

// The MLP units of a layer that read the post-norm input, with the rows of x [n x dim] each one sees:
// the dense MLP or the shared expert (every row), then each expert (the rows the router sends it).
struct MlpUnit {
  Linear *gate, *up, *down;
  std::vector<float> x;
  std::string name;  // of its down projection's input, for the report
};
std::vector<MlpUnit> MlpUnits(const ModelConfig& c, size_t l, LayerWeights& lw, std::span<const float> x) {
  std::vector<MlpUnit> units;
  if (lw.w_down.rows() > 0)
    units.push_back({&lw.w_gate, &lw.w_up, &lw.w_down, {x.begin(), x.end()}, fmt::format("model.layers.{}.down", l)});
  if (!c.moe(l)) return units;
  const ExpertRoutes routes = RouteTokens(c, lw, x.data(), x.size() / c.dim);
  for (size_t e = 0; e < lw.experts.size(); ++e) {
    std::vector<float> rows;
    GatherExpertRows(c, routes, e, x.data(), rows);
    units.push_back({&lw.experts[e].gate, &lw.experts[e].up, &lw.experts[e].down, std::move(rows),
                     fmt::format("model.layers.{}.mlp.experts.{}.down", l, e)});
  }
  return units;
}

// act(gate x) * up x: a unit's down projection input, in full precision.
std::vector<float> DownInput(const ModelConfig& c, const MlpUnit& u, std::span<const float> x, ThreadPool& pool) {
  const size_t n = x.size() / u.gate->cols(), ffn = u.gate->rows();
  std::vector<float> gate(n * ffn), up(n * ffn);
  MatMul(*u.gate, x.data(), n, gate.data(), pool);
  MatMul(*u.up, x.data(), n, up.data(), pool);
  GatedActivation(c, gate.data(), up.data(), gate.size(), gate.data());
  return gate;
}

// AWQ: scales for the group's shared input, folded into the op that produces it (the RMSNorm
// weight), the group's weight columns, and the calibration inputs already computed. At the
// gate/up stage the down projection's scales are searched too, on its full-precision input
// silu(gate x) * up x, and folded into up's rows before up is quantized. o_proj is not scaled:
// its input comes from v through attention, and with grouped-query attention one v row feeds
// several o columns (AutoAWQ skips it for the same reason). In a sparse layer every expert's gate/up
// shares the norm's scales, each judged on the sample rows the router sends it (the router's columns
// take the scales too, so routing is unchanged), and each expert's down gets scales of its own.
void ApplyActivationScales(size_t l, const InputGroup& group, Model& model, ActivationStore& store,
                           const QuantScheme& scheme, size_t grid, ThreadPool& pool, QuantizeReport& report) {
  const LinearInput input = group.input;
  if (!FoldsIntoANorm(input)) return;
  LayerWeights& lw = model.weights.layers[l];
  const size_t cols = input == LinearInput::kGateUp ? model.config.dim : group.linears[0].linear->cols();
  std::vector<float> mean_abs, sample;
  InputStatistics(store, cols, mean_abs, sample);
  std::vector<MlpUnit> units;
  std::vector<ScaleSearchTerm> terms;
  if (input != LinearInput::kGateUp) {
    for (const BlockLinear& g : group.linears) terms.push_back({&std::get<DenseMatrix>(g.linear->weight), sample});
  } else {
    units = MlpUnits(model.config, l, lw, sample);
    for (const MlpUnit& u : units)
      for (Linear* g : {u.gate, u.up}) terms.push_back({&std::get<DenseMatrix>(g->weight), u.x});
  }
  const InputScales found = SearchInputScales(terms, mean_abs, scheme, grid, pool);
  FoldInputScales(model.config, lw, input, found.scales);
  DivideInputColumns(store, found.scales);
  report.awq_alphas.push_back({fmt::format("model.layers.{}.{}", l, GroupLabel(group)), found.alpha});
  // Each down projection on its unit's (scaled) sample rows.
  for (MlpUnit& u : units) {
    const size_t n = u.x.size() / cols;
    if (n == 0) continue;  // an expert the sample never reaches keeps its scales
    for (size_t i = 0; i < u.x.size(); ++i) u.x[i] /= found.scales[i % cols];
    const std::vector<float> down_in = DownInput(model.config, u, u.x, pool);
    const size_t ffn = u.gate->rows();
    std::vector<float> down_abs(ffn, 0.0f);
    for (size_t i = 0; i < down_in.size(); ++i) down_abs[i % ffn] += std::fabs(down_in[i]) / static_cast<float>(n);
    const ScaleSearchTerm down[] = {{&std::get<DenseMatrix>(u.down->weight), down_in}};
    const InputScales down_scales = SearchInputScales(down, down_abs, scheme, grid, pool);
    FoldDownScales(*u.up, *u.down, down_scales.scales);
    report.awq_alphas.push_back({u.name, down_scales.alpha});
  }
}

// max |x| per column over every calibration token of the group's input.
std::vector<float> InputAbsMax(ActivationStore& store, size_t cols) {
  std::vector<float> amax(cols, 0.0f);
  store.ForEach(false, [&](size_t, BatchActivations& b) {
    for (size_t t = 0; t < b.input.size(); t += cols)
      for (size_t c = 0; c < cols; ++c) amax[c] = std::max(amax[c], std::fabs(b.input[t + c]));
  });
  return amax;
}

// SmoothQuant's per-channel factors s_j = max|x_j|^a / max|w_j|^(1-a) over the group's weights.
std::vector<float> SmoothingFactors(const std::vector<float>& x_amax, const std::vector<const Linear*>& group,
                                   double alpha) {
  const size_t cols = x_amax.size();
  std::vector<float> w_amax(cols, 0.0f), s(cols);
  for (const Linear* l : group) {
    const DenseMatrix& m = std::get<DenseMatrix>(l->weight);
    for (size_t i = 0; i < m.values.size(); ++i) w_amax[i % cols] = std::max(w_amax[i % cols], std::fabs(m.values[i]));
  }
  for (size_t c = 0; c < cols; ++c) {
    const double v = std::pow(x_amax[c], alpha) / std::pow(std::max(w_amax[c], 1e-8f), 1.0 - alpha);
    s[c] = x_amax[c] > 0 && w_amax[c] > 0 ? static_cast<float>(std::max(v, 1e-5)) : 1.0f;
  }
  return s;
}

// SmoothQuant: at the q/k/v and gate/up stages, migrate the input's outlier channels into the
// weights (folded into the RMSNorm weight); at the gate/up stage also for each down_proj, whose
// full-precision input silu(gate x) * up x is computed over every calibration token its unit sees
// (a sparse layer's experts: the rows the router sends them) and whose factors are folded into
// up's rows before up is quantized.
void ApplySmoothing(size_t l, const InputGroup& input_group, Model& model, ActivationStore& store, double alpha,
                    ThreadPool& pool, QuantizeReport& report) {
  const LinearInput input = input_group.input;
  if (!FoldsIntoANorm(input)) return;
  LayerWeights& lw = model.weights.layers[l];
  const size_t cols = input == LinearInput::kGateUp ? model.config.dim : input_group.linears[0].linear->cols();
  std::vector<const Linear*> group;
  if (input != LinearInput::kGateUp) {
    for (const BlockLinear& g : input_group.linears) group.push_back(g.linear);
  } else {
    for (const MlpUnit& u : MlpUnits(model.config, l, lw, {}))
      for (const Linear* g : {u.gate, u.up}) group.push_back(g);
  }
  const std::vector<float> s = SmoothingFactors(InputAbsMax(store, cols), group, alpha);
  FoldInputScales(model.config, lw, input, s);
  DivideInputColumns(store, s);
  ++report.smoothed_inputs;
  if (input != LinearInput::kGateUp) return;
  std::vector<MlpUnit> units = MlpUnits(model.config, l, lw, {});
  std::vector<std::vector<float>> d_amax(units.size());
  for (size_t i = 0; i < units.size(); ++i) d_amax[i].assign(units[i].gate->rows(), 0.0f);
  store.ForEach(false, [&](size_t, BatchActivations& b) {
    const std::vector<MlpUnit> batch = MlpUnits(model.config, l, lw, b.input);
    for (size_t i = 0; i < batch.size(); ++i) {
      std::vector<float>& m = d_amax[i];
      const std::vector<float> down_in = DownInput(model.config, batch[i], batch[i].x, pool);
      for (size_t j = 0; j < down_in.size(); ++j) m[j % m.size()] = std::max(m[j % m.size()], std::fabs(down_in[j]));
    }
  });
  for (size_t i = 0; i < units.size(); ++i) {
    FoldDownScales(*units[i].up, *units[i].down, SmoothingFactors(d_amax[i], {units[i].down}, alpha));
    ++report.smoothed_inputs;
  }
}

// The activation quantization of one linear; a per-tensor scheme gets its static scale (and, when
// asymmetric, its zero-point) from the calibration inputs' range by the weights' rule, and NVFP4 its
// tensor scale from their absolute maximum (llm-compressor's static_minmax input_global_scale).
InputQuant MakeInputQuant(const QuantScheme& act, const CellStats& range) {
  InputQuant iq{act};
  if (!HasStaticScale(act)) return iq;
  if (act.tensor_scale) {
    iq.static_scale = ChooseTensorScale(act, range.amax);
  } else {
    const CellParams p = ChooseCellParams(act, range, 1.0f);
    iq.static_scale = p.stored_scale;
    iq.static_zero = p.zero;
  }
  return iq;
}

// x <- x H on every calibration input of a group whose linears apply an online Hadamard, so the
// statistics see what the weights see. H H = I, so a second call restores the inputs.
void HadamardInputs(ActivationStore& store, size_t cols, size_t block) {
  store.ForEach(true, [&](size_t, BatchActivations& b) { HadamardRows(b.input, b.input.size() / cols, cols, block); });
}

// Hands every calibration row matrix of one input, [n x cols] each, to `fn` in turn.
using RowVisitor = std::function<void(const std::function<void(const float* rows, size_t n)>& fn)>;

RowVisitor StoreRows(ActivationStore& store, size_t cols) {
  return [&store, cols](const std::function<void(const float*, size_t)>& fn) {
    store.ForEach(false, [&](size_t, BatchActivations& b) { fn(b.input.data(), b.input.size() / cols); });
  };
}

// lm_head's calibration rows: the final norm of the hidden states after the last block.
RowVisitor FinalNormRows(ActivationStore& store, const Model& model) {
  return [&store, &model](const std::function<void(const float*, size_t)>& fn) {
    std::vector<float> normed;
    store.ForEach(false, [&](size_t, BatchActivations& b) {
      ApplyFinalNorm(model, b.hidden, normed);
      fn(normed.data(), normed.size() / model.config.dim);
    });
  };
}

// The calibration statistics of one linear input.
struct InputStats {
  HessianAccumulator hessian;  // empty unless a method needs it
  std::vector<float> sample;   // the first kOutputSampleTokens rows, for the output error
  std::vector<float> amax;     // max |x| per column, when outliers or static activation scales need it
  CellStats range;             // min, max and max |x| of every input, beside amax
  size_t tokens = 0;
};

InputStats CollectStats(size_t cols, bool hessian, bool amax, const RowVisitor& visit, ThreadPool& pool) {
  InputStats s{HessianAccumulator(hessian ? cols : 0), {}, {}, {}, 0};
  if (amax) s.amax.assign(cols, 0.0f);
  visit([&](const float* rows, size_t n) {
    if (hessian) s.hessian.Add(rows, n, pool);
    const size_t keep = std::min(n, kOutputSampleTokens - std::min(kOutputSampleTokens, s.sample.size() / cols));
    s.sample.insert(s.sample.end(), rows, rows + keep * cols);
    if (amax) {
      for (size_t i = 0; i < n * cols; ++i) s.amax[i % cols] = std::max(s.amax[i % cols], std::fabs(rows[i]));
      s.range.AddSpan(rows, n * cols);
    }
    s.tokens += n;
  });
  return s;
}

// A sparse layer's MLP linears (`linears`: the shared expert's gate, up, down if any, then each
// expert's), quantized expert by expert. With calibration (`store`), each expert is calibrated on
// the rows the router sends it (the router is not quantized, so the routes are the full-precision
// model's): gate and up on those rows of the input, then down on silu(gate x) * up x computed with
// the already quantized gate and up. The shared expert sees every row.
void QuantizeExperts(const ModelConfig& c, const LayerWeights& lw, const std::vector<BlockLinear>& linears,
                     ActivationStore* store, const std::function<InputStats(size_t, const RowVisitor&)>& collect,
                     const std::function<void(const BlockLinear&, const InputStats*)>& quantize, ThreadPool& pool) {
  LOWBIT_CHECK(linears.size() % 3 == 0);
  if (!store) {
    for (const BlockLinear& slot : linears) quantize(slot, nullptr);
    return;
  }
  const size_t dim = c.dim;
  std::vector<ExpertRoutes> routes;
  store->ForEach(false, [&](size_t, BatchActivations& b) {
    routes.push_back(RouteTokens(c, lw, b.input.data(), b.input.size() / dim));
  });
  const bool shared = lw.shared_expert();
  for (size_t unit = 0; unit < linears.size() / 3; ++unit) {
    const BlockLinear &gate = linears[3 * unit], &up = linears[3 * unit + 1], &down = linears[3 * unit + 2];
    // The unit's rows of batch i's input, gathered (every row for the shared expert).
    std::vector<float> rows;
    const auto gather = [&](size_t i, const BatchActivations& b) -> std::pair<const float*, size_t> {
      if (shared && unit == 0) return {b.input.data(), b.input.size() / dim};
      const size_t e = unit - (shared ? 1 : 0);
      GatherExpertRows(c, routes[i], e, b.input.data(), rows);
      return {rows.data(), routes[i].rows[e].size()};
    };
    const InputStats in = collect(dim, [&](const std::function<void(const float*, size_t)>& fn) {
      store->ForEach(false, [&](size_t i, BatchActivations& b) {
        const auto [x, n] = gather(i, b);
        fn(x, n);
      });
    });
    quantize(gate, &in);
    quantize(up, &in);
    const size_t ffn = gate.linear->rows();
    const InputStats hidden = collect(ffn, [&](const std::function<void(const float*, size_t)>& fn) {
      std::vector<float> g, u;
      store->ForEach(false, [&](size_t i, BatchActivations& b) {
        const auto [x, n] = gather(i, b);
        g.resize(n * ffn);
        u.resize(n * ffn);
        MatMul(*gate.linear, x, n, g.data(), pool);
        MatMul(*up.linear, x, n, u.data(), pool);
        GatedActivation(c, g.data(), u.data(), g.size(), g.data());
        fn(g.data(), n);
      });
    });
    quantize(down, &hidden);
  }
}

// What one linear gets: its method and scheme (the request's, or the first matching override's).
struct Plan {
  const QuantMethod* method = nullptr;  // null = ignored (left full precision)
  QuantScheme scheme;
};

struct CompiledRule {
  std::regex re;
  const QuantMethod* method;
  QuantScheme scheme;
};

std::regex CompilePattern(const std::string& pattern, const std::string& where) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    Fail("{} '{}' is not a valid ECMAScript regex: {}", where, pattern, e.what());
  }
}

}  // namespace

std::optional<OutlierColumns> SplitOutlierColumns(std::vector<float>& values, size_t rows, size_t cols,
                                                  std::span<const float> amax, double threshold) {
  LOWBIT_CHECK(values.size() == rows * cols && amax.size() == cols);
  OutlierColumns o;
  for (size_t c = 0; c < cols; ++c)
    if (amax[c] > threshold) o.columns.push_back(static_cast<uint32_t>(c));
  if (o.columns.empty()) return std::nullopt;
  const size_t k = o.columns.size();
  o.weight = DenseMatrix{rows, k, std::vector<float>(rows * k)};
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < k; ++i) {
      o.weight.values[r * k + i] = values[r * cols + o.columns[i]];
      values[r * cols + o.columns[i]] = 0;
    }
  return o;
}

QuantizeReport QuantizeModel(Model& model, const QuantizeRequest& req) {
  const auto start = Clock::now();
  const auto method = BuiltinMethods().Create(req.method, req.method_config, req.scheme);
  std::vector<std::unique_ptr<QuantMethod>> rule_methods;
  std::vector<CompiledRule> rules;
  for (size_t i = 0; i < req.overrides.size(); ++i) {
    const TensorRule& r = req.overrides[i];
    const std::string where = fmt::format("overrides[{}].match", i);
    const QuantScheme scheme = r.scheme.value_or(req.scheme);
    const MethodConfig m = OverrideMethod(r.method.value_or(""), r.method_config, req.method, req.method_config);
    rule_methods.push_back(BuiltinMethods().Create(m.method, m.config, scheme));
    rules.push_back({CompilePattern(r.pattern, where), rule_methods.back().get(), scheme});
  }
  std::vector<std::regex> ignore;
  for (size_t i = 0; i < req.ignore.size(); ++i)
    ignore.push_back(CompilePattern(req.ignore[i], fmt::format("ignore[{}]", i)));
  const auto plan_of = [&](const std::string& name) -> Plan {
    for (const std::regex& re : ignore)
      if (std::regex_search(name, re)) return {};
    for (const CompiledRule& r : rules)
      if (std::regex_search(name, r.re)) return {r.method, r.scheme};
    return {method.get(), req.scheme};
  };

  bool needs_hessian = method->needs_hessian(), needs_outliers = method->outlier_threshold() >= 0;
  for (const auto& m : rule_methods) {
    needs_hessian |= m->needs_hessian();
    needs_outliers |= m->outlier_threshold() >= 0;
    if (m->activation_scale_grid() > 0 || m->smoothing_alpha() >= 0)
      Fail("overrides: methods that rescale a whole input group (awq, smoothquant) can only be the recipe's "
           "main method");
  }
  const bool static_acts = req.act_scheme && HasStaticScale(*req.act_scheme);
  const bool calibrate = needs_hessian || needs_outliers || method->activation_scale_grid() > 0 ||
                         method->smoothing_alpha() >= 0 || static_acts;
  // lm_head: calibrated as the blocks' linears where the method only needs its input's Hessian
  // (GPTQ: the final norm's outputs on the calibration tokens), rounded to nearest otherwise
  // (scale-folding methods have no norm of their own to fold into here). Created now, so a format
  // the method cannot take fails before the run.
  const bool calibrated_lm_head = method->needs_hessian() && method->activation_scale_grid() <= 0 &&
                                  method->smoothing_alpha() < 0 && method->outlier_threshold() < 0;
  std::unique_ptr<QuantMethod> lm_head_method;
  if (req.lm_head)
    lm_head_method = calibrated_lm_head ? BuiltinMethods().Create(req.method, req.method_config, *req.lm_head)
                                        : BuiltinMethods().Create("rtn", nlohmann::json::object(), *req.lm_head);
  if (calibrate && req.calibration.empty())
    Fail("method '{}'{} needs calibration data (--calib FILE)", req.method,
         static_acts ? " with static activation scales" : "");
  // AWQ / SmoothQuant move down_proj's input scales into up_proj's rows: exact for act(gate) * up, not through
  // GPT-OSS's clamp(up) + 1.
  if (model.config.activation == FfnActivation::kSwigluClamped &&
      (method->activation_scale_grid() > 0 || method->smoothing_alpha() >= 0))
    Fail("method '{}': {}'s experts clamp up_proj's output and add 1 (the clamped SwiGLU), so the down_proj scales "
         "this method folds into up_proj would change the model; use rtn or gptq", req.method,
         model.config.architecture);
  if (!model.config.pre_norms && (method->activation_scale_grid() > 0 || method->smoothing_alpha() >= 0))
    Fail("method '{}': {} has no norm before its attention and MLP to fold this method's input scales into; use rtn "
         "or gptq", req.method, model.config.architecture);
  if (model.config.parallel_block && (method->activation_scale_grid() > 0 || method->smoothing_alpha() >= 0))
    Fail("method '{}': {} feeds its attention and MLP from one norm, which cannot hold both groups' input scales; "
         "use rtn or gptq", req.method, model.config.architecture);
  QuantizeReport report = req.resume ? req.resume->report : QuantizeReport{};
  const double prior_seconds = report.total_seconds;
  Engine engine(model, req.threads);  // reads the weights only when run: rotating them first is safe
  if (req.rotate && !req.resume) {  // a resumed model was saved already rotated
    if (method->activation_scale_grid() > 0 || method->smoothing_alpha() >= 0)
      Fail("rotate: method '{}' rescales input channels in the unrotated basis; combine rotation with rtn or gptq",
           req.method);
    // The blocks are rotated as they are reached.
    const RotationInfo info = RotateModelEnds(model, req.rotate_seed, &engine.pool());
    report.rotated = true;
    report.rotation_down_block = info.down_block;
  }

  // Calibration windows in batches. The batches share one set of KV caches: a layer's K/V are
  // written and read within one AdvanceLayer call, so the caches are cleared after it and hold
  // one batch of one layer, not the whole run.
  std::vector<std::vector<BatchItem>> batches;
  std::vector<KvCache> caches;
  const size_t per = std::max<size_t>(1, req.calibration_batch);
  if (calibrate) {
    size_t longest = 0;
    for (const auto& window : req.calibration) longest = std::max(longest, window.size());
    for (size_t j = 0; j < std::min(per, req.calibration.size()); ++j) caches.push_back(engine.NewCache(longest));
    for (size_t i = 0; i < req.calibration.size(); i += per) {
      std::vector<BatchItem>& items = batches.emplace_back();
      for (size_t j = i; j < std::min(req.calibration.size(), i + per); ++j)
        items.push_back({&caches[j - i], req.calibration[j], false, nullptr});
    }
  }
  ActivationStore store(batches.size(), req.max_activation_bytes, req.spill_dir);
  size_t first_layer = 0;
  if (req.resume) {
    first_layer = req.resume->next_layer;
    if (first_layer > model.config.n_layers) Fail("resume: block {} is past the model's {}", first_layer, model.config.n_layers);
    if (req.resume->hidden_batches != batches.size())
      Fail("resume: {} saved hidden-state batches, the calibration makes {}", req.resume->hidden_batches, batches.size());
  }
  store.ForEach(true, [&](size_t i, BatchActivations& b) {
    if (!req.resume) {
      b.hidden = engine.Embed(batches[i]);
      return;
    }
    b.hidden = req.resume->read_hidden(i);
    size_t tokens = 0;
    for (const BatchItem& item : batches[i]) tokens += item.tokens.size();
    if (b.hidden.size() != tokens * model.config.dim)
      Fail("resume: saved hidden states of batch {} have {} values, expected {}", i, b.hidden.size(),
           tokens * model.config.dim);
  });

  // The fused-matrix amax (FusedAbsMax) of `linears` planned with a tensor scale, taken just before they
  // are quantized (after AWQ / SmoothQuant rescaled them).
  const auto fused_amax = [&](size_t l, std::span<const BlockLinear> linears) {
    std::vector<BlockLinear> scaled;
    for (const BlockLinear& slot : linears) {
      const Plan p = plan_of(fmt::format("model.layers.{}.{}", l, slot.name));
      if (p.method && p.scheme.tensor_scale) scaled.push_back(slot);
    }
    return FusedAbsMax(scaled);
  };
  // One linear quantized by `plan`, on the statistics of its input (null: no calibration); with
  // `with_inputs`, its inputs quantized as the recipe says.
  const auto quantize_as = [&](const std::string& name, Plan plan, Linear& linear, const InputStats* stats,
                               const std::unordered_map<const Linear*, float>& fused, bool with_inputs) {
    const auto* dense = std::get_if<DenseMatrix>(&linear.weight);
    if (!dense) Fail("{}: already quantized", name);
    const auto t = Clock::now();
    // An expert the calibration never routed to has no Hessian: RTN, as GPTQ would leave it anyway.
    std::unique_ptr<QuantMethod> fallback;
    if (stats && stats->tokens == 0 && plan.method->needs_hessian()) {
      fallback = BuiltinMethods().Create("rtn", nlohmann::json::object(), plan.scheme);
      plan.method = fallback.get();
      ++report.uncalibrated_linears;
    }
    // LLM.int8(): columns with calibration outliers are split off and kept in full precision.
    const double threshold = plan.method->outlier_threshold();
    const size_t cols = dense->cols();
    std::span<const float> values = dense->values;
    std::vector<float> split;  // the weight without its outlier columns, when there are some
    std::optional<OutlierColumns> outliers;
    if (threshold >= 0 && stats && stats->tokens > 0) {
      split = dense->values;
      outliers = SplitOutlierColumns(split, dense->rows(), cols, stats->amax, threshold);
      if (outliers) {
        report.outlier_columns += outliers->columns.size();
        values = split;
      }
    }
    const bool hessian = stats && needs_hessian;
    WeightToQuantize w{name, values, dense->rows(), cols, hessian ? &stats->hessian.sum() : nullptr, &engine.pool()};
    if (const auto it = fused.find(&linear); it != fused.end()) w.tensor_amax = it->second;
    // Act-order with groups in processing order: the method sees its columns in that order.
    std::vector<uint32_t> order = plan.method->InputOrder(w, plan.scheme);
    std::vector<float> ordered_values;
    std::vector<double> ordered_hessian;
    if (!order.empty()) {
      ordered_values = GatherColumns(values, cols, order);
      w.values = ordered_values;
      if (w.hessian) {
        ordered_hessian = GatherSymmetric(*w.hessian, cols, order);
        w.hessian = &ordered_hessian;
      }
    }
    OrderedTensor result{plan.method->Quantize(w, plan.scheme), std::move(order)};
    CanonicalGroupOrder(result);  // each group's columns in input order, as g_idx readers rebuild it
    QuantizedTensor& q = result.tensor;
    TensorReport tr{name, q.scheme().ToString(), Since(t)};
    const WeightError error =
        MeasureError(*dense, q, result.order, outliers, stats ? stats->sample : std::vector<float>{}, engine.pool());
    tr.weight_mse = error.weight_mse;
    tr.output_mse = error.output_mse;
    report.tensors.push_back(tr);
    linear.weight = std::move(q);
    linear.outliers = std::move(outliers);
    linear.input_order = std::move(result.order);
    if (!with_inputs) return;
    // LLM.int8() is W8A8 by construction: dynamic per-token int8 activations unless told otherwise.
    std::optional<QuantScheme> act = req.act_scheme;
    if (!act && threshold >= 0) act = ParseScheme("int8:token");
    if (act) {
      if (HasStaticScale(*act) && (!stats || stats->amax.empty()))
        Fail("{}: static activation scales need calibration data", name);
      linear.input_quant = MakeInputQuant(*act, stats ? stats->range : CellStats{});
    }
  };
  const auto quantize_linear = [&](size_t l, const BlockLinear& slot, const InputStats* stats,
                                   const std::unordered_map<const Linear*, float>& fused) {
    const std::string name = fmt::format("model.layers.{}.{}", l, slot.name);
    const Plan plan = plan_of(name);
    if (!plan.method) return;  // ignored: stays full precision, no activation quantization
    if (req.progress) req.progress(l, name);
    quantize_as(name, plan, *slot.linear, stats, fused, true);
  };
  const auto collect = [&](size_t cols, const RowVisitor& visit) {
    const auto t = Clock::now();
    InputStats stats = CollectStats(cols, needs_hessian, needs_outliers || static_acts, visit, engine.pool());
    report.calibration_seconds += Since(t);
    return stats;
  };

  // One staged pass per layer: each linear group is calibrated on inputs that already went
  // through the quantized groups before it, and every linear runs once per calibration token.
  for (size_t l = first_layer; l < model.config.n_layers; ++l) {
    const auto layer_start = Clock::now();
    if (req.read_layer) model.weights.layers[l] = req.read_layer(l);
    if (report.rotated) RotateBlock(model.config, model.weights.layers[l], l, req.rotate_seed, &engine.pool());
    LayerWeights& lw = model.weights.layers[l];
    store.ForEach(true, [&](size_t, BatchActivations& b) { engine.BeginLayer(l, b.hidden, b.input); });
    for (InputGroup& group : Groups(lw)) {
      if (method->activation_scale_grid() > 0)  // (a sparse layer's down group is empty: scaled with gate/up)
        ApplyActivationScales(l, group, model, store, req.scheme, method->activation_scale_grid(),
                              engine.pool(), report);
      if (method->smoothing_alpha() >= 0)
        ApplySmoothing(l, group, model, store, method->smoothing_alpha(), engine.pool(), report);
      if (!lw.experts.empty() && group.input == LinearInput::kGateUp) {
        const auto fused = fused_amax(l, group.linears);
        QuantizeExperts(model.config, lw, group.linears, calibrate ? &store : nullptr, collect,
                        [&](const BlockLinear& slot, const InputStats* stats) { quantize_linear(l, slot, stats, fused); },
                        engine.pool());
      } else if (!group.linears.empty()) {
        const size_t cols = group.linears[0].linear->cols();
        const size_t hadamard = group.linears[0].linear->input_hadamard;
        if (calibrate && hadamard != 0) HadamardInputs(store, cols, hadamard);
        std::optional<InputStats> stats;
        if (calibrate) stats = collect(cols, StoreRows(store, cols));
        const auto fused = fused_amax(l, group.linears);
        for (const BlockLinear& slot : group.linears) quantize_linear(l, slot, stats ? &*stats : nullptr, fused);
        if (calibrate && hadamard != 0) HadamardInputs(store, cols, hadamard);  // back to the engine's inputs
      }
      if (calibrate) {  // run the now-quantized group on to the next group's input
        const auto t = Clock::now();
        store.ForEach(true, [&](size_t i, BatchActivations& b) {
          engine.AdvanceLayer(l, group.input, batches[i], b.hidden, b.input);
          for (KvCache& cache : caches) cache.Clear();
        });
        report.calibration_seconds += Since(t);
      }
    }
    report.layer_seconds.push_back(Since(layer_start));
    if (req.on_block_done) {
      BlockCheckpoint state{l + 1, {}, batches.size(), {}, report};
      state.report.total_seconds = prior_seconds + Since(start);
      state.for_each_hidden = [&](const std::function<void(std::span<const float>)>& visit) {
        store.ForEach(false, [&](size_t, BatchActivations& b) { visit(b.hidden); });
      };
      req.on_block_done(model, state);
    }
  }
  if (req.lm_head) {
    if (req.progress) req.progress(model.config.n_layers, "lm_head");
    std::optional<InputStats> stats;
    if (calibrate && calibrated_lm_head) stats = collect(model.config.dim, FinalNormRows(store, model));
    quantize_as("lm_head", {lm_head_method.get(), *req.lm_head}, model.weights.lm_head, stats ? &*stats : nullptr, {},
                false);
    model.config.tie_embeddings = false;
  }
  report.activation_peak_bytes = std::max(report.activation_peak_bytes, store.peak_resident_bytes());
  report.activation_spilled_bytes += store.bytes_written();
  report.total_seconds = prior_seconds + Since(start);
  return report;
}

nlohmann::json ReportToJson(const QuantizeReport& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorReport& t : r.tensors)
    tensors.push_back({{"name", t.name}, {"scheme", t.scheme}, {"seconds", t.seconds}, {"weight_mse", t.weight_mse},
                       {"output_mse", t.output_mse}});
  nlohmann::json alphas = nlohmann::json::array();
  for (const auto& [input, alpha] : r.awq_alphas) alphas.push_back({input, alpha});
  return {{"tensors", tensors}, {"awq_alphas", alphas}, {"smoothed_inputs", r.smoothed_inputs},
          {"outlier_columns", r.outlier_columns}, {"uncalibrated_linears", r.uncalibrated_linears}, {"rotated", r.rotated}, {"rotation_down_block", r.rotation_down_block},
          {"layer_seconds", r.layer_seconds}, {"calibration_seconds", r.calibration_seconds},
          {"total_seconds", r.total_seconds}};
}

QuantizeReport ReportFromJson(const JsonView& j) {
  QuantizeReport r;
  for (const JsonView& t : j["tensors"].Items())
    r.tensors.push_back({t.Get<std::string>("name"), t.Get<std::string>("scheme"), t.Get<double>("seconds"),
                         t.Get<double>("weight_mse"), t.Get<double>("output_mse")});
  for (const JsonView& a : j["awq_alphas"].Items()) {
    if (a.ExpectArray().size() != 2) a.Fail("must be a [input, alpha] pair");
    r.awq_alphas.emplace_back(a.Items()[0].As<std::string>(), a.Items()[1].As<double>());
  }
  r.smoothed_inputs = j.Get<size_t>("smoothed_inputs");
  r.outlier_columns = j.Get<size_t>("outlier_columns");
  r.uncalibrated_linears = j.Get<size_t>("uncalibrated_linears", 0);
  r.rotated = j.Get<bool>("rotated");
  r.rotation_down_block = j.Get<size_t>("rotation_down_block");
  r.layer_seconds = j.Get<std::vector<double>>("layer_seconds");
  r.calibration_seconds = j.Get<double>("calibration_seconds");
  r.total_seconds = j.Get<double>("total_seconds");
  return r;
}

}  // namespace lowbit
