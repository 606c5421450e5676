// `lowbit bench codecs`: single-core throughput of quantize (fp32 in) and dequantize (fp32 out)
// for every format, on a 512 x 4096 weight (8 MiB of fp32). The runtime benchmarks (memory, gemv,
// decode, prefill, attention) are in cmd_bench_runtime.cc. `lowbit bench tokenize`: a tokenizer's
// load time and encode speed on a text file.
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/front_door.h"
#include <fmt/format.h>

#include "cli/output.h"
#include "core/error.h"
#include "core/file_util.h"
#include "quant/rtn.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

constexpr uint64_t kRows = 512, kCols = 4096;

// Runs `op` until `seconds` have passed (at least 3 times) and returns seconds per call.
template <class Op>
double TimePerCall(Op&& op, double seconds) {
  using Clock = std::chrono::steady_clock;
  op();  // warm-up
  const auto start = Clock::now();
  int calls = 0;
  double elapsed = 0;
  do {
    op();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds || calls < 3);
  return elapsed / calls;
}

void RunCodecs(const std::vector<std::string>& formats, double seconds, bool json) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(kRows * kCols), out(kRows * kCols);
  for (float& v : w) v = normal(rng);
  const double bytes = static_cast<double>(w.size()) * sizeof(float);

  std::vector<std::string> names = formats;
  if (names.empty())
    for (const SchemePreset& p : SchemePresets())
      if (p.name != "fp32") names.emplace_back(p.name);

  const bool show_progress = isatty(STDERR_FILENO) != 0;  // no control characters in logs
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const std::string& name : names) {
    const QuantScheme scheme = ParseScheme(name);
    QuantizedTensor q = QuantizeRtn(w, kRows, kCols, scheme, "bench");
    const double quantize_s = TimePerCall([&] { q = QuantizeRtn(w, kRows, kCols, scheme, "bench"); }, seconds);
    const double dequantize_s = TimePerCall(
        [&] {
          for (uint64_t r = 0; r < kRows; ++r) q.DequantizeRow(r, &out[r * kCols]);
        },
        seconds);
    const double qg = bytes / quantize_s / 1e9, dg = bytes / dequantize_s / 1e9;
    results.push_back({{"format", name}, {"scheme", scheme.ToString()}, {"op", "quantize"}, {"gbps", qg}});
    results.push_back({{"format", name}, {"scheme", scheme.ToString()}, {"op", "dequantize"}, {"gbps", dg}});
    rows.push_back({name, scheme.ToString(), fmt::format("{:.4f}", q.bits_per_weight()), fmt::format("{:.2f}", qg),
                    fmt::format("{:.2f}", dg)});
    if (show_progress) std::fprintf(stderr, "\rbench codecs: %-12s done", name.c_str());
  }
  if (json) {
    std::puts(results.dump(2).c_str());
    return;
  }
  if (show_progress) std::fprintf(stderr, "\r%40s\r", "");
  PrintTable({"format", "scheme", "bits/weight", "quantize GB/s", "dequantize GB/s"}, rows);
  std::puts("\nOne core; GB/s of fp32 consumed (quantize) or produced (dequantize), 512 x 4096 weight.");
}

void RunTokenize(const std::string& model, const std::string& file, int rounds, bool json) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto start = Clock::now();
  const auto tokenizer = LoadTokenizer(model);
  const double load_s = seconds_since(start);
  const std::string text = ReadTextFile(file);
  double best_s = 0;
  size_t tokens = 0;
  for (int round = 0; round < rounds; ++round) {
    start = Clock::now();
    tokens = tokenizer->Encode(text, /*add_bos=*/false).size();
    const double s = seconds_since(start);
    if (round == 0 || s < best_s) best_s = s;
  }
  const double mb_s = text.size() / best_s / 1e6, tok_s = tokens / best_s;
  if (json) {
    const nlohmann::json out = {{"model", model}, {"file", file}, {"bytes", text.size()}, {"tokens", tokens},
                                {"load_seconds", load_s}, {"encode_seconds", best_s}, {"mb_per_s", mb_s},
                                {"tokens_per_s", tok_s}};
    std::puts(out.dump(2).c_str());
    return;
  }
  PrintTable({"tokens", "load s", "encode s", "MB/s", "tokens/s"},
             {{std::to_string(tokens), fmt::format("{:.3f}", load_s), fmt::format("{:.3f}", best_s),
               fmt::format("{:.2f}", mb_s), fmt::format("{:.0f}", tok_s)}});
  std::printf("\nOne thread; encode time is the best of %d rounds.\n", rounds);
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* codecs = bench->add_subcommand("codecs", "Quantize/dequantize throughput per format, one core");
  auto formats = std::make_shared<std::vector<std::string>>();
  auto seconds = std::make_shared<double>(0.3);
  auto json = std::make_shared<bool>(false);
  codecs->add_option("--format", *formats, "Formats to measure (default: all)")->delimiter(',');
  codecs->add_option("--seconds", *seconds, "Minimum time per measurement")->default_val(0.3)->check(Positive());
  codecs->add_flag("--json", *json, "Print JSON");
  codecs->callback([formats, seconds, json] { RunCodecs(*formats, *seconds, *json); });
  auto* tokenize = bench->add_subcommand("tokenize", "A tokenizer's load time and encode speed on a text file");
  auto model = std::make_shared<std::string>(), file = std::make_shared<std::string>();
  auto rounds = std::make_shared<int>(3);
  tokenize->add_option("--model", *model, "Model folder, tokenizer.json, tokenizer.model or GGUF file")->required();
  tokenize->add_option("--file", *file, "Text to encode")->required();
  tokenize->add_option("--rounds", *rounds, "Encode this many times, best of them")->default_val(3)->check(CLI::PositiveNumber);
  tokenize->add_flag("--json", *json, "Print JSON");
  tokenize->callback([model, file, rounds, json] { RunTokenize(*model, *file, *rounds, *json); });
  AddBenchRuntimeCommands(*bench);
}

}  // namespace lowbit::cli
