// `lowbit ppl` and `lowbit compare`: perplexity with llama-perplexity's protocol, and the shadow
// model check (KL divergence, top-1 agreement) of a model against its base.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "core/error.h"
#include "pipeline/evaluate.h"

namespace lowbit::cli {
namespace {

// What the flags fill: ppl's and compare's options, and --json.
struct EvalFlags {
  PplOptions ppl;
  CompareOptions compare;
  bool json = false;
};

void PrintCompare(const CompareResult& r) {
  PrintTable({"metric", "value"},
             {{"KL mean", FormatNumber(r.kld_mean)},
              {"KL median", FormatNumber(r.kld_median)},
              {"KL p99", FormatNumber(r.kld_p99)},
              {"top-1 agreement", fmt::format("{:.2f} %", 100 * r.top1_agreement)},
              {"RMS dp(true token)", FormatNumber(r.dp_rms)},
              {"PPL base", fmt::format("{:.4f} +/- {:.4f}", r.ppl_base, r.ppl_base_stderr)},
              {"PPL model", fmt::format("{:.4f} +/- {:.4f}", r.ppl, r.ppl_stderr)},
              {"PPL ratio", fmt::format("{:.5f}", r.ppl / r.ppl_base)},
              {"tokens scored", std::to_string(r.tokens)}});
}

void PrintPpl(const PplOptions& o, const PplResult& r) {
  PrintTable({"metric", "value"},
             {{"model", o.model},
              {"text", fmt::format("{} ({} tokens, {} chunks of {})", o.text, r.text_tokens, r.plan.chunks, o.ctx)},
              {"PPL", fmt::format("{:.4f} +/- {:.4f}", r.nll.ppl(), r.nll.ppl_stderr())},
              {"tokens scored", std::to_string(r.nll.count)},
              {"tokens/s", fmt::format("{:.1f} ({} threads)", r.tokens_per_second, r.threads)}});
  if (!o.save_base.empty())
    std::printf("\nsaved top-%zu base log-probabilities to %s (%llu bytes)\n", o.top_k, o.save_base.c_str(),
                static_cast<unsigned long long>(r.base_file_bytes));
  if (r.kl) {
    std::printf("\nagainst the base in %s (top-%zu + merged tail):\n", o.kl_base.c_str(), o.top_k);
    PrintCompare(*r.kl);
  }
}

void AddCommon(CLI::App* cmd, EvalOptions& o, bool& json) {
  cmd->add_option("--text", o.text, "Text file to score")->required();
  cmd->add_option("--ctx", o.ctx, "Chunk length in tokens")->default_val(256)->check(Positive());
  cmd->add_option("--threads", o.threads, "Threads (0 = all cores)")->default_val(0);
  cmd->add_option("--tokenizer", o.tokenizer, "Tokenizer (default: the model's own)");
  cmd->add_option("--quantize", o.quantize, "RTN-quantize --model's decoder linears in memory first, e.g. int4:g128")
      ->check(SchemeName());
  cmd->add_option("--kv-cache-dtype", o.kv_dtype, "KV cache of --model: " + KnownKvDtypes())
      ->default_val("fp32")
      ->check(KvDtypeName());
  cmd->add_option("--kv-scales", o.kv_scales, "FP8 KV scales (default: MODEL/kv_cache_scales.json if present)");
  cmd->add_flag("--json", json, "Print JSON");
  AddAllowNonfiniteFlag(cmd, o.load);
}

}  // namespace

void AddEvalCommands(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  auto* ppl = app.add_subcommand("ppl", "Perplexity with llama.cpp's llama-perplexity protocol");
  PplOptions& p = flags->ppl;
  ppl->add_option("--model", p.model, "Model folder or file")->required();
  AddCommon(ppl, p, flags->json);
  ppl->add_option("--save-base", p.save_base, "Store this model's top-K log-probabilities for later --kl-base");
  ppl->add_option("--kl-base", p.kl_base, "Compute KL against a file written by --save-base");
  ppl->add_option("--top-k", p.top_k, "K for --save-base")->default_val(32)->check(CLI::Range(1, 1 << 20));
  ppl->callback([flags] {
    ProgressBar bar("ppl");
    const PplResult r = RunPpl(flags->ppl, [&](size_t done, size_t total) { bar.Update(done, total); });
    if (flags->json) std::puts(PplJson(r).dump(2).c_str());
    else PrintPpl(flags->ppl, r);
  });

  auto* cmp = app.add_subcommand("compare", "KL divergence and top-1 agreement of a model against its base");
  CompareOptions& c = flags->compare;
  cmp->add_option("--base", c.base, "The reference (full-precision) model")->required();
  cmp->add_option("--model", c.model, "The model under test")->required();
  AddCommon(cmp, c, flags->json);
  cmp->callback([flags] {
    const CompareOptions& o = flags->compare;
    ProgressBar bar("compare");
    const CompareRun run = RunCompare(o, [&](size_t done, size_t total) { bar.Update(done, total); });
    if (flags->json) {
      std::puts(CompareJson(run.result).dump(2).c_str());
      return;
    }
    std::printf("base %s vs model %s on %s (%zu chunks of %zu)\n\n", o.base.c_str(), o.model.c_str(), o.text.c_str(),
                run.plan.chunks, o.ctx);
    PrintCompare(run.result);
  });
}

}  // namespace lowbit::cli
