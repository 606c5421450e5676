// The tokenizer.* keys of a GGUF file, as llama.cpp's converter writes them: from a SentencePiece
// tokenizer.model (the `llama` vocabulary: pieces, scores and token types, BOS/EOS/UNK ids and the
// add-BOS/EOS flags of tokenizer_config.json), or copied from a GGUF file's own vocabulary.
#pragma once

#include <filesystem>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"

namespace lowbit {

// `tokenizer` is a tokenizer.model, a model folder holding one, or a .gguf file. The vocabulary
// is padded to config.vocab_size with unused "[PAD<id>]" tokens as the converter does; a larger
// vocabulary than the model's is an Error naming the file.
std::vector<GgufKeyValue> GgufVocabularyFor(const std::filesystem::path& tokenizer, const ModelConfig& config);

}  // namespace lowbit
