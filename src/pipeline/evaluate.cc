#include "pipeline/evaluate.h"

#include <chrono>

#include "core/error.h"
#include "pipeline/session.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {

PplResult RunPpl(const PplOptions& o, const ChunkProgress& progress) {
  if (!o.save_base.empty() && !o.kl_base.empty()) Fail("--save-base and --kl-base cannot be used together");
  const LoadedModel m = LoadModelWithTokenizer(o.model, o.tokenizer, o.quantize, o.load);
  const std::vector<int32_t> tokens = TokenizeFile(*m.tokenizer, o.text);
  PplResult r;
  r.text_tokens = tokens.size();
  r.plan = PlanChunks(tokens.size(), o.ctx);
  Engine engine(m.model, o.threads, KvCacheOptionsFor(o.kv_dtype, o.model, o.kv_scales, m.model.config.n_layers));
  r.threads = engine.pool().size();
  Engine* engines[] = {&engine};
  const BaseFileHeader header{m.model.config.vocab_size, static_cast<uint32_t>(o.ctx),
                              static_cast<uint32_t>(o.top_k), r.plan.scored_total(), HashTokens(tokens)};
  std::vector<BaseRecord> base_records;
  if (!o.kl_base.empty()) base_records = ReadBaseFile(o.kl_base, header);
  CompareAccumulator kl;
  std::vector<double> logprobs;
  size_t index = 0;
  const auto start = std::chrono::steady_clock::now();
  ScoreChunks(
      engines, tokens, r.plan, AddedBos(*m.tokenizer),
      [&](size_t, const ScoredPosition& p) {
        LogSoftmax(p.logits, logprobs);
        r.nll.Add(-logprobs[p.target]);
        if (!o.save_base.empty()) base_records.push_back(MakeBaseRecord(logprobs, p.target, o.top_k));
        if (!o.kl_base.empty()) kl.AddMergedTail(base_records[index], logprobs, p.target);
        ++index;
      },
      progress);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_second = static_cast<double>(r.plan.chunks * r.plan.ctx) / seconds;
  if (!o.save_base.empty()) {
    WriteBaseFile(o.save_base, header, base_records);
    r.base_file_bytes = BaseFileBytes(header);
  }
  if (!o.kl_base.empty()) r.kl = kl.Finish();
  return r;
}

nlohmann::json PplJson(const PplResult& r) {
  nlohmann::json out = {{"ppl", r.nll.ppl()}, {"ppl_stderr", r.nll.ppl_stderr()}, {"tokens", r.nll.count},
                        {"tokens_per_second", r.tokens_per_second}, {"ctx", r.plan.ctx}, {"chunks", r.plan.chunks}};
  if (r.base_file_bytes) out["base_file_bytes"] = r.base_file_bytes;
  if (r.kl) out["kl"] = CompareJson(*r.kl);
  return out;
}

CompareRun RunCompare(const CompareOptions& o, const ChunkProgress& progress) {
  const LoadedModel base = LoadModelWithTokenizer(o.base, o.tokenizer, "", o.load);
  const LoadedModel model =
      LoadModelWithTokenizer(o.model, o.tokenizer.empty() ? o.base : o.tokenizer, o.quantize, o.load);
  if (base.model.config.vocab_size != model.model.config.vocab_size)
    Fail("{} and {} have different vocabularies ({} vs {} tokens)", o.base, o.model, base.model.config.vocab_size,
         model.model.config.vocab_size);
  const std::vector<int32_t> tokens = TokenizeFile(*base.tokenizer, o.text);
  CompareRun run;
  run.plan = PlanChunks(tokens.size(), o.ctx);
  Engine base_engine(base.model, o.threads),
      model_engine(model.model, o.threads,
                   KvCacheOptionsFor(o.kv_dtype, o.model, o.kv_scales, model.model.config.n_layers));
  run.result = CompareModels(base_engine, model_engine, tokens, run.plan, AddedBos(*base.tokenizer), progress);
  return run;
}

nlohmann::json CompareJson(const CompareResult& r) {
  return {{"kld_mean", r.kld_mean},   {"kld_median", r.kld_median}, {"kld_p99", r.kld_p99},
          {"top1_agreement", r.top1_agreement}, {"dp_rms", r.dp_rms}, {"ppl_base", r.ppl_base},
          {"ppl_base_stderr", r.ppl_base_stderr}, {"ppl", r.ppl}, {"ppl_stderr", r.ppl_stderr}, {"tokens", r.tokens}};
}

}  // namespace lowbit
