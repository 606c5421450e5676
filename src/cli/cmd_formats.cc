// `lowbit formats`: every number format with its exact numeric facts and its storage cost at
// its typical granularity (for a nominal 4096 x 4096 weight).
#include <fmt/format.h>

#include <cmath>

#include "cli/commands.h"
#include "cli/output.h"
#include "quant/format_catalog.h"

namespace lowbit::cli {
namespace {

void Run(bool json) {
  const std::vector<FormatFacts> formats = FormatCatalog();
  if (json) {
    std::puts(FormatCatalogJson(formats).dump(2).c_str());
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : formats) {
    rows.push_back({f.name, std::to_string(f.bits), f.exp_bits >= 0 ? std::to_string(f.exp_bits) : "-",
                    f.man_bits >= 0 ? std::to_string(f.man_bits) : "-", FormatNumber(f.max_normal),
                    FormatNumber(f.min_normal), FormatNumber(f.min_subnormal),
                    std::isnan(f.bits_per_weight) ? "-" : fmt::format("{:.4f}", f.bits_per_weight), f.typical_scheme});
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
