// SentencePiece models (tokenizer.model) through Debian's libsentencepiece. Special tokens written in
// a text (EncodeWithSpecialTokens: a rendered chat template) are found as llama.cpp finds them in the
// GGUF its converter makes of the same model, and the text between them goes through SentencePiece.
#pragma once

#include <sentencepiece_processor.h>

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace lowbit {

std::unique_ptr<Tokenizer> LoadSentencePiece(const std::filesystem::path& model_file);

// The llama.cpp token type of piece `id`, as its converter (convert_hf_to_gguf.py) derives it:
// unknown, control, unused, byte, else normal.
GgufTokenType SentencePieceTokenType(const sentencepiece::SentencePieceProcessor& sp, int id);

}  // namespace lowbit
