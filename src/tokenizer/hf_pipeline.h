// The text stages of a Hugging Face tokenizer.json around its model: normalizers, pre-tokenizers
// and decoders, each built from its JSON object. The components the causal-LM families use are
// implemented (Llama-2/3, Mistral, Qwen2/3, Phi-3, Gemma, DeepSeek, GPT-2 style files); any other
// `type` is an Error naming the file and key path rather than a tokenizer that silently differs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace lowbit {

// normalizer: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend.
class HfNormalizer {
 public:
  virtual ~HfNormalizer() = default;
  virtual void Apply(std::string& text) const = 0;
};
// nullptr for a null normalizer.
std::unique_ptr<HfNormalizer> ParseHfNormalizer(const JsonView& json);

// A piece of pre-tokenized text. `at_start`: it begins where the input text begins (Metaspace's
// prepend_scheme "first" adds its mark only there).
struct HfPiece {
  std::string text;
  bool at_start = false;
};

// pre_tokenizer: Sequence, ByteLevel, Split, Metaspace, Digits, WhitespaceSplit, Whitespace.
class HfPreTokenizer {
 public:
  virtual ~HfPreTokenizer() = default;
  virtual void Apply(std::vector<HfPiece>& pieces) const = 0;
};
std::unique_ptr<HfPreTokenizer> ParseHfPreTokenizer(const JsonView& json);

// decoder: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip. Decoding here is
// one token at a time (lowbit streams generated text), which equals the `tokenizers` library's
// whole-sequence decode for valid UTF-8 output: Strip after Fuse acts on the first token only.
class HfDecoder {
 public:
  virtual ~HfDecoder() = default;
  // `first`: the token starts the decoded text. `fused`: an earlier step fused the tokens into
  // one text, so steps that act per token (Strip) act on the first token only.
  virtual void Apply(std::string& token, bool first, bool fused) const = 0;
  virtual bool Fuses() const { return false; }
};
std::unique_ptr<HfDecoder> ParseHfDecoder(const JsonView& json);

}  // namespace lowbit
