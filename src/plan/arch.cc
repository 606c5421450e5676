#include "plan/arch.h"

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_model.h"

namespace lowbit {

ModelArch ArchFromConfig(const ModelConfig& config, std::string name) {
  ModelArch a;
  a.name = std::move(name);
  a.n_layers = config.n_layers;
  a.hidden = config.dim;
  a.n_heads = config.n_heads;
  a.n_kv_heads = config.n_kv_heads;
  a.head_dim = config.head_dim;
  a.ffn = config.ffn_dim;
  a.vocab = config.vocab_size;
  a.tied = config.tie_embeddings;
  a.qkv_bias = config.qkv_bias;
  a.qk_norm = config.qk_norm;
  a.source = config.architecture;
  return a;
}

namespace {

ModelArch FromHfConfig(const std::filesystem::path& config_json, std::string name) {
  try {
    return ArchFromConfig(ReadHfConfig(config_json), std::move(name));
  } catch (const Error& e) {
    // ReadHfConfig only knows the dense architectures the engine runs; MoE and MLA models are
    // still plannable from their presets, so say so instead of leaving the user stuck.
    const std::string what = e.what();
    if (what.find("unsupported architecture") != std::string::npos)
      Fail("{}; for planning, --preset also covers mixtral-8x7b and deepseek-v3", what);
    throw;
  }
}

}  // namespace

ModelArch ArchFromPath(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const fs::path config = path / "config.json";
    if (!fs::exists(config))
      Fail("{}: folder has no config.json (expected a Hugging Face model folder)", path.string());
    const std::string name = path.filename().empty() ? path.parent_path().filename().string()
                                                     : path.filename().string();
    return FromHfConfig(config, name);
  }
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".gguf") {
    const GgufFile file = GgufFile::Open(path);
    return ArchFromConfig(ReadGgufConfig(file), path.stem().string());
  }
  if (path.extension() == ".json") {
    const fs::path parent = fs::absolute(path).parent_path();
    return FromHfConfig(path, parent.filename().string());
  }
  Fail("{}: unknown model input (expected config.json, a folder holding one, or a .gguf file)", path.string());
}

}  // namespace lowbit
