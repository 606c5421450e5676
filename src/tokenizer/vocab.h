// Vocabularies embedded in GGUF files (tokenizer.ggml.* keys, docs formats.md 2.5) and the pieces
// that both GGUF tokenizers share. The tokenizers reproduce llama.cpp (src/llama-vocab.cpp) id for
// id, so the rules here (defaults per model, token attributes, user-defined token splitting)
// follow llama.cpp's loader rather than SentencePiece or Hugging Face.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lowbit {

class GgufFile;

// tokenizer.ggml.token_type values (on-disk, never renumber).
enum GgufTokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

struct VocabData {
  std::string source;  // where it came from (a file path), for error messages
  std::string model;   // tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE)
  std::string pre;     // tokenizer.ggml.pre, "" when absent
  std::vector<std::string> tokens;   // index = id
  std::vector<float> scores;         // empty: all 0
  std::vector<int32_t> token_types;  // GgufTokenType values; empty: all normal
  std::vector<std::string> merges;   // BPE "left right", rank = index
  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  bool add_space_prefix = false;  // SPM: prepend a space to the text (the "dummy prefix")
  bool add_bos = false;           // Encode(text, add_bos=true) puts BOS first (llama.cpp: add_special)
};

// Reads the tokenizer.ggml.* keys, filling what is absent with llama.cpp's defaults for the model
// (llama: bos 1, eos 2, unk 0, add_space_prefix and add_bos on; gpt2: bos = eos = 11, no unk).
// Throws Error naming the file and key for missing or mistyped keys and inconsistent arrays.
VocabData ReadGgufVocab(const GgufFile& file);

// "llama" -> SpmTokenizer, "gpt2" -> BpeTokenizer; any other model throws Error listing those.
std::unique_ptr<Tokenizer> MakeGgufTokenizer(const VocabData& vocab);

// Token attributes as llama.cpp derives them: the file's token type, then overrides by token text
// (end-of-generation and fill-in-the-middle tokens become control tokens; a few gpt-oss tokens
// become user-defined). Control/unknown tokens decode to nothing, user-defined ones are matched
// verbatim in the input before the model's own algorithm runs.
enum class TokenAttr : uint8_t {
  kUndefined, kNormal, kUnknown, kControl, kUserDefined, kUnused, kByte
};

// A piece of input text, or a user-defined token found in it (token >= 0).
struct TextFragment {
  std::string_view text;
  int32_t token = -1;
};

// The lookup tables both tokenizers need, built and validated once per vocabulary.
class VocabIndex {
 public:
  // Throws Error (naming vocab.source) for an empty vocabulary, duplicate tokens, arrays whose
  // length differs from the token count, or special ids outside the vocabulary.
  explicit VocabIndex(const VocabData& vocab);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& text(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  float score(int32_t id) const {
    return scores_.empty() ? 0.0f : scores_[static_cast<size_t>(id)];
  }
  TokenAttr attr(int32_t id) const { return attrs_[static_cast<size_t>(id)]; }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  // The id whose text is exactly `piece`, or -1.
  int32_t Find(std::string_view piece) const;
  // Splits `text` around occurrences of user-defined tokens (longest tokens first, then
  // left to right), as llama.cpp does for input that is not parsed for special tokens; with
  // parse_special, around control and unknown tokens too (llama.cpp's parse_special).
  std::vector<TextFragment> Partition(std::string_view text, bool parse_special = false) const;
  // The text of token `id` in a SentencePiece-style vocabulary, as llama.cpp renders it: a normal
  // piece with U+2581 read as a space, a byte token ("<0xAB>") as its byte, a user-defined one as
  // written; control, unknown and unused tokens give "".
  std::string SentencePieceText(int32_t id) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenAttr> attrs_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::vector<int32_t> user_defined_;  // longest text first
  std::vector<int32_t> special_;       // user-defined, control and unknown tokens, longest text first
};

}  // namespace lowbit
