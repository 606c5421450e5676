#include "pipeline/gguf_source.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/file_util.h"
#include "io/gguf.h"
#include "io/gguf_hf_config.h"
#include "io/gguf_model.h"
#include "tokenizer/hf_tokenizer_export.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

// The dtype a 16-bit file's dense tensors go out in: its own; fp16 for quantized files (dense tensors that
// fp16 cannot hold exactly are written in F32 by the writers); fp32 when everything is F32.
std::string TorchDtypeOf(const GgufFile& f) {
  bool f32_only = true;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.ggml_type == kGgmlBF16) return "bfloat16";
    f32_only = f32_only && t.ggml_type == kGgmlF32;
  }
  return f32_only ? "float32" : "float16";
}

}  // namespace

bool IsGgufFile(const fs::path& path) { return path.extension() == ".gguf" && fs::is_regular_file(path); }

GgufSourceFolder::GgufSourceFolder(const fs::path& gguf, const fs::path& out, const LoadOptions& options) {
  const GgufFile file = GgufFile::Open(gguf);
  // What cannot be written (the config, the vocabulary) fails before the weights are read.
  const nlohmann::ordered_json config =
      HfConfigOfGguf(ReadGgufConfig(file), file.GetString("general.architecture"), TorchDtypeOf(file), gguf.string());
  const fs::path base = fs::absolute(out).lexically_normal().string() + ".gguf-source";
  RemoveStaleTemporaries(base);
  dir_ = base.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  Model m;
  try {
    WriteFileAtomic(dir_ / "config.json", config.dump(2) + "\n");
    if (!WriteHfTokenizerFiles(file, dir_))
      std::fprintf(stderr, "lowbit: warning: %s has no vocabulary (tokenizer.ggml.*): the folder gets no tokenizer\n",
                   gguf.string().c_str());
    m = LoadGgufModel(gguf, options);
  } catch (...) {
    fs::remove_all(dir_);
    throw;
  }
  // The model as read from that folder: its architecture names the tensors (Mixtral's block_sparse_moe).
  ToRotateHalf(m);
  m.config.architecture = config["architectures"][0].get<std::string>();
  model_ = {std::move(m), nullptr};
}

GgufSourceFolder::~GgufSourceFolder() {
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

}  // namespace lowbit
