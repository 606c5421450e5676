#include "quant/registry.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
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

class RtnMethod final : public QuantMethod {
 public:
  QuantizedTensor Quantize(const WeightToQuantize& w, const QuantScheme& scheme) const override {
    return QuantizeRtn(w.values, w.rows, w.cols, scheme, w.name);
  }
};

}  // namespace

const MethodRegistry& BuiltinMethods() {
  static const MethodRegistry registry = [] {
    MethodRegistry r;
    r.Register({"rtn", "round-to-nearest with the scheme's scale rule",
                {ElementKind::kFloat, ElementKind::kInt, ElementKind::kNF4, ElementKind::kTernary, ElementKind::kMxInt8},
                {GranularityKind::kTensor, GranularityKind::kChannel, GranularityKind::kToken, GranularityKind::kGroup,
                 GranularityKind::kBlock},
                {}},
               [](const nlohmann::json&) { return std::make_unique<RtnMethod>(); });
    return r;
  }();
  return registry;
}

}  // namespace lowbit
