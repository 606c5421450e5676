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

Model LoadModel(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (const auto folder = HfFolderOf(path)) return LoadHfModel(*folder);
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".gguf") return LoadGgufModel(path);
  if (path.extension() == ".bin") return LoadLlama2cModel(path);
  Fail("{}: unknown model format (expected a Hugging Face folder, a .gguf file or a llama2.c .bin)", path.string());
}

StreamedModel OpenModel(const std::filesystem::path& path) {
  if (const auto folder = HfFolderOf(path)) return OpenHfModel(*folder);
  return {LoadModel(path), nullptr};
}

}  // namespace lowbit
