#include "pipeline/session.h"

#include <cctype>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file_util.h"
#include "io/engine_checkpoint.h"
#include "model/calibration.h"
#include "model/kv_calibration.h"
#include "model/quantize_weights.h"
#include "tokenizer/chat_template.h"

namespace lowbit {

KvCacheOptions KvCacheOptionsFor(const std::string& dtype, const std::string& model_path,
                                 const std::string& scales_file, uint32_t n_layers) {
  KvCacheOptions kv;
  kv.dtype = ParseKvDtype(dtype);
  if (kv.dtype != KvDtype::kFp8E4M3 && kv.dtype != KvDtype::kFp8E5M2) {
    if (!scales_file.empty()) Fail("--kv-scales is for fp8 KV caches, not {}", dtype);
    return kv;
  }
  // --kv-scales, else kv_cache_scales.json beside the model, else the checkpoint's own k_scale / v_scale.
  std::filesystem::path path = scales_file;
  if (path.empty() && std::filesystem::exists(KvScalesPathFor(model_path))) path = KvScalesPathFor(model_path);
  std::optional<KvScales> found;
  if (!path.empty()) {
    found = ReadKvScales(path, n_layers);
  } else if ((found = ReadCheckpointKvScales(model_path, n_layers))) {
    path = std::filesystem::path(model_path) / "config.json";
  } else {
    std::fprintf(stderr, "lowbit: warning: FP8 KV cache without calibrated scales (lowbit calibrate-kv): using 1.0\n");
    return kv;
  }
  const KvScales& scales = *found;
  if (scales.dtype != kv.dtype)
    Fail("{}: scales were calibrated for a {} cache, not {}", path.string(), KvDtypeName(scales.dtype), dtype);
  kv.k_scales = scales.k;
  kv.v_scales = scales.v;
  return kv;
}

std::unique_ptr<Tokenizer> LoadTokenizerFor(const ModelConfig& config, const std::string& model_path,
                                            const std::string& tokenizer_path) {
  auto tokenizer = LoadTokenizer(tokenizer_path.empty() ? model_path : tokenizer_path);
  if (tokenizer->vocab_size() > static_cast<int32_t>(config.vocab_size))
    Fail("{}: the tokenizer has {} tokens but the model only {}", model_path, tokenizer->vocab_size(),
         config.vocab_size);
  return tokenizer;
}

std::string ChatPrompt(const std::string& model_path, const std::string& system, const std::string& user) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  return ApplyChatTemplate(LoadChatTemplate(model_path), messages, /*add_generation_prompt=*/true);
}

LoadedModel LoadModelWithTokenizer(const std::string& model_path, const std::string& tokenizer_path,
                                   const std::string& quantize, const LoadOptions& options) {
  LoadOptions runtime = options;
  runtime.keep_16bit = true;
  LoadedModel m{LoadModel(model_path, runtime), nullptr};
  m.tokenizer = LoadTokenizerFor(m.model.config, model_path, tokenizer_path);
  if (!quantize.empty()) QuantizeLinears(m.model.weights, ParseScheme(quantize));
  return m;
}

std::vector<int32_t> TokenizeFile(const Tokenizer& tokenizer, const std::string& path) {
  return tokenizer.Encode(ReadTextFile(path), /*add_bos=*/true);
}

uint64_t ParseByteSize(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    Fail("{}: '{}' is not a size (write e.g. 512M or 2G)", flag, text);
  }
  const std::string unit = text.substr(used);
  static const std::string kUnits = "KMGT";  // powers of 1024
  const size_t power = unit.empty() ? std::string::npos : kUnits.find(static_cast<char>(std::toupper(unit[0])));
  if (!unit.empty() && (unit.size() != 1 || power == std::string::npos))
    Fail("{}: unknown unit '{}' in '{}' (K, M, G or T)", flag, unit, text);
  const double scale = unit.empty() ? 1.0 : std::ldexp(1.0, 10 * static_cast<int>(power + 1));
  if (!(value > 0) || !std::isfinite(value)) Fail("{}: '{}' must be a positive size", flag, text);
  return static_cast<uint64_t>(value * scale);
}

std::vector<std::vector<int32_t>> CalibrationWindows(const Tokenizer& tokenizer, std::string_view text,
                                                     const std::string& file, size_t samples, size_t length,
                                                     uint64_t seed) {
  try {
    return SampleTextWindows(
        text, [&](std::string_view line) { return tokenizer.Encode(line, /*add_bos=*/false); }, samples, length, seed);
  } catch (const Error& e) {
    Fail("{}: {}", file, e.what());
  }
}

}  // namespace lowbit
