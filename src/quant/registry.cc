#include "quant/registry.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "quant/awq.h"
#include "quant/column_order.h"
#include "quant/gptq.h"
#include "quant/rtn.h"

namespace lowbit {

void MethodRegistry::Register(MethodInfo info, Factory factory) {
  const std::string& name = info.name;
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
      }))
    Fail("quantization method name '{}' must be lower-case letters, digits and '_'", name);
  if (entries_.contains(name)) Fail("quantization method '{}' is already registered", name);
  std::string key = name;
  entries_.emplace(std::move(key), Entry{std::move(info), std::move(factory)});
}

const MethodRegistry::Entry& MethodRegistry::Find(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known;
    for (const auto& n : Names()) known += (known.empty() ? "" : ", ") + n;
    Fail("unknown quantization method '{}' (known: {})", name, known);
  }
  return it->second;
}

const MethodInfo& MethodRegistry::Info(std::string_view name) const { return Find(name).info; }

std::vector<std::string> MethodRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;  // std::map keeps them sorted
}

std::unique_ptr<QuantMethod> MethodRegistry::Create(std::string_view name, const JsonView& config,
                                                    const QuantScheme& scheme) const {
  const Entry& entry = Find(name);
  static const nlohmann::json kNoConfig = nlohmann::json::object();
  const JsonView checked = config.is_null() ? JsonView(kNoConfig, config.source(), config.path()) : config;
  checked.ExpectObject();
  for (const auto& [key, value] : checked.value().items()) {
    const auto& keys = entry.info.config_keys;
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string known;
      for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
      checked.Fail(fmt::format("has unknown key '{}' for method '{}' (known: {})", key, name,
                               known.empty() ? "none" : known));
    }
  }
  const auto& elements = entry.info.elements;
  if (std::find(elements.begin(), elements.end(), scheme.element->kind) == elements.end())
    Fail("method '{}' does not support format '{}'", name, scheme.ToString());
  const auto& grans = entry.info.granularities;
  if (scheme.granularity.kind != GranularityKind::kNone &&
      std::find(grans.begin(), grans.end(), scheme.granularity.kind) == grans.end())
    Fail("method '{}' does not support the granularity of '{}'", name, scheme.ToString());
  return entry.factory(checked);
}

std::unique_ptr<QuantMethod> MethodRegistry::Create(std::string_view name, const nlohmann::json& config,
                                                    const QuantScheme& scheme) const {
  return Create(name, JsonView(config, fmt::format("method '{}' config", name)), scheme);
}

namespace {

// Round-to-nearest, optionally after a pipeline step: SmoothQuant migrates activation outliers
// into the weights (smoothing_alpha >= 0); LLM.int8() (Dettmers et al., 2022) keeps the input
// columns whose calibration max |x| exceeds a threshold in full precision (outlier_threshold >= 0)
// and quantizes the rest, its input per token.
class RtnMethod final : public QuantMethod {
 public:
  explicit RtnMethod(double smoothing_alpha = -1, double outlier_threshold = -1)
      : smoothing_alpha_(smoothing_alpha), outlier_threshold_(outlier_threshold) {}
  double smoothing_alpha() const override { return smoothing_alpha_; }
  double outlier_threshold() const override { return outlier_threshold_; }
  QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    return QuantizeRtn(w.values, w.rows, w.cols, scheme, w.name, w.pool, w.tensor_amax);
  }

 private:
  double smoothing_alpha_, outlier_threshold_;
};

class GptqMethod final : public QuantMethod {
 public:
  GptqMethod(GptqOptions options, bool group_order) : options_(options), group_order_(group_order) {}
  bool needs_hessian() const override { return true; }
  std::vector<uint32_t> InputOrder(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    if (!group_order_ || !w.hessian || scheme.granularity.kind != GranularityKind::kGroup) return {};
    std::vector<double> diag(w.cols);
    for (uint64_t i = 0; i < w.cols; ++i) diag[i] = (*w.hessian)[i * w.cols + i];
    std::vector<uint32_t> order = DescendingOrder(diag);
    if (std::ranges::is_sorted(order)) order.clear();
    return order;
  }
  QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    if (!w.hessian) Fail("gptq: tensor '{}' has no calibration Hessian (give calibration data)", w.name);
    GptqOptions o = options_;
    // Group act-order on a grouped scheme: the columns arrive sorted (InputOrder), groups follow them.
    if (group_order_ && scheme.granularity.kind == GranularityKind::kGroup) o.act_order = false;
    return QuantizeGptq(w.values, w.rows, w.cols, scheme, *w.hessian, o, w.name, w.pool, w.tensor_amax);
  }

 private:
  GptqOptions options_;
  bool group_order_;  // act_order "group": groups in processing order, stored in that column order
};

