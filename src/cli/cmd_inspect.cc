// `lowbit inspect CHECKPOINT [--gpu NAME] [--engine-flag "--quantization gptq"]`: the checkpoint's
// format and per-layer schemes (plan/inspect.h), then the kernel each GPU would run and the traps
// (plan/kernel_rules.h). Also registers `lowbit report` (cmd_report.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output.h"
#include "core/error.h"
#include "plan/hardware.h"
#include "plan/inspect_report.h"
#include "plan/kernel_rules.h"

namespace lowbit::cli {

void AddReportCommand(CLI::App& app);  // cmd_report.cc

namespace {

struct InspectFlags {
  std::string checkpoint;
  std::vector<std::string> gpus;
  std::vector<std::string> engine_flags;
  bool json = false;
  bool all_layers = false;
};

std::string Count(uint64_t n) {
  return n >= 1e9 ? fmt::format("{:.2f} B", n / 1e9) : n >= 1e6 ? fmt::format("{:.2f} M", n / 1e6) : std::to_string(n);
}
std::string Bytes(uint64_t n) {
  return n >= 1e9   ? fmt::format("{:.2f} GB", n / 1e9)
         : n >= 1e6 ? fmt::format("{:.2f} MB", n / 1e6)
                    : fmt::format("{} bytes", n);
}

// "model.layers.7.mlp.up_proj" -> ("model.layers.{}.mlp.up_proj", 7); names without a layer index
// keep index -1.
std::pair<std::string, int> SplitLayer(const std::string& name) {
  for (const char* marker : {"layers.", "blk."}) {
    const size_t at = name.find(marker);
    if (at == std::string::npos) continue;
    const size_t start = at + std::string_view(marker).size();
    size_t end = start;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end == start) continue;
    return {name.substr(0, start) + "{}" + name.substr(end), std::stoi(name.substr(start, end - start))};
  }
  return {name, -1};
}

// 0,1,2,3,5 -> "0-3,5"
std::string Ranges(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + (j == i ? std::to_string(v[i]) : fmt::format("{}-{}", v[i], v[j]));
    i = j + 1;
  }
  return out;
}

std::string Flag(bool b) { return b ? "yes" : "-"; }

void PrintLayers(const CheckpointInfo& info, bool all) {
  struct Row {
    std::string pattern;
    const LayerInfo* layer;
    std::vector<int> indices;
    uint64_t params = 0, bytes = 0;
  };
  std::vector<Row> rows;
  std::map<std::string, size_t> index;  // grouping key -> row
  for (const LayerInfo& l : info.layers) {
    auto [pattern, layer] = all ? std::pair<std::string, int>{l.name, -1} : SplitLayer(l.name);
    const std::string key = fmt::format("{}|{}|{}|{}x{}|{}", pattern, l.scheme, l.experts, l.rows, l.cols, l.ignored);
    auto [it, added] = index.emplace(key, rows.size());
    if (added) rows.push_back({pattern, &l, {}, 0, 0});
    Row& r = rows[it->second];
    if (layer >= 0) r.indices.push_back(layer);
    r.params += l.params;
    r.bytes += l.bytes;
  }
  std::vector<std::vector<std::string>> table;
  for (const Row& r : rows) {
    const LayerInfo& l = *r.layer;
    std::string name = r.pattern;
    if (const size_t at = name.find("{}"); at != std::string::npos)
      name.replace(at, 2, r.indices.size() == 1 ? std::to_string(r.indices[0]) : "{" + Ranges(r.indices) + "}");
    const std::string group = !l.quantized    ? "-"
                              : l.block_rows  ? fmt::format("{}x{}", l.block_rows, l.block_cols)
                              : l.group == -1 ? "channel"
                              : l.group == 0  ? "tensor"
                                              : std::to_string(l.group);
    table.push_back({name, l.scheme + (l.ignored ? " (not quantized)" : ""), std::to_string(l.bits), group,
                     l.quantized ? Flag(l.symmetric) : "-", Flag(l.act_order), Flag(l.zero_points),
                     l.experts ? fmt::format("{} x {}x{}", l.experts, l.rows, l.cols) : fmt::format("{}x{}", l.rows, l.cols),
                     fmt::format("{:.3f}", r.params ? 8.0 * double(r.bytes) / double(r.params) : 0.0)});
  }
  PrintTable({"weight", "scheme", "bits", "group", "sym", "act-order", "zeros", "out x in", "bits/w"}, table);
}

