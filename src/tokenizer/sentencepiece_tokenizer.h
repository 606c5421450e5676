// SentencePiece models (tokenizer.model) through Debian's libsentencepiece.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace lowbit {

std::unique_ptr<Tokenizer> LoadSentencePiece(const std::filesystem::path& model_file);

}  // namespace lowbit
