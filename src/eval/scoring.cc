#include "eval/scoring.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lowbit {

ChunkPlan PlanChunks(size_t n_tokens, size_t ctx) {
  if (ctx < 4) Fail("--ctx {} is too small (at least 4)", ctx);
  if (n_tokens < ctx) Fail("the text has {} tokens, fewer than one chunk of --ctx {}", n_tokens, ctx);
  return {ctx, n_tokens / ctx};
}

std::vector<int32_t> ChunkTokens(const std::vector<int32_t>& tokens, const ChunkPlan& plan, size_t chunk,
                                 int32_t bos) {
  std::vector<int32_t> out(tokens.begin() + static_cast<ptrdiff_t>(chunk * plan.ctx),
                           tokens.begin() + static_cast<ptrdiff_t>((chunk + 1) * plan.ctx));
  if (bos >= 0) out[0] = bos;
  return out;
}

void ScoreChunks(std::span<Engine* const> engines, const std::vector<int32_t>& tokens, const ChunkPlan& plan,
                 int32_t bos, const std::function<void(size_t, const ScoredPosition&)>& visit,
                 const std::function<void(size_t, size_t)>& progress) {
  for (size_t chunk = 0; chunk < plan.chunks; ++chunk) {
    const std::vector<int32_t> ids = ChunkTokens(tokens, plan, chunk, bos);
    for (size_t m = 0; m < engines.size(); ++m) {
      Engine& engine = *engines[m];
      const size_t vocab = engine.model().config.vocab_size;
      KvCache cache = engine.NewCache(plan.ctx);
      const std::vector<float> logits = engine.Forward(cache, ids, /*all_logits=*/true);
      for (size_t pos = plan.first_scored(); pos + 1 < plan.ctx; ++pos) {
        const ScoredPosition p{chunk, pos, ids[pos + 1], std::span(&logits[pos * vocab], vocab)};
        visit(m, p);
      }
    }
    if (progress) progress(chunk + 1, plan.chunks);
  }
}

NllStats Perplexity(Engine& engine, const std::vector<int32_t>& tokens, const ChunkPlan& plan, int32_t bos,
                    const std::function<void(size_t, size_t)>& progress) {
  Engine* engines[] = {&engine};
  NllStats nll;
  std::vector<double> logprobs;
  ScoreChunks(
      engines, tokens, plan, bos,
      [&](size_t, const ScoredPosition& p) {
        LogSoftmax(p.logits, logprobs);
        nll.Add(-logprobs[p.target]);
      },
      progress);
  return nll;
}

void LogSoftmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_sum = std::log(sum) + max;
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
}

double NllStats::ppl() const { return count ? std::exp(sum / static_cast<double>(count)) : NAN; }

double NllStats::ppl_stderr() const {
  if (count < 2) return NAN;
  const double n = static_cast<double>(count), mean = sum / n;
  const double var = std::max(0.0, sum_sq / n - mean * mean);
  return ppl() * std::sqrt(var / (n - 1));
}

}  // namespace lowbit
