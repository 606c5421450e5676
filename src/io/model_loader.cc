#include "io/model_loader.h"

#include "core/error.h"
#include "io/gguf_model.h"
#include "io/hf_model.h"
#include "io/llama2c.h"

namespace lowbit {

Model LoadModel(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return LoadHfModel(path);
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".gguf") return LoadGgufModel(path);
  if (path.extension() == ".bin") return LoadLlama2cModel(path);
  if (path.filename() == "config.json") return LoadHfModel(path.parent_path());
  Fail("{}: unknown model format (expected a Hugging Face folder, a .gguf file or a llama2.c .bin)", path.string());
}

StreamedModel OpenModel(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return OpenHfModel(path);
  if (path.filename() == "config.json") return OpenHfModel(path.parent_path());
  return {LoadModel(path), nullptr};
}

}  // namespace lowbit
