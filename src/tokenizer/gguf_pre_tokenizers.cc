#include "tokenizer/gguf_pre_tokenizers.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace lowbit {
namespace {

// PCRE2 syntax; \x{...} escapes keep code points that an editor's Unicode normalization would
// silently change (DeepSeek's list holds compatibility singletons such as U+2126 OHM SIGN).
constexpr std::string_view kGpt2NoTail = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama-3's, with white space taken in runs of 512, 256, ... 4, then 1-2, then 1.
constexpr std::string_view kJais2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S))"
    R"(|\s{1,2}(?!\S)|\s{1})";
// Tekken (Mistral-Nemo, Mistral Small 3) and GPT-4o (Llama-4): llama.cpp reads each non-ASCII
// letter as one "letter" class, so it rewrites the upper/lower-case classes of the tokenizer.json
// regex (kTekkenHf, kGpt4oHf) as "a letter other than a-z" / "a letter other than A-Z". These are
// llama.cpp's rewrites: a GGUF file is tokenized as llama.cpp tokenizes it.
constexpr std::string_view kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+)"
    R"(((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenHf =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?)"
    R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4oHf =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDeepseekLetters =
    R"(\s?[A-Za-z\x{b5}\x{c0}-\x{d6}\x{d8}-\x{f6}\x{f8}-\x{1ba}\x{1bc}-\x{1bf}\x{1c4}-\x{293}\x{295}-\x{2af})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37b}-\x{37d}\x{37f}\x{386}\x{388}-\x{38a}\x{38c}\x{38e}-\x{3a1})"
    R"(\x{3a3}-\x{3f5}\x{3f7}-\x{481}\x{48a}-\x{52f}\x{531}-\x{556}\x{10a0}-\x{10c5}\x{13a0}-\x{13f5})"
    R"(\x{13f8}-\x{13fd}\x{1c90}-\x{1cba}\x{1cbd}-\x{1cbf}\x{1d00}-\x{1d2b}\x{1d6b}-\x{1d77}\x{1d79}-\x{1d9a})"
    R"(\x{1e00}-\x{1f15}\x{1f18}-\x{1f1d}\x{1f20}-\x{1f45}\x{1f48}-\x{1f4d}\x{1f50}-\x{1f57}\x{1f59}\x{1f5b})"
    R"(\x{1f5d}\x{1f5f}-\x{1f7d}\x{1f80}-\x{1fb4}\x{1fb6}-\x{1fbc}\x{1fbe}\x{1fc2}-\x{1fc4}\x{1fc6}-\x{1fcc})"
    R"(\x{1fd0}-\x{1fd3}\x{1fd6}-\x{1fdb}\x{1fe0}-\x{1fec}\x{1ff2}-\x{1ff4}\x{1ff6}-\x{1ffc}\x{2102}\x{2107})"
    R"(\x{210a}-\x{2113}\x{2115}\x{2119}-\x{211d}\x{2124}\x{2126}\x{2128}\x{212a}-\x{212d}\x{212f}-\x{2134})"
    R"(\x{2139}\x{213c}-\x{213f}\x{2145}-\x{2149}\x{214e}\x{2183}\x{2184}\x{2c00}-\x{2c7b}\x{2c7e}-\x{2ce4})"
    R"(\x{2ceb}-\x{2cee}\x{2cf2}\x{2cf3}\x{a640}-\x{a66d}\x{a680}-\x{a69b}\x{a722}-\x{a76f}\x{a771}-\x{a787})"
    R"(\x{a78b}-\x{a78e}\x{ab70}-\x{abbf}\x{fb00}-\x{fb06}\x{fb13}-\x{fb17}\x{ff21}-\x{ff3a}\x{ff41}-\x{ff5a})"
    R"(\x{10400}-\x{1044f}\x{104b0}-\x{104d3}\x{104d8}-\x{104fb}\x{10c80}-\x{10cb2}\x{10cc0}-\x{10cf2})"
    R"(\x{118a0}-\x{118df}\x{1e900}-\x{1e943}]+)";
constexpr std::string_view kCjkHangul = R"([\x{4e00}-\x{9fa5}\x{800}-\x{4e00}\x{ac00}-\x{d7ff}]+)";
constexpr std::string_view kCjkKana = R"([\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+)";
// DeepSeek-V3's words: an ASCII punctuation mark may lead a run of ASCII letters.
#define LOWBIT_PUNCTUATED_WORDS R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
constexpr std::string_view kDeepseekV3Words =
    LOWBIT_PUNCTUATED_WORDS R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kSpark25Words = LOWBIT_PUNCTUATED_WORDS R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";
