// `lowbit convert IN -o OUT --to FORMAT` as one library call: a quantized model moved between the
// formats lowbit and the engines load (a lowbit folder, GPTQ, AWQ, compressed-tensors, GGUF), repacked
// linear by linear where the target holds the source's codes exactly. Where it cannot, the change is
// asked for (`scheme`: quantize those linears again; GGUF: the type's mix encodes them), listed with
// the reason, and measured: OUT is read back and every matrix compared with IN's (max |Δw|, relative
// RMS), and with a text, KL(IN || OUT) and both perplexities. `lowbit convert` and `lowbit.convert()`
// are its two front doors.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/model_loader.h"

namespace lowbit {

struct ConvertJob {
  std::string in, out;
  std::string to;      // lowbit, gptq, awq, compressed-tensors or gguf
  std::string format;  // --to gptq: gptq (v1 zero points) or gptq_v2
  std::string type = "Q8_0";  // --to gguf: the file type or mix for what no ggml type holds as stored
  std::string scheme;  // engine formats: the scheme for linears the format cannot hold (lossy, measured)
  std::string text, tokenizer;  // measure KL(IN || OUT) on this text; tokenizer empty: IN's own
  size_t ctx = 256, threads = 0;
  std::string max_shard = "5G";
  LoadOptions load;
  // (stage: "convert", "measure" or "compare"; done; total)
  std::function<void(std::string_view, size_t, size_t)> progress;
};

// Writes job.out atomically and returns what `lowbit convert --json` prints: out, to, what the
// writer reports (export: RunExportJob's JSON; lowbit: its linears), "exact" (every matrix
// read back identical), "matrices" (each with from/to storage, max_abs_diff, rel_rms), max_abs_diff,
// and with a text "compare" (CompareJson). Bad options fail before anything is read.
nlohmann::json RunConvertJob(const ConvertJob& job);

}  // namespace lowbit
