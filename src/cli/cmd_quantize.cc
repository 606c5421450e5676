// `lowbit quantize`: whole-model post-training quantization through the method registry, with
// calibration, an optional evaluation against the base, and a recipe card in the output folder.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "core/error.h"
#include "model/recipe.h"
#include "pipeline/quantize_job.h"
#include "quant/scheme.h"

namespace lowbit::cli {
namespace {

struct QuantizeOptions {
  std::string model, out, recipe, method = "rtn", format, calib, eval, act_format, save_as = "lowbit", lm_head;
  std::string token_embedding_type, output_tensor_type;
  double alpha = -1, threshold = -1;
  int group = 0;
  bool asym = false, json = false, rotate = false, resume = false;
  std::string act_order;  // GPTQ: "static" or "group" (empty: none)
  size_t calib_samples = 128, calib_len = 256, eval_ctx = 256, threads = 0, stop_after = 0;
  double checkpoint_every = 60;  // seconds between saves of OUT.partial (0: after every block)
  std::string max_ram;           // calibration activation budget, e.g. 2G (empty: no limit)
  uint64_t seed = 0, rotate_seed = 0;
  LoadOptions load;  // --allow-nonfinite
};

Recipe RecipeFrom(const QuantizeOptions& o) {
  Recipe r;
  if (!o.recipe.empty()) {
    r = ReadRecipe(o.recipe);
    if (o.rotate) {
      r.rotate = true;
      r.rotate_seed = o.rotate_seed;
    }
    if (!o.calib.empty()) r.calib_file = o.calib;
    if (!o.lm_head.empty()) r.lm_head = o.lm_head;
    return r;
  }
  if (o.format.empty()) Fail("quantize: give --recipe FILE or --format F (with --method M)");
  r.method = o.method;
  r.format = SchemeTextFromFlags(o.format, o.group, o.asym);
  if (!o.act_order.empty()) r.config["act_order"] = o.act_order;
  if (o.alpha >= 0) r.config["alpha"] = o.alpha;
  if (o.threshold >= 0) r.config["threshold"] = o.threshold;
  r.act_format = o.act_format;
  r.rotate = o.rotate;
  r.rotate_seed = o.rotate_seed;
  r.calib_file = o.calib;
  r.calib_samples = o.calib_samples;
  r.calib_len = o.calib_len;
  r.seed = o.seed;
  r.lm_head = o.lm_head;
  return r;
}

void Run(QuantizeOptions o) {
  if (o.recipe.empty() && o.format.empty()) o.format = DefaultFormatFor(o.save_as, o.out);
  QuantizeJob job;
  job.model = o.model;
  job.out = o.out;
  job.recipe = RecipeFrom(o);
  job.save_as = o.save_as;
  job.token_embedding_type = o.token_embedding_type;
  job.output_tensor_type = o.output_tensor_type;
  job.eval = o.eval;
  job.eval_ctx = o.eval_ctx;
  job.threads = o.threads;
  job.max_ram = o.max_ram;
  job.resume = o.resume;
  job.stop_after = o.stop_after;
  job.checkpoint_every = o.checkpoint_every;
  job.load = o.load;
  ProgressBar bar("quantize");
  job.progress = [&](size_t block, size_t blocks, const std::string& tensor) { bar.Update(block, blocks, tensor); };
  const QuantizeOutcome outcome = RunQuantizeJob(job);
  if (outcome.card.is_null()) {
    std::printf("stopped after block %zu; the state is in %s: continue with --resume\n", outcome.stopped_after,
                outcome.partial.string().c_str());
    return;
  }
  const nlohmann::json& card = outcome.card;
  if (o.json) {
    std::puts(card.dump(2).c_str());
    return;
  }
  const Recipe& recipe = job.recipe;
  std::string written_as = "lowbit quantized folder";
  if (card.contains("export"))
    written_as = fmt::format("{} checkpoint ({}, {:.4f} bits/weight in the packed linears)",
                             card["export"]["quant_method"].get<std::string>(), card["export"]["format"].get<std::string>(),
                             card["export"]["bits_per_weight"].get<double>());
  if (card.contains("gguf"))
    written_as = fmt::format("GGUF {} ({} tensors repacked bit for bit, {:.4f} bits/weight in all)",
                             card["gguf"]["type"].get<std::string>(), card["gguf"]["repacked_tensors"].get<size_t>(),
                             card["gguf"]["bits_per_weight"].get<double>());
  const nlohmann::json& seconds = card["seconds"];
  const nlohmann::json& activations = card["activations"];
  std::vector<std::vector<std::string>> rows = {
      {"output", o.out},
      {"method", recipe.method + (recipe.rotate ? " + rotation" : "")},
      {"scheme", card["scheme"].get<std::string>()},
      {"bits/weight (linears)", fmt::format("{:.4f}", card["bits_per_weight"].get<double>())},
      {"written as", written_as},
      {"quantize seconds", fmt::format("{:.2f} (calibration {:.2f})", seconds["total"].get<double>(),
                                       seconds["calibration"].get<double>())},
      {"calibration activations", fmt::format("{:.1f} MB peak in memory, {:.1f} MB spilled",
                                              activations["peak_bytes"].get<double>() / 1e6,
                                              activations["spilled_bytes"].get<double>() / 1e6)}};
  if (card.contains("eval")) {
    const auto& e = card["eval"];
    rows.push_back({"PPL base -> quantized", fmt::format("{:.4f} -> {:.4f}", e["ppl_base"].get<double>(), e["ppl"].get<double>())});
    rows.push_back({"KL mean", FormatNumber(e["kld_mean"].get<double>())});
    rows.push_back({"top-1 agreement", fmt::format("{:.2f} %", 100 * e["top1_agreement"].get<double>())});
  }
  PrintTable({"quantize", "value"}, rows);
}

}  // namespace

void AddQuantizeCommand(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* cmd = app.add_subcommand("quantize",
                                 "Quantize a whole model (rtn, gptq, awq, smoothquant, llm_int8) into a checkpoint folder");
  cmd->add_option("model", o->model, "Model folder or file")->required();
  cmd->add_option("-o,--out", o->out, "Output folder (must not exist)")->required();
  cmd->add_option("--recipe", o->recipe, "Recipe JSON (method, format, config, calibration)");
  cmd->add_option("--method", o->method, "Method: rtn, gptq, awq, smoothquant, llm_int8")
      ->default_val("rtn")
      ->check(MethodName());
  cmd->add_option("--format", o->format, "Format, e.g. int4:g128 (see `lowbit formats`)")->check(SchemeName());
  cmd->add_option("--group", o->group, "Group size (-1 = per channel)")->check(GroupSize());
  cmd->add_flag("--asym", o->asym, "Asymmetric integers (zero-points)");
  cmd->add_flag("--act-order{static}", o->act_order,
                "GPTQ: columns by descending Hessian diagonal; --act-order=group also forms the groups in that "
                "order (desc_act: stored with g_idx, read through a column gather)")
      ->check(CLI::IsMember({"static", "group"}));
  cmd->add_option("--act-format", o->act_format,
                  "Quantize activations too (simulated): int8:token is dynamic, int8:tensor static (calibrated), "
                  "nvfp4 (W4A4) a calibrated tensor scale over dynamic block scales, mxfp4:e8m0=round MX inputs "
                  "on compressed-tensors' scale rule")
      ->check(SchemeName());
  cmd->add_flag("--rotate", o->rotate, "Rotate the model first (QuaRot Hadamard; with rtn or gptq)");
  cmd->add_option("--rotate-seed", o->rotate_seed, "Seed of the rotation's random signs")->default_val(0);
  cmd->add_option("--threshold", o->threshold, "llm_int8: calibration max |x| above which a column stays fp (default 6)")
      ->check(NonNegative());
  cmd->add_option("--alpha", o->alpha, "SmoothQuant migration strength (default 0.5)")->check(Between(0, 1));
  cmd->add_option("--lm-head", o->lm_head,
                  fmt::format("lm_head's format (RTN after the blocks), or none (default for a lowbit folder: {} "
                              "when the body is 8 bits or fewer and lm_head is untied; otherwise none)",
                              kDefaultLmHeadFormat));
  cmd->add_option("--calib", o->calib, "Calibration text file");
  cmd->add_option("--calib-samples", o->calib_samples, "Calibration windows")->default_val(128)->check(Positive());
  cmd->add_option("--calib-len", o->calib_len, "Tokens per calibration window")->default_val(256)->check(Positive());
  cmd->add_option("--seed", o->seed, "Calibration sampling seed")->default_val(0);
  cmd->add_option("--eval", o->eval, "Text to evaluate PPL/KL/top-1 against the base (goes into recipe.json)");
  cmd->add_option("--eval-ctx", o->eval_ctx, "Context for --eval")->default_val(256)->check(Positive());
  cmd->add_option("--threads", o->threads, "Threads (0 = all cores)")->default_val(0);
  cmd->add_option("--save-as", o->save_as,
                  "lowbit (a quantized folder), gguf:TYPE (a llama.cpp file; calibrated types Q4_0, Q5_0, Q8_0, "
                  "IQ4_NL, MXFP4, whose grid --format defaults to), or gptq, gptq_v2, awq, compressed-tensors (a "
                  "folder vLLM and transformers load)")
      ->default_val("lowbit");
  cmd->add_option("--token-embedding-type", o->token_embedding_type,
                  "--save-as gguf:TYPE: ggml type of token_embd, past the mix (llama-quantize's option; e.g. Q6_K)");
  cmd->add_option("--output-tensor-type", o->output_tensor_type,
                  "--save-as gguf:TYPE: ggml type of the output matrix, past the mix (llama-quantize's option)");
  cmd->add_flag("--resume", o->resume, "Continue an interrupted run from its last finished block (OUT.partial)");
  cmd->add_option("--stop-after", o->stop_after, "Stop after this many blocks, leaving OUT.partial for --resume");
  cmd->add_option("--max-ram", o->max_ram,
                  "Memory for calibration activations (e.g. 512M, 2G); past it they go to a temp file beside OUT");
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "Save OUT.partial after a block once this many seconds passed since the last save (0: every block)")
      ->default_val(60)
      ->check(NonNegative());
  cmd->add_flag("--json", o->json, "Print the recipe card as JSON");
  AddAllowNonfiniteFlag(cmd, o->load);
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
