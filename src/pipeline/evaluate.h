// `ppl` and `compare` as library calls: the options every front end gives, the results, and the JSON
// both front ends print or return (the same fields from the CLI's --json and from Python).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "eval/compare.h"
#include "io/model_loader.h"

namespace lowbit {

// (chunks done, chunks total)
using ChunkProgress = std::function<void(size_t, size_t)>;

struct EvalOptions {
  std::string model, text, tokenizer;  // tokenizer empty: the model's own
  std::string quantize;                // RTN-quantize the model's decoder linears in memory first
  std::string kv_dtype = "fp32", kv_scales;
  size_t ctx = 256, threads = 0;
  LoadOptions load;
};

struct PplOptions : EvalOptions {
  std::string save_base, kl_base;  // store this model's top-K log-probabilities / compare with them
  size_t top_k = 32;
};

struct PplResult {
  NllStats nll;
  size_t text_tokens = 0, threads = 0;
  ChunkPlan plan;
  double tokens_per_second = 0;
  uint64_t base_file_bytes = 0;          // with save_base
  std::optional<CompareResult> kl;       // with kl_base
};

PplResult RunPpl(const PplOptions& o, const ChunkProgress& progress = nullptr);
nlohmann::json PplJson(const PplResult& r);

struct CompareOptions : EvalOptions {
  std::string base;  // the reference model; its tokenizer reads the text unless `tokenizer` is given
};

struct CompareRun {
  CompareResult result;
  ChunkPlan plan;
};

CompareRun RunCompare(const CompareOptions& o, const ChunkProgress& progress = nullptr);
nlohmann::json CompareJson(const CompareResult& r);

}  // namespace lowbit
