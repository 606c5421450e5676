// `lowbit export MODEL -o FILE.gguf --type T`: a GGUF file llama.cpp runs, from any model lowbit
// opens, with llama-quantize's tensor type mixes (io/gguf_export.h).
#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "pipeline/session.h"
#include "core/file_util.h"
#include "core/error.h"
#include "core/json_util.h"
#include "io/engine_export.h"
#include "io/gguf_export.h"
#include "io/gguf_mix.h"
#include "io/imatrix.h"
#include "io/model_loader.h"
#include "tokenizer/gguf_vocab_export.h"

namespace lowbit::cli {
namespace {

struct ExportOptions {
  std::string model, out, type = "Q8_0", tokenizer, name, imatrix, calib, to, format, scheme, max_shard = "5G";
  bool pure = false, json = false;
  LoadOptions load;  // --allow-nonfinite
  size_t threads = 0, calib_samples = 128, calib_len = 256;
  uint64_t seed = 0;
  double damp = 0.01;
};

// --to gptq|awq|compressed-tensors: a folder vLLM and transformers load (io/engine_export.h).
void RunEngineExport(const ExportOptions& o) {
  EngineExportOptions e;
  e.format = ParseEngineFormat(o.to);
  if (!o.format.empty()) {
    if (e.format != EngineFormat::kGptq || (o.format != "gptq" && o.format != "gptq_v2"))
      Fail("--format '{}': the formats are gptq (v1 zero points, the default) and gptq_v2 for --to gptq", o.format);
    e.gptq_v2 = o.format == "gptq_v2";
  }
  if (!o.scheme.empty()) e.scheme = ParseScheme(o.scheme);
  e.max_shard_bytes = ParseByteSize(o.max_shard, "--max-shard-size");
  if (!o.imatrix.empty() || !o.calib.empty() || o.pure || o.type != "Q8_0")
    Fail("--imatrix, --calib, --pure and --type apply to GGUF exports; for a calibrated {} checkpoint run `lowbit "
         "quantize --save-as {}`", o.to, o.to);
  if (!std::filesystem::is_directory(o.model))
    Fail("{}: --to {} exports a Hugging Face folder (float or lowbit quantized), which takes config.json and the "
         "tokenizer from it", o.model, o.to);
  StreamedModel model = OpenModel(o.model, o.load);
  // The recipe card travels with the weights: the source's, or what this export did.
  nlohmann::json card = nullptr;
  const std::filesystem::path source_card = std::filesystem::path(o.model) / "recipe.json";
  if (std::filesystem::exists(source_card)) card = ReadJsonFile(source_card);
  else if (e.scheme) card = {{"lowbit_version", LOWBIT_VERSION}, {"recipe", {{"method", "rtn"}, {"format", e.scheme->ToString()}}}, {"source", o.model}};
  if (card.is_object()) card["export"] = {{"to", EngineFormatName(e.format)}, {"format", o.format}};
  ProgressBar bar("export", model.model.config.n_layers);
  e.progress = [&bar](size_t done, size_t) { bar.Update(done); };
  const EngineExportResult r = ExportEngineCheckpoint(model, o.model, o.out, card, e);
  bar.Update(model.model.config.n_layers);
  if (o.json) {
    std::puts(nlohmann::json({{"out", o.out}, {"quant_method", r.quant_method}, {"format", r.format},
                              {"quantized_linears", r.quantized_linears}, {"dense_linears", r.dense_linears},
                              {"quantized_weights", r.quantized_weights}, {"quantized_bytes", r.quantized_bytes},
                              {"bits_per_weight", r.bits_per_weight()}, {"file_bytes", r.file_bytes}, {"shards", r.shards}})
                  .dump(2)
                  .c_str());
    return;
  }
  PrintTable({"field", "value"},
             {{"output", o.out},
              {"quant_method", r.quant_method},
              {"format", r.format},
              {"linears", fmt::format("{} quantized, {} left dense", r.quantized_linears, r.dense_linears)},
              {"bits/weight (quantized linears)", fmt::format("{:.4f}", r.bits_per_weight())},
              {"safetensors", fmt::format("{:.2f} MiB in {} shard{}", static_cast<double>(r.file_bytes) / (1 << 20),
                                          r.shards, r.shards == 1 ? "" : "s")}});
}

void Run(const ExportOptions& o) {
  if (!o.to.empty() && o.to != "gguf") return RunEngineExport(o);
  if (std::filesystem::path(o.out).extension() != ".gguf")
    Fail("export: -o '{}' must end in .gguf, or give --to gptq|awq|compressed-tensors for a folder", o.out);
  FindGgufFileType(o.type);  // a bad --type fails before the model is read
  StreamedModel model = OpenModel(o.model, o.load);
  GgufExportOptions e;
  e.type = o.type;
  e.pure = o.pure;
  e.name = o.name;
  e.threads = o.threads;
  e.metadata = GgufVocabularyFor(o.tokenizer.empty() ? o.model : o.tokenizer, model.model.config);
  if (!o.calib.empty()) {
    if (!o.imatrix.empty()) Fail("export: --calib and --imatrix cannot be used together (GPTQ weighs by its own Hessian)");
    const std::unique_ptr<Tokenizer> tokenizer = LoadTokenizerFor(model.model.config, o.model, o.tokenizer);
    e.calibration = CalibrationWindows(*tokenizer, ReadTextFile(o.calib), o.calib, o.calib_samples, o.calib_len, o.seed);
    e.gptq.damp = o.damp;
  }
  ImportanceMatrix imatrix;
  if (!o.imatrix.empty()) {
    imatrix = ReadImatrix(o.imatrix);
    e.imatrix = &imatrix.columns;
  }
  std::unique_ptr<ProgressBar> bar;  // the tensor count is known once the export has planned the file
  e.progress = [&bar](size_t done, size_t total, std::string_view tensor) {
    if (!bar) bar = std::make_unique<ProgressBar>("export", total);
    bar->Update(done, tensor);
  };
  const GgufExportResult r = ExportGguf(model, o.out, e);
  bar.reset();  // done: the bar gives its line back before the table

  std::map<std::string, std::pair<size_t, uint64_t>> by_type;  // type -> (tensors, bytes)
  for (const GgufExportedTensor& t : r.tensors) {
    auto& [count, bytes] = by_type[GgmlTypeName(t.ggml_type)];
    ++count;
    bytes += t.bytes;
  }
  if (o.json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const GgufExportedTensor& t : r.tensors)
      tensors.push_back({{"name", t.name}, {"type", GgmlTypeName(t.ggml_type)}, {"ne", t.ne}, {"bytes", t.bytes}});
    std::puts(nlohmann::json({{"out", o.out}, {"type", FindGgufFileType(o.type).name}, {"architecture", r.architecture},
                              {"file_type", r.file_type}, {"file_bytes", r.file_bytes}, {"weights", r.weights},
                              {"bits_per_weight", r.bits_per_weight()}, {"tensors", tensors}})
                  .dump(2)
                  .c_str());
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [type, v] : by_type)
    rows.push_back({type, std::to_string(v.first), fmt::format("{:.2f} MiB", static_cast<double>(v.second) / (1 << 20))});
  PrintTable({"ggml type", "tensors", "bytes"}, rows);
  std::printf("\nWrote %s: %s (%s, general.file_type %u), %.2f MiB, %.4f bits/weight over %llu weights.\n",
              o.out.c_str(), std::string(FindGgufFileType(o.type).name).c_str(), r.architecture.c_str(), r.file_type,
              static_cast<double>(r.file_bytes) / (1 << 20), r.bits_per_weight(),
              static_cast<unsigned long long>(r.weights));
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a model as a GGUF file for llama.cpp, or a GPTQ / AWQ / compressed-tensors "
                                            "folder for vLLM and transformers");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("model", o->model, "Hugging Face folder, lowbit quantized folder, .gguf or llama2.c .bin")->required();
  cmd->add_option("-o,--out", o->out, "Output file (.gguf) or folder (--to)")->required();
  cmd->add_option("--to", o->to, "gguf (default), gptq, awq or compressed-tensors (a folder vLLM and transformers load)");
  cmd->add_option("--format", o->format, "--to gptq: gptq (v1 zero points, default) or gptq_v2 (true zero points)");
  cmd->add_option("--scheme", o->scheme, "--to ...: quantize a float model's block linears with RTN first (e.g. int4:g128)");
  cmd->add_option("--max-shard-size", o->max_shard, "--to ...: largest safetensors shard")->default_val("5G");
  cmd->add_option("--type", o->type,
                  fmt::format("GGUF file type, case-insensitive: {}", fmt::join(GgufFileTypeNames(), ", ")))
      ->default_val("Q8_0");
  cmd->add_flag("--pure", o->pure, "Every matrix in the type's base type (llama-quantize --pure)");
  cmd->add_option("--imatrix", o->imatrix, "Importance matrix (llama.cpp's imatrix.gguf, or `lowbit imatrix` output)");
  cmd->add_option("--calib", o->calib,
                  "Calibration text: GPTQ onto each tensor's ggml grid, block by block (a calibrated GGUF)");
  cmd->add_option("--calib-samples", o->calib_samples, "Calibration windows")->default_val(128)->check(Positive());
  cmd->add_option("--calib-len", o->calib_len, "Tokens per calibration window")->default_val(256)->check(Positive());
  cmd->add_option("--seed", o->seed, "Calibration sampling seed")->default_val(0);
  cmd->add_option("--damp", o->damp, "GPTQ damping (fraction of the mean Hessian diagonal)")->default_val(0.01);
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.model or .gguf vocabulary (default: the model's own)");
  cmd->add_option("--name", o->name, "general.name (default: the model's folder or file name)");
  cmd->add_option("--threads", o->threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print JSON");
  AddAllowNonfiniteFlag(cmd, o->load);
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
