#include "pipeline/quantize_job.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "core/checksum.h"
#include "core/error.h"
#include "core/file_util.h"
#include "eval/compare.h"
#include "io/compressed_tensors.h"
#include "io/engine_export.h"
#include "io/gguf_export.h"
#include "io/gguf_mix.h"
#include "io/gguf_pack.h"
#include "io/quantized_checkpoint.h"
#include "io/run_checkpoint.h"
#include "model/calibration.h"
#include "model/ptq.h"
#include "pipeline/gguf_source.h"
#include "pipeline/session.h"
#include "quant/registry.h"
#include "tokenizer/gguf_vocab_export.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

// --save-as gptq|gptq_v2|awq|compressed-tensors: the engine format to write; nullopt otherwise.
std::optional<EngineExportOptions> EngineTarget(const std::string& save_as) {
  if (save_as != "gptq" && save_as != "gptq_v2" && save_as != "awq" && save_as != "compressed-tensors")
    return std::nullopt;
  EngineExportOptions e;
  e.gptq_v2 = save_as == "gptq_v2";
  e.format = ParseEngineFormat(e.gptq_v2 ? "gptq" : save_as);
  return e;
}

// --save-as gguf:T: the GGUF file type, whose base type's grid the recipe must quantize onto exactly
// (Q4_0 = int4:g32:scale=f16, ...), so the calibrated codes are the file's codes. nullptr for
// --save-as lowbit.
const GgufFileType* GgufTarget(const std::string& save_as, const std::string& out) {
  if (save_as == "lowbit" || EngineTarget(save_as)) return nullptr;
  if (!save_as.starts_with("gguf:"))
    Fail("--save-as '{}': expected lowbit, gguf:TYPE (e.g. gguf:Q4_0), gptq, gptq_v2, awq or compressed-tensors",
         save_as);
  const GgufFileType& t = FindGgufFileType(save_as.substr(5));
  if (!GgufGridScheme(t.base_type))
    Fail("--save-as {}: --save-as writes the group-32 grids (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4); a calibrated {} is "
         "`lowbit export MODEL -o OUT.gguf --type {} --calib FILE` (GPTQ onto ggml's super-blocks)",
         save_as, t.name, t.name);
  if (std::filesystem::path(out).extension() != ".gguf") Fail("--save-as {}: -o '{}' must end in .gguf", save_as, out);
  return &t;
}

// Every format of the recipe must be the target's grid: anything else would be quantized again.
void CheckGgufRecipe(const Recipe& r, const GgufFileType& t) {
  const std::string grid = *GgufGridScheme(t.base_type);
  auto check = [&](const std::string& format, const std::string& where) {
    if (ParseScheme(format).ToString() != grid)
      Fail("--save-as gguf:{}: {} '{}' has no exact home in {} (its grid is {}); drop --format to use it", t.name, where,
           format, t.name, grid);
  };
  check(r.format, "format");
  for (const RecipeOverride& ov : r.overrides) check(ov.format, "override '" + ov.match + "' format");
  if (!r.act_format.empty()) Fail("--save-as gguf:{}: GGUF has no activation quantization (act_format)", t.name);
  if (r.rotate) Fail("--save-as gguf:{}: rotate: llama.cpp has no online Hadamard rotation of down_proj's input", t.name);
  if (r.lm_head != "none" && !r.lm_head.empty())
    Fail("--save-as gguf:{}: lm_head '{}': the file type's mix chooses output.weight's type", t.name, r.lm_head);
}

