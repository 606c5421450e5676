// Scoring text the way llama.cpp's llama-perplexity does, so numbers are comparable: the
// tokenized text (with BOS) is cut into non-overlapping chunks of ctx tokens, each chunk's first
// token is replaced by BOS, and only the second half is scored: positions ctx/2 .. ctx-2, each
// predicting the next token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/forward.h"

namespace lowbit {

struct ScoredPosition {
  size_t chunk = 0, pos = 0;     // pos inside the chunk
  int32_t target = 0;            // the token that follows
  std::span<const float> logits; // [vocab]
};

struct ChunkPlan {
  size_t ctx = 0, chunks = 0;
  size_t first_scored() const { return ctx / 2; }
  size_t scored_per_chunk() const { return ctx - 1 - first_scored(); }
  size_t scored_total() const { return chunks * scored_per_chunk(); }
};

// Throws Error when the text is shorter than one chunk.
ChunkPlan PlanChunks(size_t n_tokens, size_t ctx);

// The chunk's tokens with the first set to `bos`, or as they are where bos is -1 (a tokenizer that adds no
// BOS: llama-perplexity's add_bos rule; AddedBos in tokenizer/tokenizer.h).
std::vector<int32_t> ChunkTokens(const std::vector<int32_t>& tokens, const ChunkPlan& plan, size_t chunk, int32_t bos);

// Runs every chunk through `engines` (several models over the same chunks, e.g. base and
// quantized) and calls visit(model_index, position) for each scored position; `progress` gets
// (chunks done, chunks total).
void ScoreChunks(std::span<Engine* const> engines, const std::vector<int32_t>& tokens, const ChunkPlan& plan,
                 int32_t bos, const std::function<void(size_t, const ScoredPosition&)>& visit,
                 const std::function<void(size_t, size_t)>& progress);

// log-softmax in double precision.
void LogSoftmax(std::span<const float> logits, std::vector<double>& out);

// Negative log-likelihood accumulator with llama.cpp's uncertainty estimate.
struct NllStats {
  double sum = 0, sum_sq = 0;
  size_t count = 0;
  void Add(double nll) { sum += nll, sum_sq += nll * nll, ++count; }
  double ppl() const;
  double ppl_stderr() const;  // ppl * stderr of the mean NLL
};

// Perplexity of one model over the chunks (llama-perplexity protocol).
NllStats Perplexity(Engine& engine, const std::vector<int32_t>& tokens, const ChunkPlan& plan, int32_t bos,
                    const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace lowbit
