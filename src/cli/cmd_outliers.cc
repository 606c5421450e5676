// `lowbit outliers`: why granularity matters. 64 draws from N(0,1), then the same draws with one
// value set to 60; INT4 per-tensor vs per-group 16 vs per-group 8 (fp32 scales). The error on
// the 63 ordinary values shows one outlier inflating the scale of everything that shares it.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/output.h"
#include "quant/rtn.h"

namespace lowbit::cli {
namespace {

constexpr size_t kCount = 64;
constexpr size_t kOutlierIndex = 17;
constexpr float kOutlierValue = 60.0f;

struct Row {
  std::string case_name, granularity;
  std::vector<float> scales;
  double bulk_mean_abs_error;
};

std::vector<Row> Measure(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> gaussian(kCount);
  for (float& v : gaussian) v = normal(rng);
  std::vector<float> with_outlier = gaussian;
  with_outlier[kOutlierIndex] = kOutlierValue;

  std::vector<Row> rows;
  for (const auto& [case_name, values] : {std::pair{"gaussian", gaussian}, std::pair{"outlier", with_outlier}}) {
    for (const auto& [label, spec] : {std::pair{"per-tensor", "int4:tensor:scale=f32"},
                                      std::pair{"group 16", "int4:g16:scale=f32"},
                                      std::pair{"group 8", "int4:g8:scale=f32"}}) {
      const QuantizedTensor q = QuantizeRtn(values, 1, kCount, ParseScheme(spec), case_name);
      const std::vector<float> back = q.Dequantize();
      double err = 0;
      for (size_t i = 0; i < kCount; ++i)
        if (i != kOutlierIndex) err += std::fabs(back[i] - values[i]);
      Row row{case_name, label, {}, err / (kCount - 1)};
      for (uint64_t c = 0; c < q.grid().cells(); ++c) row.scales.push_back(q.Scale(c));
      rows.push_back(row);
    }
  }
  return rows;
}

void Run(bool json, uint64_t seed) {
  const auto rows = Measure(seed);
  if (json) {
    nlohmann::json out = {{"rows", nlohmann::json::array()}};
    for (const Row& r : rows) {
      out["rows"].push_back({{"case", r.case_name},
                             {"granularity", r.granularity},
                             {"scale", r.scales.size() == 1 ? nlohmann::json(r.scales[0]) : nlohmann::json(r.scales)},
                             {"bulk_mean_abs_error", r.bulk_mean_abs_error}});
    }
    std::puts(out.dump(2).c_str());
    return;
  }
  std::vector<std::vector<std::string>> table;
  for (const Row& r : rows) {
    float lo = r.scales[0], hi = r.scales[0];
    for (float s : r.scales) lo = std::min(lo, s), hi = std::max(hi, s);
    const std::string scale = r.scales.size() == 1 ? FormatNumber(lo)
                                                   : fmt::format("{} scales, {}..{}", r.scales.size(),
                                                                 FormatNumber(lo), FormatNumber(hi));
    table.push_back({r.case_name, r.granularity, scale, FormatNumber(r.bulk_mean_abs_error)});
  }
  PrintTable({"case", "granularity", "scale", "bulk mean |error|"}, table);
  std::printf("\nINT4 symmetric, 64 values from N(0,1) (seed %llu); 'outlier' sets x[%zu] = %.0f.\n"
              "The bulk error covers the 63 ordinary values.\n",
              static_cast<unsigned long long>(seed), kOutlierIndex, kOutlierValue);
}

}  // namespace

void AddOutliersCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("outliers", "Show how one outlier hurts coarse-grained scales");
  auto json = std::make_shared<bool>(false);
  auto seed = std::make_shared<uint64_t>(0);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--seed", *seed, "Random seed")->default_val(0);
  cmd->callback([json, seed] { Run(*json, *seed); });
}

}  // namespace lowbit::cli
