// `lowbit report RUN_DIR -o report.html`: one self-contained HTML page (inline SVG and CSS, no
// scripts, no network) from the JSON files of a run, found anywhere under RUN_DIR and recognised by
// their keys:
//   recipe card (quantize's recipe.json)   "recipe" object + "bits_per_weight"/"tensors"
//   compare --json                         "kld_mean" + "top1_agreement"
//   ppl --json                             "ppl" + "tokens_per_second"
//   bench codecs --json                    an array of {"format", "op", "gbps"}
//   plan --json                            "formats": [{"format", "weight_bytes", ...}] + "hardware"
//   advise --json                          "steps" + "plan" (drawn like a one-format plan)
// Charts: KL and PPL against bits/weight for every recipe (Pareto frontier drawn), a per-layer
// error heatmap (decoder layers x linear kind, from each recipe's tensors' output_mse), a roofline
// per plan with every format's point, and each plan's memory breakdown as stacked bars.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lowbit {

struct RecipeTensor {
  std::string name;
  double output_mse = 0, weight_mse = 0;  // NaN when the card has none
};

struct RecipeRun {
  std::string name;  // folder of recipe.json relative to RUN_DIR (or the file name)
  std::string method, format, scheme;
  double bits_per_weight = 0;
  bool has_eval = false;
  double kld_mean = 0, ppl = 0, ppl_base = 0, top1_agreement = 0;
  std::vector<RecipeTensor> tensors;
};

struct NamedJson {
  std::string name;  // path relative to RUN_DIR
  nlohmann::json json;
};

struct RunDir {
  std::filesystem::path path;
  std::vector<RecipeRun> recipes;
  std::vector<NamedJson> compares, ppls, benches, plans, advice;
  std::vector<std::string> skipped;  // JSON files that match none of the shapes above
};

// Reads every *.json under `dir` (recursively, in path order). Throws Error naming the file for
// invalid JSON in a file that looks like ours, a missing folder, or a folder with nothing to report.
RunDir ScanRunDir(const std::filesystem::path& dir);

std::string RenderReportHtml(const RunDir& run);

// ScanRunDir + RenderReportHtml, written atomically to `out`.
void WriteReport(const std::filesystem::path& run_dir, const std::filesystem::path& out);

}  // namespace lowbit
