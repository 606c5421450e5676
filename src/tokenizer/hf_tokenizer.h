// Hugging Face tokenizer.json (the `tokenizers` library's format, what AutoTokenizer loads as a
// fast tokenizer): added tokens, normalizer, pre-tokenizer, a BPE model (byte-level as in GPT-2,
// Llama-3 and Qwen, or SentencePiece-style with byte fallback as in Llama-2, Mistral and Phi-3),
// the post-processor's BOS, and the decoder. tokenizer_config.json beside it, when present, gives
// add_bos_token and the BOS/EOS tokens as transformers reads them. Ids equal the `tokenizers`
// library's `encode(text).ids`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/json_util.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {

// The `model` object of type BPE: vocab, merges (as "a b" strings or [a, b] pairs), unk_token,
// byte_fallback, fuse_unk, ignore_merges.
class HfBpeModel {
 public:
  explicit HfBpeModel(const JsonView& model);

  // Appends the ids of one pre-tokenized piece.
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t Find(std::string_view token) const;
  // The vocabulary entry of `id`, or nullptr.
  const std::string* Token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    int32_t rank, result;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::vector<std::string> tokens_;  // by id; ids missing from the vocab are empty
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0xXX> tokens for byte fallback, -1 where absent
};

struct HfAddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

class HfTokenizer final : public Tokenizer {
 public:
  // `json_path` is a tokenizer.json; tokenizer_config.json in the same folder is read if present.
  // Throws Error naming the file and key path for anything malformed or unsupported.
  explicit HfTokenizer(const std::filesystem::path& json_path);

  // add_bos: put the post-processor's leading special tokens (BOS) in front, as encode(...,
  // add_special_tokens=True) does; tokens the template appends after the text (EOS) are not added.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  // Special tokens decode to nothing (skip_special_tokens=True); everything else through the
  // file's decoder. A token counts as the start of the text (where decoders drop the leading
  // space) after no token or after a special one.
  std::string DecodeToken(int32_t id, int32_t previous) const override;
  // Exactly the library's decode(ids, skip_special_tokens=True): the start of the text is the
  // first token that is not special.
  std::string Decode(const std::vector<int32_t>& ids) const override;
  std::string Piece(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  // Whether Encode(text, true) puts anything in front (the model expects a BOS).
  bool adds_bos() const { return !prefix_ids_.empty(); }

 private:
  // A stretch of input: text still to tokenize, or an added token found in it (token >= 0).
  struct Fragment {
    std::string text;
    int32_t token = -1;
    bool at_start = false;
  };
  // Splits `text` at the added tokens of one pass (normalized or not), leftmost-longest.
  void SplitAdded(const Fragment& fragment, bool normalized_pass, std::vector<Fragment>& out) const;
  void EncodeText(const Fragment& fragment, std::vector<int32_t>& out) const;
  const HfAddedToken* Added(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The text of `id` through the decoder; "" for special tokens.
  std::string DecodeOne(int32_t id, bool first) const;

  std::string source_;
  std::unique_ptr<HfNormalizer> normalizer_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  std::unique_ptr<HfDecoder> decoder_;
  std::unique_ptr<HfBpeModel> model_;
  std::vector<HfAddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  // Added tokens per pass (values index added_): the raw pass matches the content of tokens with
  // normalized = false in the input, the normalized pass the normalized content of the others.
  TokenTrie raw_tokens_, normalized_tokens_;
  std::vector<int32_t> prefix_ids_;  // what add_bos puts in front
  int32_t bos_id_ = -1, eos_id_ = -1, vocab_size_ = 0;
};

}  // namespace lowbit
