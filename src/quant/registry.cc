#include "quant/registry.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "quant/awq.h"
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

std::unique_ptr<QuantMethod> MethodRegistry::Create(std::string_view name, const nlohmann::json& config,
                                                    const QuantScheme& scheme) const {
  const Entry& entry = Find(name);
  if (!config.is_null() && !config.is_object())
    Fail("method '{}': config must be a JSON object, got {}", name, config.type_name());
  if (config.is_object()) {
    for (const auto& [key, value] : config.items()) {
      const auto& keys = entry.info.config_keys;
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        std::string known;
        for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
        Fail("method '{}': unknown config key '{}' (known: {})", name, key, known.empty() ? "none" : known);
      }
    }
  }
  const auto& elements = entry.info.elements;
  if (std::find(elements.begin(), elements.end(), scheme.element->kind) == elements.end())
    Fail("method '{}' does not support format '{}'", name, scheme.ToString());
  const auto& grans = entry.info.granularities;
  if (scheme.granularity.kind != GranularityKind::kNone &&
      std::find(grans.begin(), grans.end(), scheme.granularity.kind) == grans.end())
    Fail("method '{}' does not support the granularity of '{}'", name, scheme.ToString());
  return entry.factory(config.is_null() ? nlohmann::json::object() : config);
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
    return QuantizeRtn(w.values, w.rows, w.cols, scheme, w.name, w.pool);
  }

 private:
  double smoothing_alpha_, outlier_threshold_;
};

class GptqMethod final : public QuantMethod {
 public:
  explicit GptqMethod(GptqOptions options) : options_(options) {}
  bool needs_hessian() const override { return true; }
  QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    if (!w.hessian) Fail("gptq: tensor '{}' has no calibration Hessian (give calibration data)", w.name);
    return QuantizeGptq(w.values, w.rows, w.cols, scheme, *w.hessian, options_, w.name, w.pool);
  }

 private:
  GptqOptions options_;
};

std::unique_ptr<QuantMethod> MakeGptq(const nlohmann::json& config) {
  GptqOptions o;
  try {
    o.damp = config.value("damp", o.damp);
    o.block_size = config.value("block_size", o.block_size);
    o.act_order = config.value("act_order", o.act_order);
  } catch (const nlohmann::json::exception& e) {
    Fail("method 'gptq': bad config value: {}", e.what());
  }
  if (!(o.damp >= 0 && o.damp < 1)) Fail("method 'gptq': damp must be in [0, 1), got {}", o.damp);
  if (o.block_size == 0) Fail("method 'gptq': block_size must be positive");
  return std::make_unique<GptqMethod>(o);
}

class AwqMethod final : public QuantMethod {
 public:
  explicit AwqMethod(AwqOptions options) : options_(options) {}
  bool needs_hessian() const override { return true; }
  size_t activation_scale_grid() const override { return options_.scale_grid; }
  QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    if (!w.hessian) Fail("awq: tensor '{}' has no calibration statistics (give calibration data)", w.name);
    return QuantizeAwqClip(w.values, w.rows, w.cols, scheme, *w.hessian, options_, w.name);
  }

 private:
  AwqOptions options_;
};

std::unique_ptr<QuantMethod> MakeAwq(const nlohmann::json& config) {
  AwqOptions o;
  try {
    o.grid = config.value("clip_grid", o.grid);
    o.max_shrink = config.value("max_shrink", o.max_shrink);
    o.clip = config.value("clip", o.clip);
    o.scale_grid = config.value("scale_grid", o.scale_grid);
  } catch (const nlohmann::json::exception& e) {
    Fail("method 'awq': bad config value: {}", e.what());
  }
  if (!(o.max_shrink >= 0 && o.max_shrink < 1)) Fail("method 'awq': max_shrink must be in [0, 1), got {}", o.max_shrink);
  if (o.scale_grid == 0) Fail("method 'awq': scale_grid must be positive");
  return std::make_unique<AwqMethod>(o);
}

std::unique_ptr<QuantMethod> MakeSmoothQuant(const nlohmann::json& config) {
  double alpha = 0.5;
  try {
    alpha = config.value("alpha", alpha);
  } catch (const nlohmann::json::exception& e) {
    Fail("method 'smoothquant': bad config value: {}", e.what());
  }
  if (!(alpha >= 0 && alpha <= 1)) Fail("method 'smoothquant': alpha must be in [0, 1], got {}", alpha);
  return std::make_unique<RtnMethod>(alpha, -1);
}

std::unique_ptr<QuantMethod> MakeLlmInt8(const nlohmann::json& config) {
  double threshold = 6.0;
  try {
    threshold = config.value("threshold", threshold);
  } catch (const nlohmann::json::exception& e) {
    Fail("method 'llm_int8': bad config value: {}", e.what());
  }
  if (!(threshold >= 0) || !std::isfinite(threshold))
    Fail("method 'llm_int8': threshold must be a finite number >= 0, got {}", threshold);
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
               [](const nlohmann::json&) { return std::make_unique<RtnMethod>(); });
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
