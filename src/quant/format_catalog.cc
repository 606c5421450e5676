#include "quant/format_catalog.h"

#include <algorithm>
#include <cmath>

#include "quant/scheme.h"

namespace lowbit {
namespace {

nlohmann::json NumberOrNull(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

FormatFacts FactsOf(const ElementFormat& e) {
  FormatFacts f;
  f.bits = e.bits;
  switch (e.kind) {
    case ElementKind::kFloat:
      if (e.minifloat) {
        f.exp_bits = e.minifloat->exp_bits;
        f.man_bits = e.minifloat->man_bits;
        f.max_normal = MaxFinite(*e.minifloat);
        f.min_normal = MinNormal(*e.minifloat);
        f.min_subnormal = MinSubnormal(*e.minifloat);
      } else {  // fp32
        f.exp_bits = 8;
        f.man_bits = 23;
        f.max_normal = 3.4028234663852886e38;
        f.min_normal = std::ldexp(1.0, -126);
        f.min_subnormal = std::ldexp(1.0, -149);
      }
      break;
    case ElementKind::kInt:
      f.max_normal = (1 << (e.bits - 1)) - 1;
      f.min_normal = 1;
      break;
    case ElementKind::kCodebook:
      f.max_normal = ScaleDivisor(e);
      f.min_normal = *std::upper_bound(e.levels.begin(), e.levels.end(), 0.0f);  // smallest positive level
      break;
    case ElementKind::kTernary:
      f.max_normal = f.min_normal = 1;
      break;
    case ElementKind::kMxInt8:
      f.max_normal = 127.0 / 64.0;
      f.min_normal = 1.0 / 64.0;
      break;
  }
  return f;
}

}  // namespace

std::vector<FormatFacts> FormatCatalog() {
  std::vector<FormatFacts> out;
  for (const SchemePreset& p : SchemePresets()) {
    const QuantScheme s = ParseScheme(p.name);
    FormatFacts f = FactsOf(*s.element);
    f.name = p.name;
    f.bits_per_weight = s.BitsPerWeight(kCatalogRows, kCatalogCols);
    f.typical_scheme = s.ToString();
    f.description = p.description;
    out.push_back(f);
  }
  for (const MiniFloat* scale : {&kE8M0, &kUE4M3}) {  // scale-only formats
    FormatFacts f;
    f.name = scale->name;
    f.bits = 8;  // UE4M3 is stored in a byte with the sign bit clear
    f.exp_bits = scale->exp_bits;
    f.man_bits = scale->man_bits;
    f.max_normal = MaxFinite(*scale);
    f.min_normal = MinNormal(*scale);
    f.min_subnormal = MinSubnormal(*scale);
    f.description = scale == &kE8M0 ? "MX shared scale: unsigned power of two, NaN = 0xFF"
                                    : "NVFP4 block scale: unsigned E4M3";
    out.push_back(f);
  }
  return out;
}

nlohmann::json FormatCatalogJson(const std::vector<FormatFacts>& formats) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : formats) {
    list.push_back({{"name", f.name},
                    {"bits", f.bits},
                    {"exponent_bits", f.exp_bits >= 0 ? nlohmann::json(f.exp_bits) : nlohmann::json(nullptr)},
                    {"mantissa_bits", f.man_bits >= 0 ? nlohmann::json(f.man_bits) : nlohmann::json(nullptr)},
                    {"max_normal", NumberOrNull(f.max_normal)},
                    {"min_normal", NumberOrNull(f.min_normal)},
                    {"min_subnormal", NumberOrNull(f.min_subnormal)},
                    {"bits_per_weight", NumberOrNull(f.bits_per_weight)},
                    {"typical_scheme", f.typical_scheme},
                    {"description", f.description}});
  }
  return list;
}

}  // namespace lowbit
