// `lowbit formats`: every number format with its exact numeric facts and its storage cost at
// its typical granularity (for a nominal 4096 x 4096 weight).
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output.h"
#include "quant/scheme.h"

namespace lowbit::cli {
namespace {

constexpr uint64_t kNominalRows = 4096, kNominalCols = 4096;

struct FormatFacts {
  std::string name;
  int bits = 0, exp_bits = -1, man_bits = -1;
  double max_normal = NAN, min_normal = NAN, min_subnormal = NAN;
  double bits_per_weight = NAN;
  std::string granularity, description;
};

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

std::vector<FormatFacts> AllFormats() {
  std::vector<FormatFacts> out;
  for (const SchemePreset& p : SchemePresets()) {
    const QuantScheme s = ParseScheme(p.name);
    FormatFacts f = FactsOf(*s.element);
    f.name = p.name;
    f.bits_per_weight = s.BitsPerWeight(kNominalRows, kNominalCols);
    f.granularity = s.ToString();
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

nlohmann::json NumberOrNull(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

void Run(bool json) {
  const auto formats = AllFormats();
  if (json) {
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
                      {"typical_scheme", f.granularity},
                      {"description", f.description}});
    }
    std::puts(list.dump(2).c_str());
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : formats) {
    rows.push_back({f.name, std::to_string(f.bits), f.exp_bits >= 0 ? std::to_string(f.exp_bits) : "-",
                    f.man_bits >= 0 ? std::to_string(f.man_bits) : "-", FormatNumber(f.max_normal),
                    FormatNumber(f.min_normal), FormatNumber(f.min_subnormal),
                    std::isnan(f.bits_per_weight) ? "-" : fmt::format("{:.4f}", f.bits_per_weight), f.granularity});
  }
  PrintTable({"format", "bits", "exp", "man", "max normal", "min normal", "min subnormal", "bits/weight", "typical scheme"},
             rows);
  std::puts("\nbits/weight counts scales, zero-points and tensor scales for a 4096 x 4096 weight.");
}

}  // namespace

void AddFormatsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("formats", "List every number format with its numeric facts");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json] { Run(*json); });
}

}  // namespace lowbit::cli
