// llama.cpp's "llama" (SPM-style) tokenizer over a GGUF vocabulary: spaces become U+2581, a
// space is prepended when add_space_prefix is set, then adjacent pieces merge greedily by the
// score of the merged piece (highest first, leftmost on ties); whatever is left that is not a
// token falls back to its bytes as <0xXX> tokens. Ids match llama.cpp's llama_tokenize with
// add_special = false, parse_special = false (plus BOS when asked).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace lowbit {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const VocabData& vocab);

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

 private:
  std::vector<int32_t> EncodeText(std::string_view text, bool add_bos, bool parse_special) const;
  // Appends the ids of one text fragment (already space-escaped) to `out`.
  void EncodeFragment(std::string_view text, std::vector<int32_t>& out) const;
  // The id of byte `b` for byte fallback.
  int32_t ByteToken(uint8_t b) const;

  VocabIndex index_;
  std::string source_;
  int32_t bos_id_, eos_id_, unk_id_;
  bool add_space_prefix_;
  bool adds_bos_;  // tokenizer.ggml.add_bos_token: Encode's add_bos puts BOS first only when set
  int32_t byte_ids_[256];  // -1 where the vocabulary has neither <0xXX> nor the raw byte
};

}  // namespace lowbit
