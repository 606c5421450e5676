// Text <-> token ids. Implementations: Hugging Face tokenizer.json (BPE), SentencePiece models
// (tokenizer.model, through Debian's libsentencepiece) and the vocabularies embedded in GGUF files
// (llama.cpp's "llama" SPM-style and "gpt2" byte-level BPE).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text`; never appends EOS. add_bos puts BOS first where the model's tokenizer adds
  // one (tokenizer_config.json's add_bos_token, GGUF's tokenizer.ggml.add_bos_token), as
  // transformers' add_special_tokens and llama.cpp's add_special do.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos) const = 0;
  // Token ids of a text with special tokens written in it (a rendered chat template): those become
  // their ids, as with llama.cpp's parse_special and transformers' tokenizers; no BOS is added.
  // tokenizer.json already reads them so; a SentencePiece tokenizer.model reads them as text.
  virtual std::vector<int32_t> EncodeWithSpecialTokens(std::string_view text) const { return Encode(text, false); }
  // The text a token contributes when decoding a stream (byte-fallback tokens give their byte,
  // SentencePiece's U+2581 becomes a space). `previous` is the id before it (-1 at the start),
  // so a leading space after BOS can be dropped as SentencePiece does.
  virtual std::string DecodeToken(int32_t id, int32_t previous) const = 0;
  // The raw vocabulary entry, for display.
  virtual std::string Piece(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;

  virtual std::string Decode(const std::vector<int32_t>& ids) const;  // concatenated DecodeToken
};

// The BOS id this tokenizer puts first when asked to (add_bos), or -1 where it puts none (Qwen2.5, Qwen3):
// what llama-perplexity and llama-imatrix write over each chunk's first token (their add_bos rule).
int32_t AddedBos(const Tokenizer& tokenizer);

// PATH may be a model folder (its tokenizer.json, else its tokenizer.model), a Hugging Face
// tokenizer.json, a tokenizer.model file, or a GGUF file (its embedded vocabulary, including
// vocabulary-only GGUF files). Throws Error naming the path.
std::unique_ptr<Tokenizer> LoadTokenizer(const std::filesystem::path& path);

}  // namespace lowbit