// "act_order": false / true ("static"), or llm-compressor's names: "static" / "weight" (groups stay in
// column order) and "group" / "dynamic" (groups in processing order, a stored column order).
std::unique_ptr<QuantMethod> MakeGptq(const JsonView& config) {
  GptqOptions o;
  o.damp = config.Get("damp", o.damp);
  o.block_size = config.Get("block_size", o.block_size);
  bool group_order = false;
  if (config.Has("act_order")) {
    const JsonView a = config["act_order"];
    if (a.value().is_boolean()) {
      o.act_order = a.As<bool>();
    } else {
      const std::string mode = a.As<std::string>();
      if (mode == "group" || mode == "dynamic") group_order = true;
      else if (mode != "static" && mode != "weight")
        a.Fail(fmt::format("is '{}'; expected true/false, \"static\" (or \"weight\") or \"group\" (or \"dynamic\")", mode));
      o.act_order = true;
    }
  }
  if (!(o.damp >= 0 && o.damp < 1)) config["damp"].Fail("must be in [0, 1)");
  if (o.block_size == 0) config["block_size"].Fail("must be positive");
  return std::make_unique<GptqMethod>(o, group_order);
}

class AwqMethod final : public QuantMethod {
 public:
  explicit AwqMethod(AwqOptions options) : options_(options) {}
  bool needs_hessian() const override { return true; }
  size_t activation_scale_grid() const override { return options_.scale_grid; }
  QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    if (!w.hessian) Fail("awq: tensor '{}' has no calibration statistics (give calibration data)", w.name);
    return QuantizeAwqClip(w.values, w.rows, w.cols, scheme, *w.hessian, options_, w.name, w.tensor_amax);
  }

 private:
  AwqOptions options_;
};

std::unique_ptr<QuantMethod> MakeAwq(const JsonView& config) {
  AwqOptions o;
  o.grid = config.Get("clip_grid", o.grid);
  o.max_shrink = config.Get("max_shrink", o.max_shrink);
  o.clip = config.Get("clip", o.clip);
  o.scale_grid = config.Get("scale_grid", o.scale_grid);
  if (!(o.max_shrink >= 0 && o.max_shrink < 1)) config["max_shrink"].Fail("must be in [0, 1)");
  // Each grid point is a full quantization of the group: a grid is a handful of points, not millions.
  if (o.grid == 0 || o.grid > 1000) config["clip_grid"].Fail("must be in [1, 1000]");
  if (o.scale_grid == 0 || o.scale_grid > 1000) config["scale_grid"].Fail("must be in [1, 1000]");
  return std::make_unique<AwqMethod>(o);
}

std::unique_ptr<QuantMethod> MakeSmoothQuant(const JsonView& config) {
  const double alpha = config.Get("alpha", 0.5);
  if (!(alpha >= 0 && alpha <= 1)) config["alpha"].Fail("must be in [0, 1]");
  return std::make_unique<RtnMethod>(alpha, -1);
}

std::unique_ptr<QuantMethod> MakeLlmInt8(const JsonView& config) {
  const double threshold = config.Get("threshold", 6.0);
  if (!(threshold >= 0)) config["threshold"].Fail("must be >= 0");
  return std::make_unique<RtnMethod>(-1, threshold);
}

const std::vector<ElementKind> kAllElements = {ElementKind::kFloat, ElementKind::kInt, ElementKind::kCodebook,
                                               ElementKind::kTernary, ElementKind::kMxInt8};
const std::vector<GranularityKind> kAllGranularities = {GranularityKind::kTensor, GranularityKind::kChannel,
                                                        GranularityKind::kToken, GranularityKind::kGroup,
                                                        GranularityKind::kBlock};

}  // namespace

const MethodRegistry& BuiltinMethods() {
  static const MethodRegistry registry = [] {
    MethodRegistry r;
    r.Register({"rtn", "round-to-nearest with the scheme's scale rule", kAllElements, kAllGranularities, {}},
               [](const JsonView&) { return std::make_unique<RtnMethod>(); });
    r.Register({"gptq", "GPTQ: Hessian-weighted error feedback (Frantar et al. 2022)", kAllElements,
                kAllGranularities, {"damp", "block_size", "act_order"}},
               MakeGptq);
    r.Register({"awq", "AWQ: activation-aware input scales + weight-clipping search (Lin et al. 2023)", kAllElements,
                kAllGranularities, {"clip", "clip_grid", "max_shrink", "scale_grid"}},
               MakeAwq);
    r.Register({"smoothquant", "SmoothQuant: migrate activation outliers into the weights (Xiao et al. 2022)",
                kAllElements, kAllGranularities, {"alpha"}},
               MakeSmoothQuant);
    r.Register({"llm_int8",
                "LLM.int8(): outlier input columns (calibration max |x| > threshold) in fp, the rest W8A8 "
                "(Dettmers et al. 2022)",
                {ElementKind::kInt}, {GranularityKind::kChannel, GranularityKind::kGroup}, {"threshold"}},
               MakeLlmInt8);
    return r;
  }();
  return registry;
}

}  // namespace lowbit
