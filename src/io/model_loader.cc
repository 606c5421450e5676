#include "io/model_loader.h"

#include <optional>

#include "core/error.h"
#include "io/gguf_model.h"
#include "io/hf_model.h"
#include "io/llama2c.h"

namespace lowbit {
namespace {

// The Hugging Face folder `path` names (the folder itself or its config.json), if it names one.
std::optional<std::filesystem::path> HfFolderOf(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) return path;
  if (path.filename() == "config.json" && std::filesystem::exists(path)) return path.parent_path();
  return std::nullopt;
}

}  // namespace

Model LoadModel(const std::filesystem::path& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (const auto folder = HfFolderOf(path)) return LoadHfModel(*folder, options);
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".gguf") return LoadGgufModel(path, options);
  if (path.extension() == ".bin") {
    Model m = LoadLlama2cModel(path);
    // llama2.c files are fp32 read whole (small models): one pass over the loaded weights.
    if (!options.allow_nonfinite) CheckWeightsFinite(m.weights, m.source);
    return m;
  }
  Fail("{}: unknown model format (expected a Hugging Face folder, a .gguf file or a llama2.c .bin)", path.string());
}

StreamedModel OpenModel(const std::filesystem::path& path, const LoadOptions& options) {
  if (const auto folder = HfFolderOf(path)) return OpenHfModel(*folder, options);
  return {LoadModel(path, options), nullptr};
}

}  // namespace lowbit
