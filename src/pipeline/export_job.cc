#include "pipeline/export_job.h"

#include <filesystem>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/engine_export.h"
#include "io/gguf_export.h"
#include "io/gguf_mix.h"
#include "io/imatrix.h"
#include "pipeline/gguf_source.h"
#include "pipeline/session.h"
#include "tokenizer/gguf_vocab_export.h"

namespace lowbit {
namespace {

nlohmann::json ExportEngine(const ExportJob& job) {
  EngineExportOptions e;
  e.format = ParseEngineFormat(job.to);
  if (!job.format.empty()) {
    if (e.format != EngineFormat::kGptq || (job.format != "gptq" && job.format != "gptq_v2"))
      Fail("--format '{}': the formats are gptq (v1 zero points, the default) and gptq_v2 for --to gptq", job.format);
    e.gptq_v2 = job.format == "gptq_v2";
  }
  if (!job.scheme.empty()) e.scheme = ParseScheme(job.scheme);
  if (!job.requantize.empty()) e.requantize = ParseScheme(job.requantize);
  e.max_shard_bytes = ParseByteSize(job.max_shard, "--max-shard-size");
  if (!job.imatrix.empty() || !job.calib.empty() || job.pure || job.type != "Q8_0" ||
      !job.token_embedding_type.empty() || !job.output_tensor_type.empty())
    Fail("--imatrix, --calib, --pure, --type, --token-embedding-type and --output-tensor-type apply to GGUF "
         "exports; for a calibrated {} checkpoint run `lowbit quantize --save-as {}`", job.to, job.to);
  // A GGUF file goes out as the Hugging Face folder it was converted from: config.json and the tokenizer
  // written from its metadata, Q/K rows in Hugging Face's order.
  std::optional<GgufSourceFolder> gguf;
  StreamedModel opened;
  if (IsGgufFile(job.model)) {
    gguf.emplace(job.model, job.out, job.load);
  } else if (!std::filesystem::is_directory(job.model)) {
    Fail("{}: --to {} exports a Hugging Face folder (float or lowbit quantized) or a GGUF file", job.model, job.to);
  } else {
    opened = OpenModel(job.model, job.load);
  }
  StreamedModel& model = gguf ? gguf->model() : opened;
  const std::filesystem::path source_dir = gguf ? gguf->dir() : std::filesystem::path(job.model);
  // The recipe card travels with the weights: the source's, or what this export did.
  nlohmann::json card = nullptr;
  const std::filesystem::path source_card = std::filesystem::path(job.model) / "recipe.json";
  if (std::filesystem::exists(source_card)) card = ReadJsonFile(source_card);
  else if (e.scheme)
    card = {{"lowbit_version", LOWBIT_VERSION}, {"recipe", {{"method", "rtn"}, {"format", e.scheme->ToString()}}},
            {"source", job.model}};
  if (card.is_object()) {
    card["export"] = {{"to", EngineFormatName(e.format)}, {"format", job.format}};
    if (e.requantize) card["export"]["requantize"] = e.requantize->ToString();
  }
  const size_t layers = model.model.config.n_layers;
  if (job.progress) e.progress = [&](size_t done, size_t) { job.progress(done, layers, ""); };
  const EngineExportResult r = ExportEngineCheckpoint(model, source_dir, job.out, card, e);
  if (job.progress) job.progress(layers, layers, "");
  nlohmann::json changed = nlohmann::json::array();
  for (const ChangedLinear& l : r.changed) changed.push_back({{"linear", l.prefix}, {"reason", l.reason}, {"to", l.to}});
  return {{"out", job.out}, {"quant_method", r.quant_method}, {"format", r.format},
          {"quantized_linears", r.quantized_linears}, {"dense_linears", r.dense_linears},
          {"quantized_weights", r.quantized_weights}, {"quantized_bytes", r.quantized_bytes},
          {"bits_per_weight", r.bits_per_weight()}, {"file_bytes", r.file_bytes}, {"shards", r.shards},
          {"changed", changed}};
}

nlohmann::json ExportGgufFile(const ExportJob& job) {
  if (std::filesystem::path(job.out).extension() != ".gguf")
    Fail("export: -o '{}' must end in .gguf, or give --to gptq|awq|compressed-tensors for a folder", job.out);
  if (!job.calib.empty() && !job.imatrix.empty())
    Fail("export: --calib and --imatrix cannot be used together (GPTQ weighs by its own Hessian)");
  // Bad types fail before the model is read.
  const std::string type_name(FindGgufFileType(job.type).name);
  GgufExportOptions e;
  if (!job.token_embedding_type.empty())
    e.table_types.token_embedding = ParseGgufTensorType(job.token_embedding_type, "--token-embedding-type");
  if (!job.output_tensor_type.empty())
    e.table_types.output = ParseGgufTensorType(job.output_tensor_type, "--output-tensor-type");
  const std::filesystem::path vocabulary = GgufVocabularyFile(job.tokenizer.empty() ? job.model : job.tokenizer);
  // Read as stored: 16-bit matrices and tables are encoded row by row, never widened whole (the
  // calibration's GPTQ works on fp32 blocks).
  LoadOptions load = job.load;
  load.keep_16bit = job.calib.empty();
  StreamedModel model = OpenModel(job.model, load);
  e.type = job.type;
  e.pure = job.pure;
  e.keep_source_grids = job.keep_source_grids;
  e.name = job.name;
  e.threads = job.threads;
  e.metadata = GgufVocabularyFor(vocabulary, model.model.config);
  if (!job.calib.empty()) {
    const std::unique_ptr<Tokenizer> tokenizer = LoadTokenizerFor(model.model.config, job.model, job.tokenizer);
    e.calibration = CalibrationWindows(*tokenizer, ReadTextFile(job.calib), job.calib, job.calib_samples,
                                       job.calib_len, job.seed);
    e.gptq.damp = job.damp;
  }
  ImportanceMatrix imatrix;
  if (!job.imatrix.empty()) {
    imatrix = ReadImatrix(job.imatrix);
    e.imatrix = &imatrix.columns;
  }
  if (job.progress) e.progress = job.progress;
  const GgufExportResult r = ExportGguf(model, job.out, e);
  nlohmann::json tensors = nlohmann::json::array();
  for (const GgufExportedTensor& t : r.tensors)
    tensors.push_back({{"name", t.name}, {"type", GgmlTypeName(t.ggml_type)}, {"ne", t.ne}, {"bytes", t.bytes}});
  return {{"out", job.out}, {"type", type_name}, {"architecture", r.architecture}, {"file_type", r.file_type},
          {"file_bytes", r.file_bytes}, {"weights", r.weights}, {"bits_per_weight", r.bits_per_weight()},
          {"tensors", tensors}};
}

}  // namespace

nlohmann::json RunExportJob(const ExportJob& job) {
  return job.to.empty() || job.to == "gguf" ? ExportGgufFile(job) : ExportEngine(job);
}

}  // namespace lowbit