// Every scheme the recipe writes must have an exact home in the engine format, and the recipe may not
// simulate what the engines do not run (activation quantization, online rotations, outlier columns).
void CheckEngineRecipe(const Recipe& r, const EngineExportOptions& e) {
  const std::string target = fmt::format("--save-as {}", EngineFormatName(e.format));
  std::optional<InputQuant> input;
  if (!r.act_format.empty()) {
    if (e.format != EngineFormat::kCompressedTensors)
      Fail("{}: act_format '{}': GPTQ and AWQ are weight-only; W8A8 goes to --save-as compressed-tensors", target,
           r.act_format);
    const QuantScheme act = ParseScheme(r.act_format);
    input = InputQuant{act, HasStaticScale(act) ? 1.0f : 0.0f};  // the run calibrates it (or asks for --calib)
  }
  auto check = [&](const std::string& format, const std::string& where) {
    if (e.format == EngineFormat::kCompressedTensors) (void)CompressedTensorsFormatOf(ParseScheme(format), input, where);
    else CheckEngineScheme(e.format, ParseScheme(format), where);
  };
  if (r.lm_head != "none" && !r.lm_head.empty()) {
    if (e.format == EngineFormat::kAwq) Fail("{}: lm_head '{}': AWQ checkpoints keep lm_head in full precision", target, r.lm_head);
    check(r.lm_head, fmt::format("{}: lm_head", target));
  }
  check(r.format, fmt::format("{}: format", target));
  for (size_t i = 0; i < r.overrides.size(); ++i) check(r.overrides[i].format, fmt::format("{}: overrides[{}].format", target, i));
  if (r.rotate) Fail("{}: rotate: the engines have no online Hadamard rotation of down_proj's input", target);
}

// Thrown by the block hook for stop_after: the run's state is saved, the call returns cleanly.
struct StopRequested {
  size_t blocks;
};

}  // namespace

std::string DefaultFormatFor(const std::string& save_as, const std::string& out) {
  const GgufFileType* gguf = GgufTarget(save_as, out);
  return gguf ? std::string(*GgufGridScheme(gguf->base_type)) : std::string();
}

