// llama.cpp's "gpt2" byte-level BPE tokenizer over a GGUF vocabulary. The text is first split by
// the pre-tokenizer tokenizer.ggml.pre names: for the GPT-2 regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// ("gpt-2", "phi-2", "mpt", "olmo", ...) by hand over code points, with the Unicode 15.1
// letter/number classes llama.cpp uses; for the other families llama.cpp knows (llama-bpe, qwen2,
// deepseek-llm, deepseek-coder, falcon, starcoder, refact, command-r, ...) by their regex lists
// (gguf_pre_tokenizers.h) through PCRE2. Each piece's UTF-8 bytes are mapped to the GPT-2
// byte-to-unicode alphabet (formats.md 8.3), and adjacent symbols merge by merge rank (lowest
// first, leftmost on ties). Gemma 4's SentencePiece-style vocabularies ("gemma4") keep raw UTF-8
// pieces instead, with spaces as U+2581 and <0xAB> byte tokens for what the vocabulary lacks. Ids
// match llama.cpp's llama_tokenize with parse_special = false (BOS where the vocabulary adds it,
// when asked). An unknown pre-tokenizer throws Error rather than tokenize differently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace lowbit {

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(const VocabData& vocab);

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override {
    return EncodeText(text, add_bos, /*parse_special=*/false);
  }
  std::vector<int32_t> EncodeWithSpecialTokens(std::string_view text) const override {
    return EncodeText(text, /*add_bos=*/false, /*parse_special=*/true);
  }
  std::string DecodeToken(int32_t id, int32_t previous) const override;
  std::string Piece(int32_t id) const override;
  int32_t vocab_size() const override { return index_.size(); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }

  // The GPT-2 pre-tokenizer split of `text` (UTF-8 in, UTF-8 pieces out; invalid bytes become
  // U+FFFD as in llama.cpp). Exposed for tests.
  static std::vector<std::string> PreTokenize(std::string_view text);
  // The split by regexes_ (the families other than GPT-2's).
  std::vector<std::string> RegexPreTokenize(std::string_view text) const;

 private:
  std::vector<int32_t> EncodeText(std::string_view text, bool add_bos, bool parse_special) const;
  // Appends the ids of one pre-token, already mapped to the byte-level alphabet (or raw UTF-8).
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  int32_t Rank(std::string_view left, std::string_view right) const;

  VocabIndex index_;
  std::string source_;
  int32_t bos_id_, eos_id_;
  bool add_space_prefix_;
  bool adds_bos_;  // tokenizer.ggml.add_bos_token: Encode's add_bos puts BOS first only when set
  std::vector<Regex> regexes_;  // empty: the GPT-2 split
  bool ignore_merges_ = false;
  bool raw_utf8_ = false;  // SentencePiece-style pieces (GgufPreTokenizer::raw_utf8)
  // "left right" -> rank. Symbols of the byte-level alphabet never contain a space, so joining a
  // pair with one space is unambiguous.
  std::unordered_map<std::string, int32_t> ranks_;
};

}  // namespace lowbit
