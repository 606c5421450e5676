// `lowbit ppl` and `lowbit compare`: perplexity with llama-perplexity's protocol, and the shadow
// model check (KL divergence, top-1 agreement) of a model against its base.
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "cli/session.h"
#include "core/error.h"
#include "eval/compare.h"

namespace lowbit::cli {
namespace {

struct EvalOptions {
  std::string model, base, text, tokenizer, save_base, kl_base, quantize, kv_dtype = "fp32", kv_scales;
  size_t ctx = 256, threads = 0, top_k = 32;
  bool json = false;
  LoadOptions load;  // --allow-nonfinite
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json CompareJson(const CompareResult& r) {
  return {{"kld_mean", r.kld_mean},   {"kld_median", r.kld_median}, {"kld_p99", r.kld_p99},
          {"top1_agreement", r.top1_agreement}, {"dp_rms", r.dp_rms}, {"ppl_base", r.ppl_base},
          {"ppl_base_stderr", r.ppl_base_stderr}, {"ppl", r.ppl}, {"ppl_stderr", r.ppl_stderr}, {"tokens", r.tokens}};
}

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

void RunPpl(const EvalOptions& o) {
  if (!o.save_base.empty() && !o.kl_base.empty()) Fail("--save-base and --kl-base cannot be used together");
  const LoadedModel m = LoadModelWithTokenizer(o.model, o.tokenizer, o.quantize, o.load);
  const std::vector<int32_t> tokens = TokenizeFile(*m.tokenizer, o.text);
  const ChunkPlan plan = PlanChunks(tokens.size(), o.ctx);
  Engine engine(m.model, o.threads, KvCacheOptionsFor(o.kv_dtype, o.model, o.kv_scales, m.model.config.n_layers));
  Engine* engines[] = {&engine};
  const BaseFileHeader header{m.model.config.vocab_size, static_cast<uint32_t>(o.ctx),
                              static_cast<uint32_t>(o.top_k), plan.scored_total(), HashTokens(tokens)};
  std::vector<BaseRecord> base_records;
  if (!o.kl_base.empty()) base_records = ReadBaseFile(o.kl_base, header);
  NllStats nll;
  CompareAccumulator kl;
  std::vector<double> logprobs;
  size_t index = 0;
  ProgressBar bar("ppl", plan.chunks);
  const auto start = std::chrono::steady_clock::now();
  ScoreChunks(
      engines, tokens, plan, m.model.config.bos_id,
      [&](size_t, const ScoredPosition& p) {
        LogSoftmax(p.logits, logprobs);
        nll.Add(-logprobs[p.target]);
        if (!o.save_base.empty()) base_records.push_back(MakeBaseRecord(logprobs, p.target, o.top_k));
        if (!o.kl_base.empty()) kl.AddMergedTail(base_records[index], logprobs, p.target);
        ++index;
      },
      [&](size_t done, size_t) { bar.Update(done); });
  const double seconds = Seconds(start);
  const double tps = static_cast<double>(plan.chunks * plan.ctx) / seconds;
  if (!o.save_base.empty()) WriteBaseFile(o.save_base, header, base_records);
  if (o.json) {
    nlohmann::json out = {{"ppl", nll.ppl()}, {"ppl_stderr", nll.ppl_stderr()}, {"tokens", nll.count},
                          {"tokens_per_second", tps}, {"ctx", o.ctx}, {"chunks", plan.chunks}};
    if (!o.save_base.empty()) out["base_file_bytes"] = BaseFileBytes(header);
    if (!o.kl_base.empty()) out["kl"] = CompareJson(kl.Finish());
    std::puts(out.dump(2).c_str());
    return;
  }
  PrintTable({"metric", "value"},
             {{"model", o.model},
              {"text", fmt::format("{} ({} tokens, {} chunks of {})", o.text, tokens.size(), plan.chunks, o.ctx)},
              {"PPL", fmt::format("{:.4f} +/- {:.4f}", nll.ppl(), nll.ppl_stderr())},
              {"tokens scored", std::to_string(nll.count)},
              {"tokens/s", fmt::format("{:.1f} ({} threads)", tps, engine.pool().size())}});
  if (!o.save_base.empty())
    std::printf("\nsaved top-%zu base log-probabilities to %s (%llu bytes)\n", o.top_k, o.save_base.c_str(),
                static_cast<unsigned long long>(BaseFileBytes(header)));
  if (!o.kl_base.empty()) {
    std::printf("\nagainst the base in %s (top-%u + merged tail):\n", o.kl_base.c_str(), header.k);
    PrintCompare(kl.Finish());
  }
}

void RunCompare(const EvalOptions& o) {
  const LoadedModel base = LoadModelWithTokenizer(o.base, o.tokenizer, "", o.load);
  const LoadedModel model = LoadModelWithTokenizer(o.model, o.tokenizer.empty() ? o.base : o.tokenizer, o.quantize, o.load);
  if (base.model.config.vocab_size != model.model.config.vocab_size)
    Fail("{} and {} have different vocabularies ({} vs {} tokens)", o.base, o.model, base.model.config.vocab_size,
         model.model.config.vocab_size);
  const std::vector<int32_t> tokens = TokenizeFile(*base.tokenizer, o.text);
  const ChunkPlan plan = PlanChunks(tokens.size(), o.ctx);
  Engine base_engine(base.model, o.threads),
      model_engine(model.model, o.threads, KvCacheOptionsFor(o.kv_dtype, o.model, o.kv_scales, model.model.config.n_layers));
  ProgressBar bar("compare", plan.chunks);
  const CompareResult r = CompareModels(base_engine, model_engine, tokens, plan, base.model.config.bos_id,
                                        [&](size_t done, size_t) { bar.Update(done); });
  if (o.json) {
    std::puts(CompareJson(r).dump(2).c_str());
    return;
  }
  std::printf("base %s vs model %s on %s (%zu chunks of %zu)\n\n", o.base.c_str(), o.model.c_str(), o.text.c_str(),
              plan.chunks, o.ctx);
  PrintCompare(r);
}

void AddCommon(CLI::App* cmd, EvalOptions& o) {
  cmd->add_option("--text", o.text, "Text file to score")->required();
  cmd->add_option("--ctx", o.ctx, "Chunk length in tokens")->default_val(256)->check(Positive());
  cmd->add_option("--threads", o.threads, "Threads (0 = all cores)")->default_val(0);
  cmd->add_option("--tokenizer", o.tokenizer, "Tokenizer (default: the model's own)");
  cmd->add_option("--quantize", o.quantize, "RTN-quantize --model's decoder linears in memory first, e.g. int4:g128");
  cmd->add_option("--kv-cache-dtype", o.kv_dtype, "KV cache of --model: " + KnownKvDtypes())->default_val("fp32");
  cmd->add_option("--kv-scales", o.kv_scales, "FP8 KV scales (default: MODEL/kv_cache_scales.json if present)");
  cmd->add_flag("--json", o.json, "Print JSON");
  AddAllowNonfiniteFlag(cmd, o.load);
}

}  // namespace

void AddEvalCommands(CLI::App& app) {
  auto ppl_opts = std::make_shared<EvalOptions>();
  auto* ppl = app.add_subcommand("ppl", "Perplexity with llama.cpp's llama-perplexity protocol");
  ppl->add_option("--model", ppl_opts->model, "Model folder or file")->required();
  AddCommon(ppl, *ppl_opts);
  ppl->add_option("--save-base", ppl_opts->save_base, "Store this model's top-K log-probabilities for later --kl-base");
  ppl->add_option("--kl-base", ppl_opts->kl_base, "Compute KL against a file written by --save-base");
  ppl->add_option("--top-k", ppl_opts->top_k, "K for --save-base")->default_val(32)->check(CLI::Range(1, 1 << 20));
  ppl->callback([ppl_opts] { RunPpl(*ppl_opts); });

  auto cmp_opts = std::make_shared<EvalOptions>();
  auto* cmp = app.add_subcommand("compare", "KL divergence and top-1 agreement of a model against its base");
  cmp->add_option("--base", cmp_opts->base, "The reference (full-precision) model")->required();
  cmp->add_option("--model", cmp_opts->model, "The model under test")->required();
  AddCommon(cmp, *cmp_opts);
  cmp->callback([cmp_opts] { RunCompare(*cmp_opts); });
}

}  // namespace lowbit::cli
