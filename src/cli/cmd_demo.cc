// `lowbit demo`: RTN over every linear weight of the bundled model in the formats people deploy,
// with bits/weight and mean SQNR per format; then the fp32 model's perplexity on the KJV test
// text and a short generation.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include <fmt/format.h>

#include "cli/output.h"
#include "pipeline/generate.h"
#include "eval/scoring.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "quant/error_report.h"
#include "quant/rtn.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

constexpr const char* kDefaultModel = "models/kjv-llama-7m";
constexpr const char* kTestText = "data/kjv-test.txt";
constexpr const char* kPrompt = "And God said,";
constexpr size_t kCtx = 256;
constexpr const char* kFormats[] = {"int8", "int4:g128", "int4:g32", "int3:g128", "fp8_e4m3", "mxfp4", "nvfp4"};

bool IsLinearWeight(const TensorView& t) {
  return t.shape.size() == 2 && t.name.ends_with("_proj.weight");
}

void Run(const std::string& model_path) {
  const SafetensorsModel model = SafetensorsModel::Open(model_path);
  std::vector<const TensorView*> linears;
  uint64_t params = 0;
  for (const std::string& name : model.names()) {
    const TensorView& t = model.Get(name);
    if (IsLinearWeight(t)) {
      linears.push_back(&t);
      params += t.numel();
    }
  }
  if (linears.empty()) Fail("{}: no linear weights (*_proj.weight) found", model_path);
  std::printf("lowbit demo: RTN on the %zu linear weights (%.2f M parameters) of %s\n\n", linears.size(),
              params / 1e6, model_path.c_str());
  std::vector<std::vector<float>> weights;
  for (const TensorView* t : linears) weights.push_back(ToFloat32(*t));

  std::vector<std::vector<std::string>> rows;
  for (const char* spec : kFormats) {
    const QuantScheme scheme = ParseScheme(spec);
    double sqnr_sum = 0, bits = 0, worst = 1e30;
    for (size_t i = 0; i < linears.size(); ++i) {
      const uint64_t r = linears[i]->shape[0], c = linears[i]->shape[1];
      const QuantizedTensor q = QuantizeRtn(weights[i], r, c, scheme, linears[i]->name);
      const ErrorReport e = MeasureError(weights[i], q.Dequantize(), r, c);
      sqnr_sum += e.sqnr_db;
      worst = std::min(worst, e.sqnr_db);
      bits += q.bits_per_weight() * static_cast<double>(q.numel());
    }
    rows.push_back({spec, scheme.ToString(), fmt::format("{:.4f}", bits / static_cast<double>(params)),
                    fmt::format("{:.2f}", sqnr_sum / linears.size()), fmt::format("{:.2f}", worst)});
  }
  PrintTable({"format", "scheme", "bits/weight", "mean SQNR dB", "worst SQNR dB"}, rows);

  // The fp32 model at work: perplexity on the KJV test text and a short generation.
  const LoadedModel m = LoadModelWithTokenizer(model_path, "");
  const std::vector<int32_t> tokens = TokenizeFile(*m.tokenizer, kTestText);
  const ChunkPlan plan = PlanChunks(tokens.size(), kCtx);
  Engine engine(m.model, 0);
  ProgressBar bar("ppl", plan.chunks);
  const auto start = std::chrono::steady_clock::now();
  const NllStats nll = Perplexity(engine, tokens, plan, AddedBos(*m.tokenizer),
                                  [&](size_t done, size_t) { bar.Update(done); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nfp32 perplexity on %s (ctx %zu, %zu tokens scored): %.4f +/- %.4f  [%.0f tokens/s]\n", kTestText,
              kCtx, nll.count, nll.ppl(), nll.ppl_stderr(), static_cast<double>(plan.chunks * kCtx) / seconds);
  std::printf("\ngreedy generation:\n");
  std::fputs(kPrompt, stdout);
  const GenerationResult g = Generate(m, kPrompt, /*chat=*/false, 48, SamplerOptions{}, 0, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout), std::fflush(stdout);
  });
  std::printf("\n[prompt %.0f tokens/s, decode %.0f tokens/s]\n", g.prompt_tps, g.decode_tps);
}

}  // namespace

void AddDemoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Quantize the bundled model's linear weights in common formats");
  auto model = std::make_shared<std::string>(kDefaultModel);
  cmd->add_option("--model", *model, "Model folder")->default_val(kDefaultModel);
  cmd->callback([model] { Run(*model); });
}

}  // namespace lowbit::cli
