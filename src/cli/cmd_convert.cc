// `lowbit convert IN -o OUT --to FORMAT`: the flags of a ConvertJob (pipeline/convert_job.h), a
// progress bar per stage, and what changed as a table or JSON.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "pipeline/convert_job.h"

namespace lowbit::cli {
namespace {

struct ConvertOptions {
  ConvertJob job;
  bool json = false;
};

std::string Exp(double v) { return v == 0 ? "0" : fmt::format("{:.3e}", v); }

void Run(ConvertOptions& o) {
  std::unique_ptr<ProgressBar> bar;
  std::string bar_stage;
  o.job.progress = [&](std::string_view stage, size_t done, size_t total) {
    if (!bar || bar_stage != stage) {
      bar.reset();
      bar_stage = stage;
      bar = std::make_unique<ProgressBar>(bar_stage, total);
    }
    bar->Update(done, total);
  };
  const nlohmann::json r = RunConvertJob(o.job);
  bar.reset();
  if (o.json) {
    std::puts(r.dump(2).c_str());
    return;
  }
  std::vector<std::vector<std::string>> changed;
  for (const nlohmann::json& m : r["matrices"])
    if (m["max_abs_diff"].get<double>() != 0)
      changed.push_back({m["name"].get<std::string>(), m["from"].get<std::string>(), m["to"].get<std::string>(),
                         Exp(m["max_abs_diff"].get<double>()), Exp(m["rel_rms"].get<double>())});
  // The linears --scheme changed, grouped by what the format could not hold.
  std::map<std::pair<std::string, std::string>, size_t> reasons;  // (reason, to) -> linears
  for (const nlohmann::json& c : r.value("changed", nlohmann::json::array())) {
    std::string reason = c["reason"].get<std::string>();
    const std::string prefix = c["linear"].get<std::string>() + ": ";
    if (reason.starts_with(prefix)) reason.erase(0, prefix.size());
    ++reasons[{reason, c["to"].get<std::string>()}];
  }
  for (const auto& [key, n] : reasons)
    std::printf("%zu linear%s: %s -> %s\n", n, n == 1 ? "" : "s", key.first.c_str(),
                key.second == "dense" ? "stored dense" : ("quantized again as " + key.second).c_str());
  if (!reasons.empty()) std::puts("");
  if (!changed.empty()) {
    PrintTable({"matrix", "from", "to", "max |dw|", "rel RMS"}, changed);
    std::puts("");
  }
  const size_t matrices = r["matrices"].size();
  std::vector<std::vector<std::string>> rows = {
      {"output", fmt::format("{} ({}{})", o.job.out, r["to"].get<std::string>(),
                             r.contains("format") ? ", " + r["format"].get<std::string>() : "")},
      {"matrices read back", fmt::format("{} of {} identical to the input's{}", r["exact_matrices"].get<size_t>(),
                                         matrices, r["exact"].get<bool>() ? " (exact repack)" : "")},
      {"max |dw|", Exp(r["max_abs_diff"].get<double>())}};
  if (r.contains("compare")) {
    const nlohmann::json& c = r["compare"];
    rows.push_back({"KL(in || out) mean", fmt::format("{:.6f}", c["kld_mean"].get<double>())});
    rows.push_back({"top-1 agreement", fmt::format("{:.2f} %", 100 * c["top1_agreement"].get<double>())});
    rows.push_back({"PPL in / out", fmt::format("{:.4f} / {:.4f}", c["ppl_base"].get<double>(), c["ppl"].get<double>())});
  }
  PrintTable({"field", "value"}, rows);
}

}  // namespace

void AddConvertCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "Repack a quantized model into another format (lowbit, GPTQ, AWQ, compressed-tensors, GGUF), exactly "
                 "where the format holds its codes, and measure whatever changes");
  auto o = std::make_shared<ConvertOptions>();
  ConvertJob& j = o->job;
  cmd->add_option("in", j.in, "Quantized model: lowbit, GPTQ, AWQ or compressed-tensors folder, or .gguf")->required();
  cmd->add_option("-o,--out", j.out, "Output folder, or .gguf file")->required();
  cmd->add_option("--to", j.to, "lowbit, gptq, awq, compressed-tensors or gguf")->required();
  cmd->add_option("--format", j.format, "--to gptq: gptq (v1 zero points, default) or gptq_v2");
  cmd->add_option("--scheme", j.scheme,
                  "Engine formats: quantize again (RTN) the linears the format cannot hold as stored, with this scheme "
                  "(lossy: listed and measured)")
      ->check(SchemeName());
  cmd->add_option("--type", j.type, "--to gguf: type or mix for the tensors no ggml type holds as stored")
      ->default_val("Q8_0")
      ->check(GgufTypeName());
  cmd->add_option("--text", j.text, "Measure KL(in || out), top-1 agreement and both perplexities on this text");
  cmd->add_option("--tokenizer", j.tokenizer, "Tokenizer for --text (default: the input model's)");
  cmd->add_option("--ctx", j.ctx, "Context length for --text")->default_val(256)->check(Positive());
  cmd->add_option("--max-shard-size", j.max_shard, "Engine folders: largest safetensors shard")->default_val("5G");
  cmd->add_option("--threads", j.threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print JSON");
  AddAllowNonfiniteFlag(cmd, j.load);
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
