// The whole-model calls: quantize, export, imatrix, calibrate_kv, ppl, compare, inspect, plan, synth and the
// decode / prefill benchmarks. Each takes keywords, releases the GIL,
// reports progress through a Python callable (and honours Ctrl-C between its steps), and returns the
// JSON text the CLI's --json prints, which the package turns into a dict.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>

#include "bindings.h"
#include "core/error.h"
#include "core/json_util.h"
#include "model/recipe.h"
#include "pipeline/bench_jobs.h"
#include "pipeline/convert_job.h"
#include "pipeline/evaluate.h"
#include "pipeline/export_job.h"
#include "pipeline/imatrix_job.h"
#include "pipeline/kv_scales_job.h"
#include "pipeline/quantize_job.h"
#include "pipeline/speed_job.h"
#include "plan/arch.h"
#include "plan/hardware.h"
#include "plan/inspect_report.h"
#include "plan/plan.h"
#include "plan/presets.h"
#include "plan/synth.h"

namespace lowbit::python {
namespace {

// By reference: the callback runs without the GIL, where a reference count must not change.
ChunkProgress ChunkCallback(const nb::object& progress) {
  return [&progress](size_t done, size_t total) { ReportProgress(progress, done, total, ""); };
}

void FillEval(EvalOptions& o, const std::string& model, const std::string& text, size_t ctx, size_t threads,
              const std::optional<std::string>& tokenizer, const std::optional<std::string>& quantize,
              const std::string& kv_cache_dtype, const std::optional<std::string>& kv_scales, bool allow_nonfinite) {
  o.model = model;
  o.text = text;
  o.ctx = ctx;
  o.threads = threads;
  o.tokenizer = tokenizer.value_or("");
  o.quantize = quantize.value_or("");
  o.kv_dtype = kv_cache_dtype;
  o.kv_scales = kv_scales.value_or("");
  o.load.allow_nonfinite = allow_nonfinite;
}

}  // namespace

void BindJobs(nb::module_& m) {
  m.def(
      "_quantize",
      [](const std::string& model, const std::string& out, const std::string& recipe_json,
         const std::string& recipe_path, const std::string& save_as, const std::string& token_embedding_type,
         const std::string& output_tensor_type, const std::optional<std::string>& eval,
         size_t eval_ctx, size_t threads, const std::optional<std::string>& max_ram, bool resume, size_t stop_after,
         double checkpoint_every, bool allow_nonfinite, nb::object progress) {
        QuantizeJob job;
        job.model = model;
        job.out = out;
        job.recipe = recipe_path.empty() ? ParseRecipe(ParseJson(recipe_json, "recipe"), "recipe")
                                         : ReadRecipe(recipe_path);
        job.save_as = save_as;
        job.token_embedding_type = token_embedding_type;
        job.output_tensor_type = output_tensor_type;
        job.eval = eval.value_or("");
        job.eval_ctx = eval_ctx;
        job.threads = threads;
        job.max_ram = max_ram.value_or("");
        job.resume = resume;
        job.stop_after = stop_after;
        job.checkpoint_every = checkpoint_every;
        job.load.allow_nonfinite = allow_nonfinite;
        job.progress = [&progress](size_t block, size_t blocks, const std::string& tensor) {
          ReportProgress(progress, block, blocks, tensor);
        };
        const QuantizeOutcome outcome = WithoutGil([&] { return RunQuantizeJob(job); });
        nlohmann::json result = {{"card", outcome.card}};
        if (outcome.card.is_null())
          result["stopped"] = {{"blocks", outcome.stopped_after}, {"partial", outcome.partial.string()}};
        return result.dump();
      },
      nb::arg("model"), nb::arg("out"), nb::arg("recipe_json"), nb::arg("recipe_path"), nb::arg("save_as"),
      nb::arg("token_embedding_type"), nb::arg("output_tensor_type"), nb::arg("eval").none(), nb::arg("eval_ctx"), nb::arg("threads"), nb::arg("max_ram").none(), nb::arg("resume"),
      nb::arg("stop_after"), nb::arg("checkpoint_every"), nb::arg("allow_nonfinite"), nb::arg("progress").none());

  m.def("_default_format_for", &DefaultFormatFor, nb::arg("save_as"), nb::arg("out"));

  m.def(
      "_export",
      [](const std::string& model, const std::string& out, const std::string& to, const std::string& type, bool pure,
         const std::string& token_embedding_type, const std::string& output_tensor_type,
         const std::string& imatrix, const std::string& calib, size_t calib_samples, size_t calib_len, uint64_t seed,
         double damp, const std::string& tokenizer, const std::string& name, const std::string& format,
         const std::string& scheme, const std::string& max_shard, size_t threads, bool allow_nonfinite,
         nb::object progress) {
        ExportJob job;
        job.model = model;
        job.out = out;
        job.to = to;
        job.type = type;
        job.pure = pure;
        job.token_embedding_type = token_embedding_type;
        job.output_tensor_type = output_tensor_type;
        job.imatrix = imatrix;
        job.calib = calib;
        job.calib_samples = calib_samples;
        job.calib_len = calib_len;
        job.seed = seed;
        job.damp = damp;
        job.tokenizer = tokenizer;
        job.name = name;
        job.format = format;
        job.scheme = scheme;
        job.max_shard = max_shard;
        job.threads = threads;
        job.load.allow_nonfinite = allow_nonfinite;
        job.progress = [&progress](size_t done, size_t total, std::string_view tensor) {
          ReportProgress(progress, done, total, std::string(tensor));
        };
        return WithoutGil([&] { return RunExportJob(job); }).dump();
      },
      nb::arg("model"), nb::arg("out"), nb::arg("to"), nb::arg("type"), nb::arg("pure"),
      nb::arg("token_embedding_type"), nb::arg("output_tensor_type"), nb::arg("imatrix"),
      nb::arg("calib"), nb::arg("calib_samples"), nb::arg("calib_len"), nb::arg("seed"), nb::arg("damp"),
      nb::arg("tokenizer"), nb::arg("name"), nb::arg("format"), nb::arg("scheme"), nb::arg("max_shard"),
      nb::arg("threads"), nb::arg("allow_nonfinite"), nb::arg("progress").none());

  m.def(
      "_convert",
      [](const std::string& in, const std::string& out, const std::string& to, const std::string& format,
         const std::string& type, const std::string& scheme, const std::string& text, const std::string& tokenizer,
         size_t ctx, const std::string& max_shard, size_t threads, bool allow_nonfinite, nb::object progress) {
        ConvertJob job;
        job.in = in;
        job.out = out;
        job.to = to;
        job.format = format;
        job.type = type;
        job.scheme = scheme;
        job.text = text;
        job.tokenizer = tokenizer;
        job.ctx = ctx;
        job.max_shard = max_shard;
        job.threads = threads;
        job.load.allow_nonfinite = allow_nonfinite;
        job.progress = [&progress](std::string_view stage, size_t done, size_t total) {
          ReportProgress(progress, done, total, std::string(stage));
        };
        return WithoutGil([&] { return RunConvertJob(job); }).dump();
      },
      nb::arg("model"), nb::arg("out"), nb::arg("to"), nb::arg("format"), nb::arg("type"), nb::arg("scheme"),
      nb::arg("text"), nb::arg("tokenizer"), nb::arg("ctx"), nb::arg("max_shard"), nb::arg("threads"),
      nb::arg("allow_nonfinite"), nb::arg("progress").none());

  m.def(
      "_imatrix",
      [](const std::string& model, const std::string& calib, const std::string& out, size_t ctx, size_t chunks,
         const std::string& tokenizer, size_t threads, nb::object progress) {
        ImatrixJob job{model, calib, out, tokenizer, ctx, chunks, threads, ChunkCallback(progress)};
        return WithoutGil([&] { return RunImatrixJob(job); }).dump();
      },
      nb::arg("model"), nb::arg("calib"), nb::arg("out"), nb::arg("ctx"), nb::arg("chunks"), nb::arg("tokenizer"),
      nb::arg("threads"), nb::arg("progress").none());

  m.def(
      "_calibrate_kv",
      [](const std::string& model, const std::string& calib, const std::string& out, const std::string& dtype,
         size_t samples, size_t length, uint64_t seed, size_t threads) {
        KvScalesJob job{model, calib, out, dtype, samples, length, threads, seed};
        return WithoutGil([&] { return RunKvScalesJob(job); }).dump();
      },
      nb::arg("model"), nb::arg("calib"), nb::arg("out"), nb::arg("dtype"), nb::arg("samples"), nb::arg("length"),
      nb::arg("seed"), nb::arg("threads"));

  m.def(
      "_ppl",
      [](const std::string& model, const std::string& text, size_t ctx, size_t threads,
         const std::optional<std::string>& tokenizer, const std::optional<std::string>& quantize,
         const std::string& kv_cache_dtype, const std::optional<std::string>& kv_scales,
         const std::optional<std::string>& save_base, const std::optional<std::string>& kl_base, size_t top_k,
         bool allow_nonfinite, nb::object progress) {
        PplOptions o;
        FillEval(o, model, text, ctx, threads, tokenizer, quantize, kv_cache_dtype, kv_scales, allow_nonfinite);
        o.save_base = save_base.value_or("");
        o.kl_base = kl_base.value_or("");
        o.top_k = top_k;
        const ChunkProgress report = ChunkCallback(progress);
        const PplResult r = WithoutGil([&] { return RunPpl(o, report); });
        return PplJson(r).dump();
      },
      nb::arg("model"), nb::arg("text"), nb::arg("ctx"), nb::arg("threads"), nb::arg("tokenizer").none(),
      nb::arg("quantize").none(), nb::arg("kv_cache_dtype"), nb::arg("kv_scales").none(), nb::arg("save_base").none(),
      nb::arg("kl_base").none(), nb::arg("top_k"), nb::arg("allow_nonfinite"), nb::arg("progress").none());

  m.def(
      "_compare",
      [](const std::string& base, const std::string& model, const std::string& text, size_t ctx, size_t threads,
         const std::optional<std::string>& tokenizer, const std::optional<std::string>& quantize,
         const std::string& kv_cache_dtype, const std::optional<std::string>& kv_scales, bool allow_nonfinite,
         nb::object progress) {
        CompareOptions o;
        FillEval(o, model, text, ctx, threads, tokenizer, quantize, kv_cache_dtype, kv_scales, allow_nonfinite);
        o.base = base;
        const ChunkProgress report = ChunkCallback(progress);
        const CompareRun r = WithoutGil([&] { return RunCompare(o, report); });
        return CompareJson(r.result).dump();
      },
      nb::arg("base"), nb::arg("model"), nb::arg("text"), nb::arg("ctx"), nb::arg("threads"),
      nb::arg("tokenizer").none(), nb::arg("quantize").none(), nb::arg("kv_cache_dtype"), nb::arg("kv_scales").none(),
      nb::arg("allow_nonfinite"), nb::arg("progress").none());

  m.def(
      "_inspect",
      [](const std::string& path, const std::vector<std::string>& gpus, const std::vector<std::string>& engine_flags) {
        return WithoutGil([&] { return InspectReportToJson(InspectWithKernels(path, gpus, engine_flags)).dump(); });
      },
      nb::arg("path"), nb::arg("gpus"), nb::arg("engine_flags"));

  m.def(
      "_plan",
      [](const std::string& model, const std::vector<std::string>& formats, const std::string& hardware, uint64_t ctx,
         uint64_t batch, const std::string& kv_cache_dtype, bool quantize_embeddings) {
        if (formats.empty()) Fail("plan: formats needs at least one format");
        const bool is_path = std::filesystem::exists(model);
        ModelSpec spec = SpecFromArch(is_path ? ArchFromPath(model) : FindPreset(model));
        spec.source = is_path ? "model" : "preset";
        const Hardware hw = FindHardware(hardware);
        PlanOptions o;
        o.ctx = ctx;
        o.batch = batch;
        o.kv_cache_dtype = kv_cache_dtype;
        o.quantize_embeddings = quantize_embeddings;
        std::vector<FormatPlan> plans;
        for (const std::string& f : formats) plans.push_back(PlanFormat(spec, hw, f, o));
        return PlanReportJson(spec, hw, o, plans).dump();
      },
      nb::arg("model"), nb::arg("formats"), nb::arg("hardware"), nb::arg("ctx"), nb::arg("batch"),
      nb::arg("kv_cache_dtype"), nb::arg("quantize_embeddings"));

  m.def(
      "_synth",
      [](const std::string& preset, const std::string& out, uint32_t layers, const std::string& dtype, uint64_t seed,
         size_t threads) {
        const std::optional<DType> parsed = ParseDType(dtype);
        if (!parsed) Fail("synth: unknown dtype '{}' (F32, BF16, F16)", dtype);
        const SynthOptions o{preset, layers, *parsed, seed, threads};
        return SynthJson(WithoutGil([&] { return WriteSynthModel(o, out); }), out).dump();
      },
      nb::arg("preset"), nb::arg("out"), nb::arg("layers"), nb::arg("dtype"), nb::arg("seed"), nb::arg("threads"));

  m.def(
      "_bench_speed",
      [](const std::string& model, bool decode, const std::vector<std::string>& formats,
         const std::vector<size_t>& batches, size_t ctx, size_t steps, size_t rounds, size_t threads,
         const std::string& kv_cache_dtype) {
        const SpeedJob job{model, decode, formats, batches, ctx, steps, rounds, threads, kv_cache_dtype};
        return SpeedsJson(WithoutGil([&] { return RunSpeedJob(job); })).dump();
      },
      nb::arg("model"), nb::arg("decode"), nb::arg("formats"), nb::arg("batches"), nb::arg("ctx"), nb::arg("steps"),
      nb::arg("rounds"), nb::arg("threads"), nb::arg("kv_cache_dtype"));

  m.def(
      "_bench_memory",
      [](size_t mib, size_t threads) {
        return WithoutGil([&] { return RunMemoryBench({mib, threads}); }).dump();
      },
      nb::arg("mib"), nb::arg("threads"));

  m.def(
      "_bench_gemv",
      [](const std::string& format, uint64_t rows, uint64_t cols, uint64_t working_set_mib, size_t tokens,
         double seconds, size_t rounds, size_t bandwidth_mib, size_t threads) {
        const GemvBenchJob job{format, rows, cols, working_set_mib, tokens, seconds, rounds, bandwidth_mib, threads};
        return WithoutGil([&] { return RunGemvBench(job); }).dump();
      },
      nb::arg("format"), nb::arg("rows"), nb::arg("cols"), nb::arg("working_set_mib"), nb::arg("tokens"),
      nb::arg("seconds"), nb::arg("rounds"), nb::arg("bandwidth_mib"), nb::arg("threads"));

  m.def(
      "_bench_attention",
      [](size_t ctx, const std::string& kv_cache_dtype, size_t kv_heads, double seconds, size_t bandwidth_mib,
         size_t threads) {
        const AttentionBenchJob job{ctx, kv_cache_dtype, kv_heads, seconds, bandwidth_mib, threads};
        return WithoutGil([&] { return RunAttentionBench(job); }).dump();
      },
      nb::arg("ctx"), nb::arg("kv_cache_dtype"), nb::arg("kv_heads"), nb::arg("seconds"), nb::arg("bandwidth_mib"),
      nb::arg("threads"));
}

}  // namespace lowbit::python
