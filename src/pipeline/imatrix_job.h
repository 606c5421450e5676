// The importance matrix of every decoder linear (mean squared input activation per column), from a
// calibration text cut as llama-imatrix cuts it, written in llama.cpp's imatrix GGUF format so that
// `lowbit export --imatrix` and `llama-quantize --imatrix` can both use it. `lowbit imatrix` and
// `lowbit.imatrix()` are two front doors to RunImatrixJob.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace lowbit {

struct ImatrixJob {
  std::string model, calib, out, tokenizer;
  size_t ctx = 512, chunks = 0, threads = 0;  // chunks 0: the whole text
  std::function<void(size_t done, size_t total)> progress;  // chunks
};

// Writes job.out and returns what `lowbit imatrix --json` prints: out, entries, chunks, ctx, tokens.
nlohmann::json RunImatrixJob(const ImatrixJob& job);

}  // namespace lowbit
