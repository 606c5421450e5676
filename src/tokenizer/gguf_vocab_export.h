// The tokenizer.* keys of a GGUF file, as llama.cpp's converter writes them: from a SentencePiece
// tokenizer.model (the `llama` vocabulary: pieces, scores and token types, BOS/EOS/UNK ids and the
// add-BOS/EOS flags of tokenizer_config.json), from a byte-level BPE tokenizer.json (the `gpt2`
// vocabulary: tokens, merges, token types, the pre-tokenizer's llama.cpp name), or copied from a
// GGUF file's own vocabulary.
#pragma once

#include <filesystem>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"

namespace lowbit {

// `tokenizer` is a tokenizer.model, a tokenizer.json, a model folder holding one (tokenizer.model
// first: it carries the scores llama.cpp's `llama` vocabulary needs), or a .gguf file. The vocabulary
// is padded to config.vocab_size with unused "[PAD<id>]" tokens as the converter does; a larger
// vocabulary than the model's is an Error naming the file.
std::vector<GgufKeyValue> GgufVocabularyFor(const std::filesystem::path& tokenizer, const ModelConfig& config);

// The file GgufVocabularyFor reads for `tokenizer`; Error when there is none, so that a command can
// fail before it reads the model.
std::filesystem::path GgufVocabularyFile(const std::filesystem::path& tokenizer);

}  // namespace lowbit
