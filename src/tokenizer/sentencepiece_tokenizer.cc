#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"

namespace lowbit {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& path) {
    const auto status = processor_.Load(path.string());
    if (!status.ok()) Fail("{}: cannot load SentencePiece model: {}", path.string(), status.ToString());
  }

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) Fail("SentencePiece encode failed: {}", status.ToString());
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_bos) out.push_back(bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string DecodeToken(int32_t id, int32_t previous) const override {
    if (id < 0 || id >= vocab_size() || processor_.IsControl(id)) return "";
    if (processor_.IsByte(id)) {
      const std::string piece = processor_.IdToPiece(id);  // "<0xAB>"
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    }
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
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> LoadSentencePiece(const std::filesystem::path& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

}  // namespace lowbit
