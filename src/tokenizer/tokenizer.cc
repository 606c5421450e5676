#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/vocab.h"

namespace lowbit {

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  int32_t previous = -1;
  for (const int32_t id : ids) {
    text += DecodeToken(id, previous);
    previous = id;
  }
  return text;
}

int32_t AddedBos(const Tokenizer& tokenizer) {
  const std::vector<int32_t> ids = tokenizer.Encode("", /*add_bos=*/true);
  return ids.empty() ? -1 : ids.front();
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    // tokenizer.json first, as transformers' AutoTokenizer loads the fast tokenizer.
    if (fs::exists(path / "tokenizer.json")) return std::make_unique<HfTokenizer>(path / "tokenizer.json");
    if (fs::exists(path / "tokenizer.model")) return LoadSentencePiece(path / "tokenizer.model");
    Fail("{}: no tokenizer.json or tokenizer.model in this folder", path.string());
  }
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".json") return std::make_unique<HfTokenizer>(path);
  if (path.extension() == ".gguf") return MakeGgufTokenizer(ReadGgufVocab(GgufFile::Open(path)));
  if (path.extension() == ".bin")
    Fail("{}: llama2.c checkpoints carry no tokenizer; pass --tokenizer with a tokenizer.model", path.string());
  return LoadSentencePiece(path);
}

}  // namespace lowbit
