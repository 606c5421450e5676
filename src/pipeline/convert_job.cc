#include "pipeline/convert_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/json_util.h"
#include "eval/weight_diff.h"
#include "io/quantized_checkpoint.h"
#include "pipeline/evaluate.h"
#include "pipeline/export_job.h"
#include "pipeline/gguf_source.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

// A lowbit folder holds every scheme lowbit reads, so this target is always a repack.
nlohmann::json WriteLowbitFolder(const ConvertJob& job) {
  // A GGUF file: its codes as stored, in the Hugging Face folder it was converted from (gguf_source.h).
  std::optional<GgufSourceFolder> gguf;
  if (IsGgufFile(job.in)) gguf.emplace(job.in, job.out, job.load);
  const Model model = gguf ? std::move(gguf->model().model) : LoadModel(job.in, job.load);
  const fs::path source_dir = gguf ? gguf->dir() : fs::path(job.in);
  nlohmann::json card = fs::exists(fs::path(job.in) / "recipe.json")
                            ? ReadJsonFile(fs::path(job.in) / "recipe.json")
                            : nlohmann::json{{"lowbit_version", LOWBIT_VERSION}, {"source", job.in}};
  card["convert"] = {{"from", job.in}, {"to", "lowbit"}};
  size_t quantized = 0, dense = 0;
  const auto count = [&](const Linear& l) { ++(l.quantized() ? quantized : dense); };
  for (const LayerWeights& layer : model.weights.layers)
    for (const ConstBlockLinear& bl : BlockLinears(layer)) count(*bl.linear);
  if (!model.config.tie_embeddings) count(model.weights.lm_head);
  SaveQuantizedModel(model, job.out, source_dir, card);
  return {{"out", job.out}, {"quantized_linears", quantized}, {"dense_linears", dense}};
}

nlohmann::json MatrixJson(const MatrixDiff& m) {
  return {{"name", m.name}, {"from", m.from}, {"to", m.to}, {"elements", m.elements},
          {"max_abs_diff", m.max_abs_diff}, {"rel_rms", m.rel_rms}};
}

}  // namespace

nlohmann::json RunConvertJob(const ConvertJob& job) {
  std::string to = job.to;
  std::transform(to.begin(), to.end(), to.begin(), [](unsigned char c) { return std::tolower(c); });
  if (to == "compressed_tensors") to = "compressed-tensors";
  if (to != "lowbit" && to != "gptq" && to != "awq" && to != "compressed-tensors" && to != "gguf")
    Fail("convert: --to '{}': the targets are lowbit, gptq, awq, compressed-tensors and gguf", job.to);
  if (!job.scheme.empty() && (to == "lowbit" || to == "gguf"))
    Fail("convert: --scheme re-quantizes what an engine folder cannot hold; {}", to == "lowbit"
         ? "a lowbit folder holds every scheme as stored"
         : "a GGUF file encodes what no ggml type holds as stored with --type's mix");
  if (!job.text.empty() && !fs::is_regular_file(job.text)) Fail("convert: --text '{}' is not a file", job.text);
  const auto stage = [&](std::string_view name) {
    return [&job, name](size_t done, size_t total) {
      if (job.progress) job.progress(name, done, total);
    };
  };

  nlohmann::json r;
  if (to == "lowbit") {
    if (!fs::is_directory(job.in) && !IsGgufFile(job.in))
      Fail("{}: --to lowbit converts a Hugging Face folder (GPTQ, AWQ, compressed-tensors or lowbit) or a GGUF file",
           job.in);
    r = WriteLowbitFolder(job);
  } else {
    ExportJob e;
    e.model = job.in;
    e.out = job.out;
    e.to = to;
    e.format = job.format;
    e.requantize = job.scheme;
    e.max_shard = job.max_shard;
    e.threads = job.threads;
    e.load = job.load;
    if (to == "gguf") {
      e.type = job.type;
      e.keep_source_grids = true;
    }
    e.progress = [&](size_t done, size_t total, std::string_view) { stage("convert")(done, total); };
    try {
      r = RunExportJob(e);
    } catch (const Error& error) {
      if (!job.scheme.empty() || to == "gguf") throw;
      throw Error(fmt::format("{}\n(convert repacks exactly or not at all; --scheme S quantizes what {} cannot hold "
                              "again with S, and measures the change)", error.what(), to),
                  error.file(), error.field());
    }
  }
  r["to"] = to;

  // Measured, not assumed: both models read again, matrix by matrix.
  StreamedModel from = OpenModel(job.in, job.load), written = OpenModel(job.out, job.load);
  const std::vector<MatrixDiff> diffs = DiffWeights(from, written, stage("measure"));
  nlohmann::json matrices = nlohmann::json::array();
  double max_abs = 0;
  size_t exact = 0;
  for (const MatrixDiff& m : diffs) {
    matrices.push_back(MatrixJson(m));
    max_abs = std::max(max_abs, m.max_abs_diff);
    exact += m.exact();
  }
  r["matrices"] = std::move(matrices);
  r["exact_matrices"] = exact;
  r["exact"] = exact == diffs.size();
  r["max_abs_diff"] = max_abs;

  if (!job.text.empty()) {
    CompareOptions c;
    c.base = job.in;
    c.model = job.out;
    c.text = job.text;
    c.tokenizer = job.tokenizer;
    c.ctx = job.ctx;
    c.threads = job.threads;
    c.load = job.load;
    r["compare"] = CompareJson(RunCompare(c, stage("compare")).result);
  }
  return r;
}

}  // namespace lowbit