QuantizeOutcome RunQuantizeJob(const QuantizeJob& o) {
  const auto start = std::chrono::steady_clock::now();
  const GgufFileType* gguf = GgufTarget(o.save_as, o.out);
  const std::optional<EngineExportOptions> engine = EngineTarget(o.save_as);
  Recipe recipe = o.recipe;
  if (gguf && recipe.format.empty()) recipe.format = *GgufGridScheme(gguf->base_type);
  if (recipe.format.empty()) Fail("quantize: the recipe has no format (e.g. int4:g128)");
  if (!recipe.lm_head.empty() && recipe.lm_head != "none") {
    try {
      (void)ParseScheme(recipe.lm_head);
    } catch (const Error& e) {
      Fail("quantize: lm_head '{}' (a format, or none): {}", recipe.lm_head, e.what());
    }
  }
  if (gguf) CheckGgufRecipe(recipe, *gguf);
  if (engine) CheckEngineRecipe(recipe, *engine);
  GgufTableTypes table_types;
  if (!o.token_embedding_type.empty() || !o.output_tensor_type.empty()) {
    if (!gguf) Fail("--token-embedding-type and --output-tensor-type apply to --save-as gguf:TYPE");
    if (!o.token_embedding_type.empty())
      table_types.token_embedding = ParseGgufTensorType(o.token_embedding_type, "--token-embedding-type");
    if (!o.output_tensor_type.empty())
      table_types.output = ParseGgufTensorType(o.output_tensor_type, "--output-tensor-type");
  }
  if (std::filesystem::exists(o.out)) Fail("{}: already exists; choose a new output folder", o.out);
  const std::filesystem::path partial = o.out + ".partial";  // the state of an unfinished run
  RemoveStaleTemporaries(o.out);  // OUT.tmp-<pid> of a run killed while writing OUT
  // A state without progress.json is a run killed during its first save: nothing to continue.
  if (std::filesystem::exists(partial / "progress.json") && !o.resume)
    Fail("{}: an interrupted run left its state here; add --resume to continue it, or delete it", partial.string());
  // A tokenizer is needed only to read calibration or evaluation text (synthetic models have none).
  const bool needs_text = !recipe.calib_file.empty() || !o.eval.empty();
  // The source is read block by block as the run reaches each block (one block in fp32 at a time). A GGUF
  // file written as a folder is the Hugging Face folder it came from (config.json and tokenizer from its
  // metadata, Q/K rows in Hugging Face's order).
  std::optional<GgufSourceFolder> gguf_source;
  StreamedModel opened;
  if (!gguf && IsGgufFile(o.model))
    gguf_source.emplace(o.model, o.out, o.load);
  else
    opened = OpenModel(o.model, o.load);
  StreamedModel& source = gguf_source ? gguf_source->model() : opened;
  Model& model = source.model;
  const std::filesystem::path source_dir = gguf_source                            ? gguf_source->dir()
                                           : std::filesystem::is_directory(o.model) ? std::filesystem::path(o.model)
                                                                                    : std::filesystem::path();
  // Before any work, not after it: the output can be written, and (GGUF) the vocabulary exists.
  std::vector<GgufKeyValue> vocabulary;
  if (gguf) vocabulary = GgufVocabularyFor(o.model, model.config);
  else CheckQuantizedModelTarget(model.config, o.out, source_dir);
  const std::unique_ptr<Tokenizer> tokenizer = needs_text ? LoadTokenizerFor(model.config, o.model, "") : nullptr;
  recipe.lm_head = ResolveLmHead(recipe, !gguf && !engine, model.config.tie_embeddings);

  QuantizeRequest req;
  req.method = recipe.method;
  req.method_config = recipe.config;
  req.scheme = ParseScheme(recipe.format);
  if (!recipe.act_format.empty()) req.act_scheme = ParseScheme(recipe.act_format);
  req.threads = o.threads;
  if (!o.max_ram.empty()) {
    req.max_activation_bytes = ParseByteSize(o.max_ram, "--max-ram");
    req.spill_dir = std::filesystem::absolute(o.out).parent_path();  // the output's disk, not a small /tmp
  }
  req.rotate = recipe.rotate;
  req.rotate_seed = recipe.rotate_seed;
  for (const RecipeOverride& ov : recipe.overrides)
    req.overrides.push_back({ov.match, ParseScheme(ov.format),
                             ov.method.empty() ? std::nullopt : std::optional<std::string>(ov.method), ov.config});
  req.ignore = recipe.ignore;
  if (recipe.lm_head != "none") req.lm_head = ParseScheme(recipe.lm_head);
  req.read_layer = source.read_layer;
  nlohmann::json calib_card = nullptr;
  if (!recipe.calib_file.empty()) {
    const std::string text = ReadTextFile(recipe.calib_file);
    req.calibration = CalibrationWindows(*tokenizer, text, recipe.calib_file, recipe.calib_samples, recipe.calib_len,
                                         recipe.seed);
    calib_card = {{"file", recipe.calib_file}, {"bytes", text.size()}, {"fnv1a64", fmt::format("{:016x}", Fnv1a64(text))},
                  {"samples", recipe.calib_samples}, {"length", recipe.calib_len}, {"seed", recipe.seed}};
  }
  const nlohmann::json run = {{"recipe", recipe.ToJson()}, {"calibration", calib_card}, {"source", o.model}};
  std::optional<BlockCheckpoint> resumed;
  if (o.resume) {
    resumed = LoadRunCheckpoint(partial, run, model);
    req.resume = &*resumed;
  }
  // A checkpoint writes the finished blocks so far: worth it once a crash would lose more work
  // than the write costs, and never after the last block (the output follows at once).
  auto last_save = std::chrono::steady_clock::now();
  req.on_block_done = [&](const Model& model, const BlockCheckpoint& state) {
    const bool stop = o.stop_after > 0 && state.next_layer >= o.stop_after;
    const auto now = std::chrono::steady_clock::now();
    const bool due = std::chrono::duration<double>(now - last_save).count() >= o.checkpoint_every &&
                     state.next_layer < model.config.n_layers;
    if (stop || due) {
      SaveRunCheckpoint(partial, model, state, run, source_dir);
      last_save = now;
    }
    if (stop) throw StopRequested{state.next_layer};
  };
  const size_t blocks = model.config.n_layers;
  if (o.progress) req.progress = [&](size_t layer, const std::string& tensor) { o.progress(layer, blocks, tensor); };
  QuantizeReport report;
  try {
    report = QuantizeModel(model, req);
  } catch (const StopRequested& stop) {
    return {nullptr, stop.blocks, partial};
  }
  if (o.progress) o.progress(blocks, blocks, "");

  nlohmann::json card = {{"lowbit_version", LOWBIT_VERSION}, {"recipe", recipe.ToJson()}, {"calibration", calib_card},
                         {"source", o.model}, {"scheme", req.scheme.ToString()}};
  double weights = 0, bits = 0;
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorReport& t : report.tensors) {
    tensors.push_back({{"name", t.name}, {"scheme", t.scheme}, {"seconds", t.seconds}, {"weight_mse", t.weight_mse},
                       {"output_mse", t.output_mse}});
  }
  for (const LayerWeights& lw : model.weights.layers)
    for (const ConstBlockLinear& bl : BlockLinears(lw)) {
      weights += static_cast<double>(bl.linear->rows() * bl.linear->cols());
      bits += 8.0 * static_cast<double>(bl.linear->storage_bytes());
    }
  card["tensors"] = tensors;
  if (report.rotated) card["rotation"] = {{"seed", recipe.rotate_seed}, {"down_proj_hadamard_block", report.rotation_down_block}};
  if (report.outlier_columns > 0) card["outlier_columns"] = report.outlier_columns;
  if (report.uncalibrated_linears > 0) card["uncalibrated_expert_linears"] = report.uncalibrated_linears;
  if (!report.awq_alphas.empty()) {
    nlohmann::json alphas = nlohmann::json::object();
    for (const auto& [input, alpha] : report.awq_alphas) alphas[input] = alpha;
    card["awq_alpha"] = alphas;
  }
  card["bits_per_weight"] = bits / weights;
  card["seconds"] = {{"total", report.total_seconds}, {"calibration", report.calibration_seconds},
                     {"layers", report.layer_seconds}};
  card["activations"] = {{"peak_bytes", report.activation_peak_bytes}, {"spilled_bytes", report.activation_spilled_bytes}};
  if (!o.eval.empty()) {
    // The base model is loaded whole, now that the quantization no longer needs the memory.
    const Model base = LoadModel(o.model, o.load);
    const std::vector<int32_t> tokens = TokenizeFile(*tokenizer, o.eval);
    const ChunkPlan plan = PlanChunks(tokens.size(), o.eval_ctx);
    Engine eb(base, o.threads), eq(model, o.threads);
    const CompareResult r = CompareModels(eb, eq, tokens, plan, AddedBos(*tokenizer));
    card["eval"] = {{"file", o.eval}, {"ctx", o.eval_ctx}, {"ppl_base", r.ppl_base}, {"ppl", r.ppl},
                    {"kld_mean", r.kld_mean}, {"kld_median", r.kld_median}, {"kld_p99", r.kld_p99},
                    {"top1_agreement", r.top1_agreement}, {"tokens", r.tokens}};
  }
  card["wall_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (resumed) card["resumed_at_block"] = resumed->next_layer;
  if (gguf) {
    GgufExportOptions e;
    e.type = std::string(gguf->name);
    e.threads = o.threads;
    e.keep_source_grids = true;
    e.table_types = table_types;
    e.metadata = std::move(vocabulary);
    e.metadata.push_back({"lowbit.recipe_card", card.dump()});  // the scores travel with the weights
    StreamedModel quantized{std::move(model), nullptr};
    const GgufExportResult written = ExportGguf(quantized, o.out, e);
    size_t repacked = 0;
    for (const GgufExportedTensor& t : written.tensors) repacked += t.repacked;
    card["gguf"] = {{"type", gguf->name}, {"file_bytes", written.file_bytes}, {"repacked_tensors", repacked},
                    {"bits_per_weight", written.bits_per_weight()}};
  } else if (engine) {
    StreamedModel quantized{std::move(model), nullptr};
    const EngineExportResult written = ExportEngineCheckpoint(quantized, source_dir, o.out, card, *engine);
    card["export"] = {{"quant_method", written.quant_method}, {"format", written.format},
                      {"bits_per_weight", written.bits_per_weight()}, {"file_bytes", written.file_bytes}};
  } else {
    SaveQuantizedModel(model, o.out, source_dir, card);
  }
  std::filesystem::remove_all(partial);
  return {card, 0, partial};
}

}  // namespace lowbit
