#include "tokenizer/sentencepiece_tokenizer.h"

#include <exception>
#include <string>
#include <string_view>

#include "core/error.h"

namespace lowbit {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& path) : source_(path.string()) {
    sentencepiece::util::Status status;
    try {
      status = processor_.Load(source_);
    } catch (const std::exception& e) {
      // libsentencepiece mostly reports bad models through its status, but its trie builder
      // (darts-clone) throws on some pieces, e.g. one that starts with a NUL byte.
      Fail("{}: cannot load SentencePiece model: {}", source_, e.what());
    }
    if (!status.ok()) Fail("{}: cannot load SentencePiece model: {}", source_, status.ToString());
    // Byte pieces are decoded by their text: each must be exactly "<0xHH>".
    VocabData vocab;
    vocab.source = source_;
    vocab.model = "llama";
    for (int32_t id = 0; id < vocab_size(); ++id) {
      if (processor_.IsByte(id) && ByteOf(processor_.IdToPiece(id)) < 0)
        Fail("{}: piece {} ('{}') is a byte piece but not of the form <0xHH>", source_, id, processor_.IdToPiece(id));
      vocab.tokens.push_back(processor_.IdToPiece(id));
      vocab.token_types.push_back(SentencePieceTokenType(processor_, id));
    }
    specials_ = std::make_unique<VocabIndex>(vocab);
  }

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int> ids;
    sentencepiece::util::Status status;
    try {
      status = processor_.Encode(text, &ids);
    } catch (const std::exception& e) {
      Fail("{}: SentencePiece encode failed: {}", source_, e.what());
    }
    if (!status.ok()) Fail("{}: SentencePiece encode failed: {}", source_, status.ToString());
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_bos) {
      if (bos_id() < 0) Fail("{}: the SentencePiece model has no BOS token (bos_id is {})", source_, bos_id());
      out.push_back(bos_id());
    }
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  // llama.cpp's parse_special on the GGUF of this model: control, unknown and user-defined pieces in the
  // text become their ids, and SentencePiece encodes each stretch between them with its dummy-prefix
  // space, as llama.cpp prefixes one after every special token.
  std::vector<int32_t> EncodeWithSpecialTokens(std::string_view text) const override {
    std::vector<int32_t> out;
    for (const TextFragment& fragment : specials_->Partition(text, /*parse_special=*/true)) {
      if (fragment.token >= 0) {
        out.push_back(fragment.token);
      } else {
        const std::vector<int32_t> ids = Encode(fragment.text, false);
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    return out;
  }

  std::string DecodeToken(int32_t id, int32_t previous) const override {
    if (id < 0 || id >= vocab_size() || processor_.IsControl(id)) return "";
    if (processor_.IsByte(id)) return std::string(1, static_cast<char>(ByteOf(processor_.IdToPiece(id))));
    std::string piece = processor_.IdToPiece(id);
    std::string text;
    for (size_t i = 0; i < piece.size(); ++i) {
      if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 marks a space
        text += ' ';
        i += 2;
      } else {
        text += piece[i];
      }
    }
    // SentencePiece drops the space it added in front of the first word.
    if ((previous < 0 || previous == bos_id()) && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return text;
  }

  std::string Piece(int32_t id) const override { return processor_.IdToPiece(id); }
  int32_t vocab_size() const override { return processor_.GetPieceSize(); }
  int32_t bos_id() const override { return processor_.bos_id(); }
  int32_t eos_id() const override { return processor_.eos_id(); }

 private:
  // The byte of a "<0xHH>" piece, or -1 for any other text.
  static int ByteOf(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
    int value = 0;
    for (const char c : piece.substr(3, 2)) {
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return -1;
      value = value * 16 + digit;
    }
    return value;
  }

  std::string source_;
  sentencepiece::SentencePieceProcessor processor_;
  std::unique_ptr<VocabIndex> specials_;  // the pieces' llama.cpp attributes, for EncodeWithSpecialTokens
};

}  // namespace

std::unique_ptr<Tokenizer> LoadSentencePiece(const std::filesystem::path& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

GgufTokenType SentencePieceTokenType(const sentencepiece::SentencePieceProcessor& sp, int id) {
  return sp.IsUnknown(id) ? kTokenUnknown : sp.IsControl(id) ? kTokenControl : sp.IsUnused(id) ? kTokenUnused
         : sp.IsByte(id)  ? kTokenByte    : kTokenNormal;
}

}  // namespace lowbit