void PrintSummary(const CheckpointInfo& info) {
  std::vector<std::vector<std::string>> rows = {{"format", info.format_name}};
  if (!info.details.empty()) rows.push_back({"details", info.details});
  uint64_t matrices = 0, quantized = 0, stacked = 0;  // an expert stack counts one matrix per expert
  for (const LayerInfo& l : info.layers) {
    const uint64_t n = std::max<uint64_t>(l.experts, 1);
    matrices += n;
    quantized += l.quantized ? n : 0;
    stacked += l.experts;
  }
  rows.push_back({"weights", fmt::format("{} matrices{}, {} quantized, {} decoder layers", matrices,
                                         stacked ? fmt::format(" ({} in expert stacks)", stacked) : "", quantized,
                                         info.n_layers)});
  rows.push_back({"parameters", fmt::format("{} in {}", Count(info.params), Bytes(info.bytes))});
  rows.push_back({"bits/weight", fmt::format("{:.3f} (all tensors){}", info.bits_per_weight(),
                                             info.linear_params ? fmt::format(", {:.3f} quantized linears",
                                                                              info.linear_bits_per_weight())
                                                                : "")});
  std::string kv = info.kv.tensors ? fmt::format("{} scale tensors in {} of {} layers ({})", info.kv.tensors,
                                                 info.kv.layers, info.n_layers, info.kv.spelling)
                                   : "no k_scale/v_scale tensors";
  if (!info.kv.declared.empty()) kv += "; config declares a " + info.kv.declared + " KV cache";
  rows.push_back({"KV-cache scales", kv});
  if (!info.config_ignored.empty())
    rows.push_back({"config ignores", fmt::format("{}", fmt::join(info.config_ignored, ", "))});
  PrintTable({"checkpoint", info.path}, rows);
}

void RunInspect(const InspectFlags& f) {
  const InspectReport report = InspectWithKernels(f.checkpoint, f.gpus, f.engine_flags);
  if (f.json) {
    std::puts(InspectReportToJson(report).dump(2).c_str());
    return;
  }
  const CheckpointInfo& info = report.info;
  const EngineFlags& flags = report.flags;
  const std::vector<KernelPath>& paths = report.kernels;
  const std::vector<Trap>& traps = report.traps;
  std::printf("lowbit inspect: %s\n\n", info.path.c_str());
  PrintSummary(info);
  std::puts("");
  PrintLayers(info, f.all_layers);
  for (const std::string& n : info.notes) std::printf("note: %s\n", n.c_str());

  std::puts("");
  std::vector<std::vector<std::string>> rows;
  for (const KernelPath& k : paths)
    rows.push_back({k.gpu, k.compute_capability, k.method, k.kernel, std::string(PathStatusName(k.status)), k.reason});
  std::printf("kernel path (vLLM's published selection rules%s):\n",
              flags.quantization.empty() ? "" : (", --quantization " + flags.quantization).c_str());
  PrintTable({"gpu", "cc", "method", "kernel", "path", "why"}, rows);
  if (!flags.ignored.empty())
    std::printf("engine flags without a bearing on the kernel: %s\n",
                fmt::format("{}", fmt::join(flags.ignored, " ")).c_str());
  if (!traps.empty()) std::puts("");
  for (const Trap& t : traps)
    std::printf("%s: %s%s\n", t.severity.c_str(), t.message.c_str(),
                t.gpus.empty() ? "" : fmt::format(" [{}]", fmt::join(t.gpus, ", ")).c_str());
}

}  // namespace

void AddInspectCommands(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Detect a checkpoint's format and scheme per layer, and the kernel path "
                                 "engines take on each GPU");
  cmd->add_option("checkpoint", f->checkpoint, "Checkpoint folder, .safetensors or .gguf file")->required();
  cmd->add_option("--gpu", f->gpus,
                  "GPU(s) from the plan table (default: H100-SXM, A100-80G, L40S, RTX-3090, B200, "
                  "MI300X)")
      ->delimiter(',');
  cmd->add_option("--engine-flag", f->engine_flags,
                  "Engine flags to take into account, e.g. \"--quantization gptq\", \"--kv-cache-dtype fp8\", "
                  "\"--tensor-parallel-size 4\"")
      ->allow_extra_args(false);
  cmd->add_flag("--all-layers", f->all_layers, "One row per weight instead of grouping the decoder layers");
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f] { RunInspect(*f); });
  AddReportCommand(app);
}

}  // namespace lowbit::cli