#undef LOWBIT_PUNCTUATED_WORDS
// BLOOM-style: a run of anything but white space and the listed punctuation (llama.cpp's list,
// with its parentheses and '|' inside the class).
constexpr std::string_view kBloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{ff0c}\x{3001}\x{964}\x{6d4}\x{60c})]+)";

// tokenizer.ggml.pre values for which llama.cpp splits with exactly the GPT-2 regex.
constexpr std::string_view kGpt2Names[] = {"gpt-2",  "phi-2", "jina-es", "jina-de",     "gigachat",
                                           "a.x-4.0", "mellum", "jina-v1-en", "roberta-bpe", "exaone4",
                                           "mpt",     "olmo",  "jais",    "trillion",    "granite-docling"};

const std::vector<GgufPreTokenizer>& Table() {
  static const std::vector<GgufPreTokenizer> table = {
      // The first name of each entry is what lowbit writes for a tokenizer.json with that regex.
      // Names, regexes and flags are llama.cpp's (llama-vocab.cpp): ignore_merges, then add_bos.
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      // GLM: Llama 3's regex with the contractions' cases spelled out, no default BOS.
      {.names = {"chatglm-bpe"}, .regexes = {kLlama3}, .no_default_bos = true},
      {.names = {"glm4", "glm5"}, .regexes = {kLlama3}, .ignore_merges = true, .no_default_bos = true},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open", "grok-2"},
       {kQwen2}},
      {{"qwen35"}, {kQwen35}},
      {{"jais-2"}, {kJais2}},
      {{"tekken"}, {kTekken}, true, true, kTekkenHf},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}, false, false, kGpt4oHf},
      {{"deepseek-llm"},
       {R"([\r\n])", kDeepseekLetters, R"(\s?[!-/:-~\x{ff01}-\x{ff0f}\x{ff1a}-\x{ff5e}\x{2018}-\x{201f}\x{3000}-\x{3002}]+)",
        R"(\s+$)", kCjkHangul, R"(\p{N}+)"}},
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"}},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
       {R"(\p{N}{1,3})", kCjkKana, kDeepseekV3Words}},
      {{"spark2_5"},
       {R"(\p{N}{1,3})", kCjkKana, kSpark25Words, R"(\p{N})"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTail, R"([0-9][0-9][0-9])"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", kGpt2NoTail}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, R"(\p{N})"}},
      {{"chameleon"},
       {R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", "([\t\n]|    |  )", R"(\p{N})",
        R"([\p{P}!-/:-@\[-`{-~])", kGpt2NoTail},
       false, true},
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      {{"seed-coder"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"ufakzeka"}, {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"laguna"}, {R"([^\n]+|[\n]+)", kQwen2}},
      {{"exaone-moe"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N})"
        R"(| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      {.names = {"gemma4", "granite-embed-multi-311m"}, .regexes = {R"([^\n]+|[\n]+)"}, .add_bos = true,
       .raw_utf8 = true},
      {{"minicpm5"},
       {R"(\p{N}{1,3})",
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true},
  };
  return table;
}

}  // namespace

bool SplitsLikeGpt2(std::string_view pre) {
  return std::find(std::begin(kGpt2Names), std::end(kGpt2Names), pre) != std::end(kGpt2Names);
}

const GgufPreTokenizer* FindGgufPreTokenizer(std::string_view pre) {
  for (const GgufPreTokenizer& entry : Table())
    for (const std::string_view name : entry.names)
      if (name == pre) return &entry;
  return nullptr;
}

std::string_view GgufPreNameOfRegex(std::string_view regex) {
  for (const GgufPreTokenizer& entry : Table())
    if (!entry.raw_utf8 && entry.regexes.size() == 1 && (entry.regexes[0] == regex || entry.hf_regex == regex))
      return entry.names.front();
  return {};
}

std::string KnownGgufPreTokenizers(bool gpt2_names) {
  std::string out;
  if (gpt2_names)
    for (const std::string_view name : kGpt2Names) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", name);
  for (const GgufPreTokenizer& entry : Table())
    for (const std::string_view name : entry.names) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", name);
  return out;
}

}  // namespace lowbit
