#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <variant>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_pre_tokenizers.h"

namespace lowbit {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// A special-token id key. llama.cpp ignores (with a warning) an id outside the vocabulary and
// keeps its default, so an out-of-range value is not an error here either.
int32_t ReadSpecialId(const GgufFile& file, std::string_view key, int32_t fallback,
                      size_t n_tokens) {
  if (file.Find(key) == nullptr) return fallback;
  const uint32_t id = file.GetU32(key);
  return id < n_tokens ? static_cast<int32_t>(id) : fallback;
}

// Token texts that llama.cpp (llama-cpp-python 0.3.36's) turns into control tokens whatever the file
// says: the end-of-generation names it recognises and the fill-in-the-middle markers. Non-ASCII
// bytes are escapes: fullwidth bars (U+FF5C) and U+2581 that an editor could normalize away.
constexpr std::string_view kForcedControl[] = {
    "</s>", "<EOT>", "<MID>", "<PAD>", "<PRE>", "<REPO>", "<SUF>", "<end_of_turn>", "<end_of_utterance>", "<eos>",
    "<fim-middle>", "<fim-pad>", "<fim-prefix>", "<fim-repo>", "<fim-suffix>", "<fim_middle>", "<fim_pad>",
    "<fim_prefix>", "<fim_suffix>", "<reponame>", "<turn|>", "<|calls|>", "<|call|>", "<|code_middle|>",
    "<|code_prefix|>", "<|code_suffix|>", "<|end_of_text|>", "<|endoftext|>", "<|end|>", "<|eom_id|>", "<|eot_id|>",
    "<|file_sep|>", "<|fim_middle|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_repo|>", "<|fim_suffix|>", "<|flush|>",
    "<|im_end|>", "<|middle|>", "<|prefix|>", "<|repo_name|>", "<|return|>", "<|suffix|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "[EOS]", "[EOT]", "[PAD]", "[e~[", "_<EOT>",
    "\xE2\x96\x81<MID>", "\xE2\x96\x81<PRE>", "\xE2\x96\x81<SUF>",
};
// gpt-oss ("harmony") tokens that llama.cpp always renders, i.e. treats as user-defined.
constexpr std::array<std::string_view, 4> kForcedUserDefined = {
    "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

TokenAttr AttrFromType(int32_t type) {
  switch (type) {
    case kTokenNormal: return TokenAttr::kNormal;
    case kTokenUnknown: return TokenAttr::kUnknown;
    case kTokenControl: return TokenAttr::kControl;
    case kTokenUserDefined: return TokenAttr::kUserDefined;
    case kTokenUnused: return TokenAttr::kUnused;
    case kTokenByte: return TokenAttr::kByte;
    default: return TokenAttr::kUndefined;
  }
}

}  // namespace

VocabData ReadGgufVocab(const GgufFile& file) {
  VocabData vocab;
  vocab.source = file.path().string();
  vocab.model = file.GetString(kModelKey);
  if (file.Find(kPreKey) != nullptr) vocab.pre = file.GetString(kPreKey);
  vocab.tokens = file.GetArrayOf<std::string>(kTokensKey);
  const size_t n = vocab.tokens.size();
  if (n == 0) Fail("{}: {} is empty", vocab.source, kTokensKey);
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    Fail("{}: {} has {} entries, more than token ids can address", vocab.source, kTokensKey, n);

  // llama.cpp reads these arrays as raw f32/i32 data, so other element types are rejected.
  if (file.Find(kScoresKey) != nullptr) {
    vocab.scores = file.GetArrayOf<float>(kScoresKey);
    if (vocab.scores.size() != n)
      Fail("{}: {} has {} entries but {} has {}", vocab.source, kScoresKey, vocab.scores.size(),
           kTokensKey, n);
  }
  if (file.Find(kTypesKey) != nullptr) {
    vocab.token_types = file.GetArrayOf<int32_t>(kTypesKey);
    if (vocab.token_types.size() != n)
      Fail("{}: {} has {} entries but {} has {}", vocab.source, kTypesKey,
           vocab.token_types.size(), kTokensKey, n);
  }

  // Defaults per model, as llama.cpp's loader sets them before reading the optional keys.
  int32_t bos = -1, eos = -1, unk = -1;
  const GgufPreTokenizer* pre = vocab.model == "gpt2" ? FindGgufPreTokenizer(vocab.pre) : nullptr;
  if (vocab.model == "llama") {
    bos = 1, eos = 2, unk = 0;
    vocab.add_space_prefix = true;
    vocab.add_bos = true;
  } else if (vocab.model == "gpt2") {
    if (file.Find(kMergesKey) == nullptr)
      Fail("{}: {} is missing (required for the gpt2 tokenizer)", vocab.source, kMergesKey);
    vocab.merges = file.GetArrayOf<std::string>(kMergesKey);
    bos = pre && pre->no_default_bos ? -1 : 11, eos = 11;
    if (pre) vocab.add_bos = pre->add_bos;
  }
  // A default the vocabulary cannot hold means "no such token".
  const auto fit = [n](int32_t id) { return id >= 0 && static_cast<size_t>(id) < n ? id : -1; };
  vocab.bos_id = ReadSpecialId(file, "tokenizer.ggml.bos_token_id", fit(bos), n);
  vocab.eos_id = ReadSpecialId(file, "tokenizer.ggml.eos_token_id", fit(eos), n);
  vocab.unk_id = ReadSpecialId(file, "tokenizer.ggml.unknown_token_id", fit(unk), n);
  vocab.add_space_prefix =
      file.GetBoolOr("tokenizer.ggml.add_space_prefix", vocab.add_space_prefix);
  vocab.add_bos = file.GetBoolOr("tokenizer.ggml.add_bos_token", vocab.add_bos);
  // llama.cpp puts BOS before Gemma 4's text whatever the file says (its PR 21500).
  if (pre && pre->raw_utf8) vocab.add_bos = true;
  return vocab;
}

VocabIndex::VocabIndex(const VocabData& vocab) : tokens_(vocab.tokens), scores_(vocab.scores) {
  const size_t n = tokens_.size();
  const std::string src = vocab.source.empty() ? std::string("vocabulary") : vocab.source;
  if (n == 0) Fail("{}: the vocabulary has no tokens", src);
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    Fail("{}: {} tokens are more than token ids can address", src, n);
  if (!scores_.empty() && scores_.size() != n)
    Fail("{}: {} scores for {} tokens", src, scores_.size(), n);
  if (!vocab.token_types.empty() && vocab.token_types.size() != n)
    Fail("{}: {} token types for {} tokens", src, vocab.token_types.size(), n);
  for (const auto& [name, id] : {std::pair{"bos", vocab.bos_id}, std::pair{"eos", vocab.eos_id},
                                 std::pair{"unk", vocab.unk_id}}) {
    if (id < -1 || id >= static_cast<int64_t>(n))
      Fail("{}: {} token id {} is outside the vocabulary of {} tokens", src, name, id, n);
  }

  ids_.reserve(n);
  attrs_.resize(n, TokenAttr::kNormal);
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp gives empty entries a placeholder text so every id stays addressable.
    if (tokens_[i].empty()) tokens_[i] = "[EMPTY_" + std::to_string(i) + "]";
    if (!ids_.emplace(tokens_[i], static_cast<int32_t>(i)).second)
      Fail("{}: tokenizer.ggml.tokens[{}] '{}' duplicates token {}", src, i, tokens_[i],
           ids_.at(tokens_[i]));
    if (!vocab.token_types.empty()) attrs_[i] = AttrFromType(vocab.token_types[i]);
  }
  const auto force = [this](std::string_view name, TokenAttr attr) {
    if (const int32_t id = Find(name); id >= 0) attrs_[static_cast<size_t>(id)] = attr;
  };
  for (std::string_view name : kForcedControl) force(name, TokenAttr::kControl);
  for (std::string_view name : kForcedUserDefined) force(name, TokenAttr::kUserDefined);
  // The harmony format ends messages with <|end|> but generation with <|return|>/<|call|>, so
  // there <|end|> is ordinary (user-defined) text rather than a control token.
  if (Find("<|return|>") >= 0 && Find("<|call|>") >= 0) force("<|end|>", TokenAttr::kUserDefined);

  for (size_t i = 0; i < n; ++i) {
    if (attrs_[i] == TokenAttr::kUserDefined) user_defined_.push_back(static_cast<int32_t>(i));
    if (attrs_[i] == TokenAttr::kUserDefined || attrs_[i] == TokenAttr::kControl || attrs_[i] == TokenAttr::kUnknown)
      special_.push_back(static_cast<int32_t>(i));
  }
  for (auto* list : {&user_defined_, &special_})
    std::stable_sort(list->begin(), list->end(), [this](int32_t a, int32_t b) { return text(a).size() > text(b).size(); });
}

int32_t VocabIndex::Find(std::string_view piece) const {
  const auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::string VocabIndex::SentencePieceText(int32_t id) const {
  const std::string& piece = text(id);
  std::string out;
  switch (attr(id)) {
    case TokenAttr::kUserDefined:
      return piece;
    case TokenAttr::kNormal:
      for (size_t i = 0; i < piece.size(); ++i) {
        if (piece.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
          out += ' ';
          i += kSpaceMark.size() - 1;
        } else {
          out += piece[i];
        }
      }
      return out;
    case TokenAttr::kByte:
      // "<0xAB>"; llama.cpp reads the two hex digits after "<0x".
      if (unsigned value = 0; piece.size() == 6 && piece.starts_with("<0x") &&
                              std::from_chars(&piece[3], &piece[5], value, 16).ptr == &piece[5])
        out = std::string(1, static_cast<char>(value));
      return out;
    default:  // control, unknown, unused, undefined: no text, as llama.cpp renders them
      return out;
  }
}

std::vector<TextFragment> VocabIndex::Partition(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({text, -1});
  // Each user-defined token, longest first, splits every text fragment left so far at each of
  // its non-overlapping occurrences, scanning left to right.
  for (const int32_t id : parse_special ? special_ : user_defined_) {
    const std::string& needle = this->text(id);
    std::vector<TextFragment> next;
    next.reserve(fragments.size());
    for (const TextFragment& fragment : fragments) {
      if (fragment.token >= 0) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      for (size_t at = rest.find(needle); at != std::string_view::npos; at = rest.find(needle)) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({rest.substr(at, needle.size()), id});
        rest.remove_prefix(at + needle.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    fragments = std::move(next);
  }
  return fragments;
}

}  // namespace lowbit
