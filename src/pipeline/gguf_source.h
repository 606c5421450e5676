// A GGUF file read as the Hugging Face folder llama.cpp's converter made it from, for the writers of
// Hugging Face-family folders (engine formats, lowbit folders): the model with its Q/K rows in
// rotate-half order, and a staging folder (`OUT.gguf-source.tmp-<pid>`, beside the output, removed on
// destruction) holding config.json (io/gguf_hf_config.h) and the tokenizer files of the file's vocabulary
// (tokenizer/hf_tokenizer_export.h), which the writers copy as a source folder's side files.
#pragma once

#include <filesystem>

#include "io/model_loader.h"

namespace lowbit {

// Whether `path` is a GGUF file (a .gguf regular file), which the folder writers take through GgufSourceFolder.
bool IsGgufFile(const std::filesystem::path& path);

class GgufSourceFolder {
 public:
  GgufSourceFolder(const std::filesystem::path& gguf, const std::filesystem::path& out, const LoadOptions& options);
  ~GgufSourceFolder();
  GgufSourceFolder(const GgufSourceFolder&) = delete;
  GgufSourceFolder& operator=(const GgufSourceFolder&) = delete;

  StreamedModel& model() { return model_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  StreamedModel model_;
};

}  // namespace lowbit
