// Comparing a model with its base ("shadow model" check): per scored position KL(base || model),
// top-1 agreement and the change in probability of the true token; perplexities of both.
//
// The base can also come from a file of its top-K log-probabilities (--save-base / --kl-base):
// KL is then computed over the K base tokens plus one merged "tail" bucket holding the rest of
// the probability mass, which bounds the exact KL from below (the log-sum inequality) and is
// close to it when K covers most of the mass.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "eval/scoring.h"

namespace lowbit {

struct CompareResult {
  double kld_mean = 0, kld_median = 0, kld_p99 = 0;
  double top1_agreement = 0;  // 0..1
  double dp_rms = 0;          // RMS of p_model(true) - p_base(true)
  double ppl_base = 0, ppl_base_stderr = 0, ppl = 0, ppl_stderr = 0;
  size_t tokens = 0;
};

class CompareAccumulator {
 public:
  // Exact: both full log-probability vectors.
  void Add(const std::vector<double>& base_logprobs, const std::vector<double>& model_logprobs, int32_t target);
  // From a stored top-K base record (merged tail).
  void AddMergedTail(const struct BaseRecord& base, const std::vector<double>& model_logprobs, int32_t target);
  CompareResult Finish() const;

 private:
  void Record(double kl, bool agree, double p_base_true, double p_model_true, double base_nll, double model_nll);
  NllStats base_, model_;
  std::vector<double> kld_;
  size_t agree_ = 0;
  double dp_sq_ = 0;
};

struct BaseRecord {
  std::vector<int32_t> ids;       // K most probable tokens under the base, most probable first
  std::vector<float> logprobs;    // their base log-probabilities
  float tail_logprob = 0;         // log of the remaining base probability mass
  float target_logprob = 0;       // base log-probability of the true next token
};

// Runs `base` and `model` over the same chunks and compares them at every scored position.
CompareResult CompareModels(Engine& base, Engine& model, const std::vector<int32_t>& tokens, const ChunkPlan& plan,
                            int32_t bos, const std::function<void(size_t, size_t)>& progress = nullptr);

BaseRecord MakeBaseRecord(const std::vector<double>& logprobs, int32_t target, size_t k);

// Binary file of BaseRecords for one (text, ctx): header (magic "LBKLBASE", version 2, vocab, ctx,
// K, positions, hash of the token ids, FNV-1a checksum of everything else in the file), then
// fixed-size records. Written atomically. Reading checks the header against the file size before
// allocating and the checksum before decoding: a file edited or damaged anywhere is an Error
// naming it; a version 1 file (no checksum) is an Error asking to regenerate it.
struct BaseFileHeader {
  uint32_t vocab = 0, ctx = 0, k = 0;
  uint64_t positions = 0, token_hash = 0;
};
uint64_t HashTokens(const std::vector<int32_t>& tokens);
void WriteBaseFile(const std::filesystem::path& path, const BaseFileHeader& header,
                   const std::vector<BaseRecord>& records);
// Throws Error naming the file when it is malformed or was made for a different text/ctx/vocab.
std::vector<BaseRecord> ReadBaseFile(const std::filesystem::path& path, const BaseFileHeader& expected);
uint64_t BaseFileBytes(const BaseFileHeader& header);

}  // namespace lowbit
