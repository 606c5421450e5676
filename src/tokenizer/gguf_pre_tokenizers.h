// The pre-tokenizer of a GGUF "gpt2" vocabulary by its tokenizer.ggml.pre name: the regexes
// llama.cpp applies in turn (each splits the pieces the previous one left, keeping matches and
// the text between them), written as the model families' own tokenizer.json files have them where
// llama.cpp splits alike, else as llama.cpp rewrites them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

struct GgufPreTokenizer {
  std::vector<std::string_view> names;    // tokenizer.ggml.pre values
  std::vector<std::string_view> regexes;  // PCRE2 syntax, applied in order
  bool ignore_merges = false;             // a piece that is a whole token is not merged (Llama-3)
  bool add_bos = false;                   // llama.cpp's default when the file has no add_bos_token
  std::string_view hf_regex = {};         // the tokenizer.json regex, where llama.cpp rewrote it
  // SentencePiece-style BPE (Gemma 4): spaces become U+2581 and pieces stay raw UTF-8 (no byte-level
  // alphabet); a piece of newlines only is looked up whole; a piece the vocabulary lacks falls back
  // to its <0xAB> byte tokens.
  bool raw_utf8 = false;
  bool no_default_bos = false;  // llama.cpp clears the default BOS id (GLM): only the file's bos_token_id names one
};

// Whether llama.cpp splits a "gpt2" vocabulary named `pre` with exactly GPT-2's regex (which
// BpeTokenizer::PreTokenize implements by hand); FindGgufPreTokenizer has the others.
bool SplitsLikeGpt2(std::string_view pre);

// The pre-tokenizer for `pre`, or nullptr when llama.cpp's name is not one lowbit knows.
const GgufPreTokenizer* FindGgufPreTokenizer(std::string_view pre);

// The tokenizer.ggml.pre name of a byte-level family whose pre-tokenizer is the single regex `regex`
// (as a tokenizer.json Split holds it, or as llama.cpp rewrote it), or "" when none is.
std::string_view GgufPreNameOfRegex(std::string_view regex);

// The names FindGgufPreTokenizer knows (and SplitsLikeGpt2's first, when asked), for error messages.
std::string KnownGgufPreTokenizers(bool gpt2_names = false);

}  // namespace lowbit
