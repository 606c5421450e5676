// `lowbit export MODEL -o FILE.gguf --type T` or `--to gptq|awq|compressed-tensors`: the flags of an
// ExportJob (pipeline/export_job.h), a progress bar, and its result as a table or JSON.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "io/gguf_mix.h"
#include "pipeline/export_job.h"

namespace lowbit::cli {
namespace {

struct ExportOptions {
  ExportJob job;
  bool json = false;
};

void Run(ExportOptions& o) {
  std::unique_ptr<ProgressBar> bar;  // the total is known once the export has planned its output
  o.job.progress = [&bar](size_t done, size_t total, std::string_view tensor) {
    if (!bar) bar = std::make_unique<ProgressBar>("export", total);
    bar->Update(done, tensor);
  };
  const nlohmann::json r = RunExportJob(o.job);
  bar.reset();  // done: the bar gives its line back before the table
  if (o.json) {
    std::puts(r.dump(2).c_str());
    return;
  }
  const double mib = r["file_bytes"].get<double>() / (1 << 20);
  if (!r.contains("tensors")) {  // an engine folder
    const size_t shards = r["shards"].get<size_t>();
    PrintTable({"field", "value"},
               {{"output", o.job.out},
                {"quant_method", r["quant_method"].get<std::string>()},
                {"format", r["format"].get<std::string>()},
                {"linears", fmt::format("{} quantized, {} left dense", r["quantized_linears"].get<size_t>(),
                                        r["dense_linears"].get<size_t>())},
                {"bits/weight (quantized linears)", fmt::format("{:.4f}", r["bits_per_weight"].get<double>())},
                {"safetensors", fmt::format("{:.2f} MiB in {} shard{}", mib, shards, shards == 1 ? "" : "s")}});
    return;
  }
  std::map<std::string, std::pair<size_t, uint64_t>> by_type;  // type -> (tensors, bytes)
  for (const nlohmann::json& t : r["tensors"]) {
    auto& [count, bytes] = by_type[t["type"].get<std::string>()];
    ++count;
    bytes += t["bytes"].get<uint64_t>();
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [type, v] : by_type)
    rows.push_back({type, std::to_string(v.first), fmt::format("{:.2f} MiB", static_cast<double>(v.second) / (1 << 20))});
  PrintTable({"ggml type", "tensors", "bytes"}, rows);
  std::printf("\nWrote %s: %s (%s, general.file_type %u), %.2f MiB, %.4f bits/weight over %llu weights.\n",
              o.job.out.c_str(), r["type"].get<std::string>().c_str(), r["architecture"].get<std::string>().c_str(),
              r["file_type"].get<unsigned>(), mib, r["bits_per_weight"].get<double>(),
              static_cast<unsigned long long>(r["weights"].get<uint64_t>()));
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a model as a GGUF file for llama.cpp, or a GPTQ / AWQ / compressed-tensors "
                                            "folder for vLLM and transformers");
  auto o = std::make_shared<ExportOptions>();
  ExportJob& j = o->job;
  cmd->add_option("model", j.model, "Hugging Face folder, lowbit quantized folder, .gguf or llama2.c .bin")->required();
  cmd->add_option("-o,--out", j.out, "Output file (.gguf) or folder (--to)")->required();
  cmd->add_option("--to", j.to, "gguf (default), gptq, awq or compressed-tensors (a folder vLLM and transformers load)");
  cmd->add_option("--format", j.format, "--to gptq: gptq (v1 zero points, default) or gptq_v2 (true zero points)");
  cmd->add_option("--scheme", j.scheme, "--to ...: quantize a float model's block linears with RTN first (e.g. int4:g128)")
      ->check(SchemeName());
  cmd->add_option("--max-shard-size", j.max_shard, "--to ...: largest safetensors shard")->default_val("5G");
  cmd->add_option("--type", j.type,
                  fmt::format("GGUF file type, case-insensitive: {}", fmt::join(GgufFileTypeNames(), ", ")))
      ->default_val("Q8_0")
      ->check(GgufTypeName());
  cmd->add_flag("--pure", j.pure, "Every matrix in the type's base type (llama-quantize --pure)");
  cmd->add_option("--token-embedding-type", j.token_embedding_type,
                  "ggml type of token_embd, past the mix (llama-quantize's option; e.g. Q6_K)");
  cmd->add_option("--output-tensor-type", j.output_tensor_type,
                  "ggml type of the output matrix, past the mix (llama-quantize's option; e.g. Q4_K)");
  cmd->add_option("--imatrix", j.imatrix, "Importance matrix (llama.cpp's imatrix.gguf, or `lowbit imatrix` output)");
  cmd->add_option("--calib", j.calib,
                  "Calibration text: GPTQ onto each tensor's ggml grid, block by block (a calibrated GGUF)");
  cmd->add_option("--calib-samples", j.calib_samples, "Calibration windows")->default_val(128)->check(Positive());
  cmd->add_option("--calib-len", j.calib_len, "Tokens per calibration window")->default_val(256)->check(Positive());
  cmd->add_option("--seed", j.seed, "Calibration sampling seed")->default_val(0);
  cmd->add_option("--damp", j.damp, "GPTQ damping (fraction of the mean Hessian diagonal)")
      ->default_val(0.01)
      ->check(NonNegative());
  cmd->add_option("--tokenizer", j.tokenizer, "tokenizer.model or .gguf vocabulary (default: the model's own)");
  cmd->add_option("--name", j.name, "general.name (default: the model's folder or file name)");
  cmd->add_option("--threads", j.threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print JSON");
  AddAllowNonfiniteFlag(cmd, j.load);
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
